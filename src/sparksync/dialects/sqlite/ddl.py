"""SQLite's words for types and CREATE statements: declared types that give each column the affinity its
values need, a single-column integer key declared so that it is the rowid."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparksync.dialects.defaults import DdlDefaults
from sparksync.dialects.model import Column, TableInfo
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.sqlite.catalog import real_name
from sparksync.dialects.sqlite.redefine import redefine_column
from sparksync.types import Kind

if TYPE_CHECKING:
    from sparksync.dialects.replica import Replica


class SQLiteDdl(DdlDefaults):
    """``Ddl`` on SQLite."""

    type_names = {
        Kind.BOOLEAN: "BOOLEAN", Kind.SMALLINT: "SMALLINT", Kind.INTEGER: "INTEGER", Kind.BIGINT: "BIGINT",
        Kind.REAL: "FLOAT", Kind.DOUBLE: "DOUBLE PRECISION", Kind.TEXT: "TEXT", Kind.BYTES: "BLOB",
        Kind.DATE: "DATE", Kind.TIME: "TIME", Kind.TIMESTAMP: "TIMESTAMP", Kind.TIMESTAMPTZ: "TIMESTAMPTZ",
        Kind.UUID: "UUID", Kind.JSON: "JSON",
    }
    varchar_format = "VARCHAR({length})"
    decimal_format = "NUMERIC({precision},{scale})"
    char_format = "CHAR({length})"
    numeric_name = "NUMERIC"

    def serial_primary_key(self: Dialect, column: str) -> str:
        return f"{self.quote(column)} INTEGER PRIMARY KEY AUTOINCREMENT"   # never reused, even after deletes

    def render_column_type(self: Dialect, table: TableInfo, column: Column) -> str:
        # A single-column integer key is declared exactly INTEGER, so it is the rowid (as it is in a
        # SQLite publisher's table): one b-tree for rows and key instead of two.
        if list(table.primary_key) == [column.name] and column.type.kind in (Kind.INTEGER, Kind.BIGINT):
            return "INTEGER"
        return DdlDefaults.render_column_type(self, table, column)

    def alter_column(self: Dialect, replica: Replica, table: TableInfo, old: Column, new: Column) -> list[str]:
        # no ALTER COLUMN: the column's declaration rewritten in place (redefine.py)
        real = real_name(replica, self.resolve_name(table.name)) or table.name.name
        sql = redefine_column(replica, real, old, new, self.render_column_type(table, new))
        return [] if sql is None else [sql]
