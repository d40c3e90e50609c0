"""PostgreSQL's names: an unquoted identifier folds to lower case, a table named without a schema is in
``public``, and the replication metadata lives in a schema of its own (``METADATA_SCHEMA``)."""

from __future__ import annotations

from sparksync.dialects.defaults import NamingDefaults
from sparksync.names import TableName

METADATA_SCHEMA = "sparksync"


class PostgresNaming(NamingDefaults):
    """``Naming`` on PostgreSQL."""

    def fold_identifier(self, name: str) -> str:
        return name.lower()

    def resolve_name(self, name: TableName) -> TableName:
        return name if name.schema is not None else TableName("public", name.name)

    def metadata_table_name(self, name: str) -> TableName:
        return TableName(METADATA_SCHEMA, name.lower())
