"""The table model every dialect reflects into and renders from: columns with logical types, the
primary key, foreign keys, single-column unique keys; stored with the articles as a dict."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparksync.errors import ConfigurationError
from sparksync.names import TableName, check_identifier
from sparksync.types import SqlType


@dataclass(frozen=True)
class Column:
    name: str
    type: SqlType
    nullable: bool = True
    default: str | None = None    # raw SQL text of the default, as the database reports it
    generated: bool = False       # GENERATED ALWAYS AS (...) STORED: computed by the database


@dataclass(frozen=True)
class ForeignKey:
    columns: tuple[str, ...]
    ref_table: TableName
    ref_columns: tuple[str, ...]
    name: str | None = None


@dataclass(frozen=True)
class TableInfo:
    """A reflected table: columns in order, primary key, foreign keys and single-column unique keys."""

    name: TableName
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    foreign_keys: tuple[ForeignKey, ...] = ()
    unique_columns: frozenset[str] = field(default_factory=frozenset)

    def column(self, name: str) -> Column | None:
        for c in self.columns:
            if c.name == name:
                return c
        lowered = name.lower()
        for c in self.columns:
            if c.name.lower() == lowered:
                return c
        return None

    @property
    def key_columns(self) -> list[Column]:
        """The primary key's columns, in key order."""
        by_name = {c.name: c for c in self.columns}
        return [by_name[k] for k in self.primary_key]

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def signature(self) -> list[list[str]]:
        """What schema drift is checked against: column names and types, in order."""
        return [[c.name, str(c.type)] for c in self.columns]


def to_table_dict(t: TableInfo) -> dict:
    return {
        "schema": t.name.schema,
        "name": t.name.name,
        "columns": [
            {"name": c.name, "type": c.type.to_dict(), "nullable": c.nullable} for c in t.columns
        ],
        "primary_key": list(t.primary_key),
        "foreign_keys": [
            {"columns": list(fk.columns), "ref_schema": fk.ref_table.schema, "ref_table": fk.ref_table.name,
             "ref_columns": list(fk.ref_columns), "name": fk.name}
            for fk in t.foreign_keys
        ],
        "unique_columns": sorted(t.unique_columns),
    }


def from_table_dict(d: dict) -> TableInfo:
    return TableInfo(
        name=TableName(d.get("schema"), d["name"]),
        columns=tuple(Column(c["name"], SqlType.from_dict(c["type"]), c.get("nullable", True)) for c in d["columns"]),
        primary_key=tuple(d["primary_key"]),
        foreign_keys=tuple(
            ForeignKey(tuple(f["columns"]), TableName(f.get("ref_schema"), f["ref_table"]), tuple(f["ref_columns"]),
                       f.get("name"))
            for f in d.get("foreign_keys", [])
        ),
        unique_columns=frozenset(d.get("unique_columns", [])),
    )


def describe_drift(published: TableInfo, current: TableInfo) -> list[str]:
    """How a table differs from what was published: columns added, dropped, retyped; the key."""
    before = {c.name: str(c.type) for c in published.columns}
    after = {c.name: str(c.type) for c in current.columns}
    out = [f"column {n} was added" for n in after if n not in before]
    out += [f"column {n} was dropped" for n in before if n not in after]
    out += [f"column {n} changed type from {before[n]} to {after[n]}" for n in before
            if n in after and before[n] != after[n]]
    if tuple(published.primary_key) != tuple(current.primary_key):
        out.append(f"primary key changed from {list(published.primary_key)} to {list(current.primary_key)}")
    return out


def table_drift(expected: TableInfo, actual: TableInfo) -> list[str]:
    """How a replica's table differs from an article (types compared by family: a subscriber's types
    are mapped for its database): missing, unexpected and retyped columns."""
    missing = [c.name for c in expected.columns if actual.column(c.name) is None]
    extra = [c.name for c in actual.columns if expected.column(c.name) is None]
    wrong = [c.name for c in expected.columns
             if (found := actual.column(c.name)) is not None and not found.type.compatible_with(c.type)]
    out = []
    for what, cols in (("missing column", missing), ("unexpected column", extra), ("changed type of column", wrong)):
        out += [f"{what} {c}" for c in cols]
    return out


def parse_column_definition(text: str, where: str) -> tuple[str, str]:
    """``--add-column`` text -> (name, type). One column with a type and nothing else: a second
    statement, NOT NULL, DEFAULT, PRIMARY KEY, CHECK, REFERENCES or COLLATE are refused (a replicated
    schema change adds a plain nullable column), never silently dropped."""
    import sqlglot
    from sqlglot import exp

    usage = f"{where}: --add-column takes 'name type', e.g. 'Email varchar(100)'"
    if text.split():
        check_identifier(text.split()[0], "column name")     # a quote or a control character: said as such
    try:
        statements = sqlglot.parse(f"CREATE TABLE t ({text})", read="postgres")
    except sqlglot.errors.SqlglotError:
        raise ConfigurationError(f"{usage}; {text!r} is not one column definition") from None
    columns = statements[0].this.expressions if len(statements) == 1 and statements[0] else []
    if len(columns) != 1 or not isinstance(columns[0], exp.ColumnDef) or columns[0].args.get("kind") is None:
        raise ConfigurationError(f"{usage}; {text!r} is not one column definition")
    column = columns[0]
    constraints = column.args.get("constraints") or []
    if constraints:
        what = ", ".join(c.sql("postgres") for c in constraints)
        raise ConfigurationError(f"{where}: --add-column {text!r}: {what} is not replicated; a schema change adds a "
                                 "nullable column with a type and nothing else")
    return column.name, column.args["kind"].sql("postgres")
