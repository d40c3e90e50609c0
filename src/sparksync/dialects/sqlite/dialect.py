"""SQLite: the embedded default. One file per replica, one writer at a time, WAL journal. One mixin
per concern of ``protocols.py``, composed over the shared defaults (``base.DialectBase``):

- ``driver.py``: the URL as a path, connections, statements, typed errors (``Driver``);
- ``naming.py``: no schemas (``Naming``);
- ``catalog.py``: reflection from ``sqlite_master`` and the pragmas, column types (``Catalog``);
- ``ddl.py``: type names, CREATE statements (``Ddl``);
- ``movement.py``: streamed reads, backup-copy snapshots (``DataMovement``);
- ``merge_staging.py``: the merge apply's staging, lineage SQL (``MergeStaging``);
- ``tracking.py``: merge change tracking, row-level triggers and their flush (``MergeHooks``);
- ``transactional.py``: a transactional subscriber's staged commands (``StagedRows``,
  ``TransactionalHooks``);
- ``files.py``: a damaged file set aside (``Files``);
- ``agent_lock.py``: agent locks (``Locks``).

``ValueChecks`` is the default: what SQLite cannot hold (NaN in a float column) the capabilities say.
"""

from __future__ import annotations

from sparksync.dialects.base import DialectBase
from sparksync.dialects.protocols import Capabilities
from sparksync.dialects.sqlite.agent_lock import SQLiteLocks
from sparksync.dialects.sqlite.catalog import SQLiteCatalog
from sparksync.dialects.sqlite.ddl import SQLiteDdl
from sparksync.dialects.sqlite.driver import SQLiteDriver
from sparksync.dialects.sqlite.files import SQLiteFiles
from sparksync.dialects.sqlite.merge_staging import SQLiteMergeStaging
from sparksync.dialects.sqlite.movement import SQLiteDataMovement
from sparksync.dialects.sqlite.naming import SQLiteNaming
from sparksync.dialects.sqlite.tracking import SQLiteMergeHooks
from sparksync.dialects.sqlite.transactional import SQLiteStagedRows, SQLiteTransactionalHooks
from sparksync.sql_flavor import SqlFlavor


class SQLiteDialect(SQLiteDriver, SQLiteNaming, SQLiteCatalog, SQLiteDdl, SQLiteDataMovement, SQLiteStagedRows,
                    SQLiteMergeStaging, SQLiteMergeHooks, SQLiteTransactionalHooks, SQLiteFiles, SQLiteLocks,
                    DialectBase):
    capabilities = Capabilities(
        name="sqlite",
        product="SQLite",
        supports_schemas=False,
        supports_procedures=False,
        supports_logical_decoding=False,
        concurrent_writers=False,
        paramstyle="?",
        sql=SqlFlavor("sqlite"),
        float_holds_nan=False,
        keyed_rowguids=True,
        stable_rowids=True,
    )
