"""Transactional replication at a SQLite subscriber: the staged commands (their temporary table; their
JSON rows read in SQL for the set-based apply, each value as the row-at-a-time apply binds it). SQLite
has no stored procedures and no COPY: those hooks are the defaults, which refuse."""

from __future__ import annotations

from sparksync.dialects.defaults import TransactionalDefaults
from sparksync.dialects.protocols import Dialect
from sparksync.names import TableName
from sparksync.types import Kind, SqlType


class SQLiteStagedRows:
    """``StagedRows`` on SQLite: ``json_extract``, and the driver's functions where it reads a value
    otherwise than Python does (floats, base64 bytes, text holding U+0000)."""

    def staged_values(self: Dialect, table: TableName, columns, alias: str,
                      payload: str = "payload") -> tuple[str, list[str]]:
        return "", [self.json_typed(f"{alias}.{payload}", name, t) for name, t in columns]

    def json_field(self, expr: str, name: str) -> str:
        return f"json_extract({expr}, '$.\"{name}\"')"

    def json_typed(self: Dialect, expr: str, name: str, t: SqlType) -> str:
        value = self.json_field(expr, name)
        if t.kind in (Kind.TIMESTAMP, Kind.TIMESTAMPTZ):
            return f"replace({value}, 'T', ' ')"        # isoformat(sep=" "), as the adapter stores it
        if t.kind in (Kind.REAL, Kind.DOUBLE):
            return f"sparksync_float({expr} -> '$.\"{name}\"')"   # Python's float(), bit for bit
        if t.kind is Kind.BYTES:
            return f"sparksync_unbase64({value})"
        if t.kind in (Kind.TEXT, Kind.JSON):
            # json_extract ends a string at U+0000; the rare payload holding one is read by Python
            return (f"CASE WHEN instr({expr}, '\\u0000') > 0 THEN sparksync_text({expr} -> '$.\"{name}\"') "
                    f"ELSE {value} END")
        return value

    def json_has(self, expr: str, name: str) -> str:
        return f"(json_type({expr}, '$.\"{name}\"') IS NOT NULL)"


class SQLiteTransactionalHooks(TransactionalDefaults):
    """``TransactionalHooks`` on SQLite: the command staging table."""

    def tx_staging_table_ddl(self, table: str) -> str:
        return (f"CREATE TEMP TABLE IF NOT EXISTS {table} (ord INTEGER PRIMARY KEY, article_id INTEGER NOT NULL, "
                "op TEXT NOT NULL, wave INTEGER, after TEXT, before TEXT)")
