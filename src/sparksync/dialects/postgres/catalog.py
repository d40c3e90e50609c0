"""PostgreSQL's catalog: a table reflected from ``pg_catalog`` (columns, primary and foreign keys, the
columns a unique constraint or index covers alone), column types as logical types, which tables and
indexes exist."""

from __future__ import annotations

import re

from sparksync.dialects.model import Column, ForeignKey, TableInfo
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.errors import SchemaError
from sparksync.names import TableName
from sparksync.types import Kind, SqlType, decimal_type

_TYPE = re.compile(r"^([a-z_ ]+?)(?:\((\d+)(?:,(\d+))?\))?(\[\])?$")
_PRECISION = re.compile(r"\(\d+\)")


def table_oid(replica: Replica, name: TableName) -> int | None:
    """The oid of the table ``name`` (resolved: with its schema), or None when there is none."""
    return replica.scalar(
        "SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')", (name.schema, name.name))


class PostgresCatalog:
    """``Catalog`` on PostgreSQL."""

    def metadata_table_exists(self: Dialect, replica: Replica, name: str) -> bool:
        return bool(replica.scalar("SELECT to_regclass(%s) IS NOT NULL", (self.metadata_table_sql(name),)))

    def index_exists(self, replica: Replica, schema: str | None, name: str) -> bool:
        return bool(replica.scalar("SELECT count(*) FROM pg_catalog.pg_indexes WHERE schemaname = "
                                   "coalesce(%s, current_schema()) AND indexname = %s", (schema, name)))

    def similar_tables(self, replica: Replica, name: TableName) -> list[str]:
        rows = replica.query(
            "SELECT n.nspname, c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE lower(c.relname) = lower(%s) AND c.relkind IN ('r', 'p')",
            (name.name,))
        return [f"{s}.{t} (names are case-sensitive)" if t != name.name else f"{s}.{t}" for s, t in rows]

    def reflect_table(self: Dialect, replica: Replica, name: TableName) -> TableInfo | None:
        name = self.resolve_name(name)
        oid = table_oid(replica, name)
        if oid is None:
            return None
        cols = []
        for n, t, notnull, dflt, generated in replica.query(
                "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, "
                "pg_catalog.pg_get_expr(d.adbin, d.adrelid), a.attgenerated <> '' FROM pg_catalog.pg_attribute a "
                "LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", (oid,)):
            try:
                cols.append(Column(n, self.parse_type(t), not notnull, dflt, bool(generated)))
            except SchemaError as e:
                raise SchemaError(f"table {name}, column {n}: {e.message}", obj=f"{name}.{n}") from None
        cons = replica.query(
            "SELECT con.contype, con.conname, "
            "  ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(n, i) "
            "        JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n ORDER BY k.i), "
            "  rn.nspname, rc.relname, "
            "  ARRAY(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY k(n, i) "
            "        JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n ORDER BY k.i) "
            "FROM pg_catalog.pg_constraint con "
            "LEFT JOIN pg_catalog.pg_class rc ON rc.oid = con.confrelid "
            "LEFT JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace "
            "WHERE con.conrelid = %s AND con.contype IN ('p', 'f', 'u') ORDER BY con.conname", (oid,))
        pk: tuple[str, ...] = ()
        fks, unique = [], set()
        for contype, conname, keys, rschema, rtable, rkeys in cons:
            if contype == "p":
                pk = tuple(keys)
            elif contype == "f":
                fks.append(ForeignKey(tuple(keys), TableName(rschema, rtable), tuple(rkeys), conname))
            elif contype == "u" and len(keys) == 1:
                unique.add(keys[0])
        for (col,) in replica.query(
            "SELECT a.attname FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
            "WHERE i.indrelid = %s AND i.indisunique AND i.indnatts = 1 AND i.indpred IS NULL", (oid,)):
            unique.add(col)
        if len(pk) == 1:
            unique.add(pk[0])
        return TableInfo(name, tuple(cols), pk, tuple(fks), frozenset(unique))

    def parse_type(self, type_text: str) -> SqlType:
        text = " ".join(type_text.strip().lower().split())
        if text.startswith(("timestamp", "time")) and not text.endswith("[]"):
            # format_type() puts a fractional-seconds precision in the middle: timestamp(3) with time zone
            bare = _PRECISION.sub("", text).replace("  ", " ").strip()
            if bare in ("timestamptz", "timestamp with time zone"):
                return SqlType(Kind.TIMESTAMPTZ)
            if bare in ("timestamp", "timestamp without time zone"):
                return SqlType(Kind.TIMESTAMP)
            if bare in ("time", "time without time zone"):
                return SqlType(Kind.TIME)
        m = _TYPE.match(text)
        if not m or m.group(4):
            raise SchemaError(f"unsupported PostgreSQL column type {type_text!r}")
        base, a, b = m.group(1).strip(), m.group(2), m.group(3)
        a = int(a) if a else None
        b = int(b) if b else None
        simple = {
            "boolean": Kind.BOOLEAN, "bool": Kind.BOOLEAN, "smallint": Kind.SMALLINT, "int2": Kind.SMALLINT,
            "integer": Kind.INTEGER, "int": Kind.INTEGER, "int4": Kind.INTEGER, "bigint": Kind.BIGINT,
            "int8": Kind.BIGINT, "real": Kind.REAL, "float4": Kind.REAL, "double precision": Kind.DOUBLE,
            "float8": Kind.DOUBLE, "text": Kind.TEXT, "bytea": Kind.BYTES, "date": Kind.DATE, "uuid": Kind.UUID,
            "json": Kind.JSON, "jsonb": Kind.JSON, "citext": Kind.TEXT,
        }
        if base in simple:
            return SqlType(simple[base])
        if base in ("character varying", "varchar"):
            return SqlType(Kind.TEXT, length=a)
        if base in ("character", "char", "bpchar"):
            if a is None and base == "bpchar":
                return SqlType(Kind.TEXT)       # blank-padded without a length: as text
            return SqlType(Kind.TEXT, length=a or 1, fixed=True)
        if base in ("numeric", "decimal"):
            return decimal_type(a, b)
        if base == "money":
            raise SchemaError("type money is not supported: its text form depends on lc_monetary ('$12.34'); "
                              "store amounts as numeric")
        raise SchemaError(f"unsupported PostgreSQL column type {type_text!r} (arrays, enums, composite, range and "
                          "interval types are not replicated)")
