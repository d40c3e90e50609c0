"""What the dialects share: one mixin per concern of ``protocols.py`` with the implementations that do
not differ between databases (or are the common case a dialect overrides). ``base.py`` composes them.

A default that uses another concern (CREATE TABLE quotes names and asks for a new rowguid) is written
against the whole :class:`~.protocols.Dialect`; the rest need only their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sparksync.errors import ConfigurationError
from sparksync.names import TableName, quote_ident
from sparksync.types import Kind, SqlType

if TYPE_CHECKING:
    from sparksync.dialects.model import Column, TableInfo
    from sparksync.dialects.protocols import Capabilities, Dialect
    from sparksync.dialects.replica import Replica


class DriverDefaults:
    capabilities: Capabilities
    begin_write_sql: str = "BEGIN"

    def commit(self, raw: Any) -> None:
        raw.execute("COMMIT")

    def rollback(self, raw: Any) -> None:
        raw.execute("ROLLBACK")

    def relax_commit_durability(self, replica: Replica) -> None:
        return None

    def restore_commit_durability(self, replica: Replica) -> None:
        return None

    def set_lock_timeout(self, replica: Replica, timeout: str) -> None:
        raise NotImplementedError(f"{self.capabilities.name} has one writer at a time")

    def typed_param(self, t: SqlType) -> str:
        return self.capabilities.paramstyle

    def uuid_param(self) -> str:
        return self.capabilities.paramstyle

    def json_param(self, value: Any) -> Any:
        return json.dumps(value, separators=(",", ":"), sort_keys=True)


class NamingDefaults:
    def quote(self, name: str) -> str:
        return quote_ident(name)

    def fold_identifier(self, name: str) -> str:
        return name

    def destination_table(self: Dialect, source: TableName) -> TableName:
        if self.capabilities.supports_schemas:
            return self.resolve_name(source)
        return TableName(None, source.name)

    def table_sql(self: Dialect, name: TableName) -> str:
        name = self.resolve_name(name)
        if name.schema is None:
            return self.quote(name.name)
        return f"{self.quote(name.schema)}.{self.quote(name.name)}"

    def metadata_table_sql(self: Dialect, name: str) -> str:
        return self.table_sql(self.metadata_table_name(name))

    def rowguid_index_name(self, table: TableName, rowguid: str) -> str:
        return f"MSmerge_idx_{table.slug}_{rowguid}"[:63]


class DdlDefaults:
    def render_type(self: Dialect, t: SqlType) -> str:
        if t.kind is Kind.TEXT and t.fixed:
            return self.char_format.format(length=t.length or 1)
        if t.kind is Kind.TEXT and t.length:
            return self.varchar_format.format(length=t.length)
        if t.kind is Kind.DECIMAL:
            if t.precision is None:
                return self.numeric_name
            return self.decimal_format.format(precision=t.precision, scale=t.scale)
        return self.type_names[t.kind]

    def render_column_type(self: Dialect, table: TableInfo, column: Column) -> str:
        return self.render_type(column.type)

    def render_create_table(self: Dialect, table: TableInfo, rowguid: str | None, index: bool = True) -> list[str]:
        cols = []
        for c in table.columns:
            spec = f"{self.quote(c.name)} {self.render_column_type(table, c)}"
            if not c.nullable or c.name in table.primary_key:
                spec += " NOT NULL"
            if rowguid is not None and c.name == rowguid:
                spec += f" DEFAULT ({self.new_rowguid_sql()})"
            cols.append(spec)
        cols.append("PRIMARY KEY (" + ", ".join(self.quote(c) for c in table.primary_key) + ")")
        for fk in table.foreign_keys:
            cols.append(
                "FOREIGN KEY (" + ", ".join(self.quote(c) for c in fk.columns) + ") REFERENCES "
                + self.table_sql(fk.ref_table) + " (" + ", ".join(self.quote(c) for c in fk.ref_columns) + ")"
            )
        stmts = []
        name = self.resolve_name(table.name)
        if name.schema is not None and self.capabilities.supports_schemas:
            stmts.append(f"CREATE SCHEMA IF NOT EXISTS {self.quote(name.schema)}")
        stmts.append(f"CREATE TABLE {self.table_sql(table.name)} (\n  " + ",\n  ".join(cols) + "\n)")
        if rowguid is not None and index:
            stmts.append(self.render_rowguid_index(table.name, rowguid))
        return stmts

    def render_rowguid_index(self: Dialect, table: TableName, rowguid: str) -> str:
        idx = self.quote(self.rowguid_index_name(table, rowguid))
        return f"CREATE UNIQUE INDEX IF NOT EXISTS {idx} ON {self.table_sql(table)} ({self.quote(rowguid)})"

    def json_literal(self, text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    def rename_column(self: Dialect, replica: Replica, table: TableName, old: str, new: str) -> list[str]:
        sql = f"ALTER TABLE {self.table_sql(table)} RENAME COLUMN {self.quote(old)} TO {self.quote(new)}"
        replica.execute(sql)
        return [sql]


class DataMovementDefaults:
    def db_converters(self, types: Sequence[SqlType]) -> list:
        return [self._converter(t) for t in types]

    def _converter(self, t: SqlType):
        """The converter of one type (``db_converters``); None: the driver takes the logical value."""
        return None

    def bulk_load(self: Dialect, replica: Replica, table: TableName, columns: Sequence[str], types: Sequence[SqlType],
                  rows: Iterable[Sequence[Any]]) -> int:
        convs = self.db_converters(types)
        if all(c is None for c in convs):           # the driver takes every value as it is
            return self.load_rows(replica, self.table_sql(table), columns, rows)
        return self.load_rows(replica, self.table_sql(table), columns,
                              (tuple(v if (v is None or c is None) else c(v) for v, c in zip(r, convs)) for r in rows))

    def load_rows(self: Dialect, replica: Replica, table_sql: str, columns: Sequence[str],
                  rows: Iterable[Sequence[Any]]) -> int:
        n = 0

        def counted():
            nonlocal n
            for r in rows:
                n += 1
                yield r

        ph = ", ".join([self.capabilities.paramstyle] * len(columns))
        replica.executemany(f"INSERT INTO {table_sql} ({', '.join(self.quote(c) for c in columns)}) VALUES ({ph})",
                            counted())
        return n

    def delete_some_sql(self, table_sql: str, where: str, limit: int) -> str:
        return (f"DELETE FROM {table_sql} WHERE rowid IN "
                f"(SELECT rowid FROM {table_sql} WHERE {where} LIMIT {int(limit)})")

    def row_lock_clause(self) -> str:
        return ""


class MergeStagingDefaults:
    capabilities: Capabilities

    def load_staging(self, replica: Replica, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]) -> None:
        p = self.capabilities.paramstyle
        replica.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([p] * len(columns))})",
                            list(zip(*values)))

    def distinct_sql(self, a: str, b: str) -> str:
        return f"{a} IS DISTINCT FROM {b}"

    def lineage_without_sql(self: Dialect, lineage: str, nickname: int) -> str:
        return self.json_without_key_sql(lineage, str(int(nickname)))


class MergeHooksDefaults:
    capabilities: Capabilities

    def generation_writers(self, replica: Replica, generation: int) -> list[dict]:
        return []

    def captures_from_log(self, replica: Replica) -> bool:
        return False

    def log_capture_possible(self, replica: Replica) -> bool:
        return False

    def capture_state(self, replica: Replica) -> dict:
        return {"mode": "triggers"}

    def skip_log(self, replica: Replica) -> None:
        return None

    def peek_log(self, replica: Replica, articles: Sequence[dict]) -> list[tuple]:
        return []

    def log_mark(self, replica: Replica) -> int:
        return 0

    def capture_problems(self, replica: Replica) -> list[str]:
        return []

    def prepare_log_capture(self, replica: Replica) -> None:
        raise ConfigurationError(f"{replica.label}: change_capture = 'log' reads a PostgreSQL server's write-ahead "
                                 f"log; {self.capabilities.product} databases are tracked by triggers "
                                 "(change_capture = 'triggers')", obj=replica.label)

    def drop_log_capture(self, replica: Replica) -> None:
        return None

    def capture_from_log(self, replica: Replica, ctx: dict) -> None:
        raise NotImplementedError("this database's changes are tracked by triggers")

    def stop_capture_from_log(self, replica: Replica, ctx: dict) -> None:
        raise NotImplementedError("this database's changes are tracked by triggers")


class TransactionalDefaults:
    capabilities: Capabilities

    def render_procedure(self, shape: Any, types: dict[str, SqlType]) -> list[str]:
        raise NotImplementedError(f"{self.capabilities.name} has no stored procedures")

    def copy_text_lines(self, replica: Replica, table: str, columns: Sequence[str], lines: Iterable[bytes]) -> None:
        raise NotImplementedError(f"{self.capabilities.name} has no COPY (takes_server_text is false)")

    def procedure_schema(self, replica: Replica, name: str, fallback: str | None) -> str | None:
        raise NotImplementedError(f"{self.capabilities.name} has no stored procedures")

    def procedure_exists(self, replica: Replica, schema: str | None, name: str) -> bool:
        raise NotImplementedError(f"{self.capabilities.name} has no stored procedures")


class FilesDefaults:
    capabilities: Capabilities

    def damage(self, url: str) -> str | None:
        return None

    def set_aside(self, url: str, why: str = "damaged") -> str:
        raise NotImplementedError(f"{self.capabilities.product} databases are not set aside")


class ValueChecksDefaults:
    capabilities: Capabilities

    def unstorable(self, t: SqlType, value: Any) -> str | None:
        if value is None:
            return None
        if not self.capabilities.text_holds_nul and t.kind in (Kind.TEXT, Kind.JSON) and isinstance(value, str) \
                and ("\x00" in value or (t.kind is Kind.JSON and "\\u0000" in value)):
            return f"{self.capabilities.name} cannot store the NUL character (U+0000) in text"
        if not self.capabilities.float_holds_nan and t.kind in (Kind.REAL, Kind.DOUBLE) and isinstance(value, float) \
                and value != value:
            return f"{self.capabilities.name} cannot store NaN in a float column (it would become NULL)"
        return None

    def unstorable_markers(self) -> tuple[str, ...]:
        out = []
        if not self.capabilities.text_holds_nul:
            out.append("\\u0000")
        if not self.capabilities.float_holds_nan:
            out.append('"NaN"')
        return tuple(out)
