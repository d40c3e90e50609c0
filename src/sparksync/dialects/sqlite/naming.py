"""SQLite's names: no schemas (``main`` is the database itself), so the replication metadata lives
beside the published tables."""

from __future__ import annotations

from sparksync.dialects.defaults import NamingDefaults
from sparksync.errors import InvalidNameError
from sparksync.names import TableName


class SQLiteNaming(NamingDefaults):
    """``Naming`` on SQLite."""

    def resolve_name(self, name: TableName) -> TableName:
        if name.schema is None or name.schema.lower() == "main":
            return TableName(None, name.name)
        raise InvalidNameError(
            f"table {name}: SQLite has no schemas; name the table without '{name.schema}.'", obj=str(name)
        )

    def metadata_table_name(self, name: str) -> TableName:
        return TableName(None, name)
