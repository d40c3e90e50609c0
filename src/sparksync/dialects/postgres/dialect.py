"""PostgreSQL: the server dialect (psycopg 3), one mixin per concern of ``protocols.py`` composed over
the shared defaults (``base.DialectBase``). Metadata lives in the ``sparksync`` schema.

- ``driver.py``: connections, statements, placeholders, typed errors (``Driver``);
- ``naming.py``: default schemas, where the metadata lives (``Naming``);
- ``catalog.py``: reflection from ``pg_catalog``, column types (``Catalog``);
- ``ddl.py``: type names, CREATE statements (``Ddl``);
- ``movement.py``: COPY, streamed reads, exported snapshots (``DataMovement``);
- ``merge_staging.py`` (COPY into its tables: ``staging.py``): the merge apply's staging, lineage SQL
  (``MergeStaging``);
- ``tracking.py``, ``tracking_log.py``: merge change tracking (``MergeHooks``);
- ``transactional.py``: a transactional subscriber's staged commands and procedures (``StagedRows``,
  ``TransactionalHooks``);
- ``agent_lock.py``: agent locks (``Locks``).

``Files`` and ``ValueChecks`` are the defaults: a server's database is no file, and what it cannot hold
the capabilities say.
"""

from __future__ import annotations

from sparksync.dialects.base import DialectBase
from sparksync.dialects.postgres.agent_lock import PostgresLocks
from sparksync.dialects.postgres.catalog import PostgresCatalog
from sparksync.dialects.postgres.ddl import PostgresDdl
from sparksync.dialects.postgres.driver import PostgresDriver
from sparksync.dialects.postgres.merge_staging import PostgresMergeStaging
from sparksync.dialects.postgres.movement import PostgresDataMovement
from sparksync.dialects.postgres.naming import PostgresNaming
from sparksync.dialects.postgres.tracking import PostgresMergeHooks
from sparksync.dialects.postgres.tracking_log import TrackingLog
from sparksync.dialects.postgres.transactional import PostgresStagedRows, PostgresTransactionalHooks
from sparksync.dialects.protocols import Capabilities
from sparksync.sql_flavor import SqlFlavor


class PostgresDialect(PostgresDriver, PostgresNaming, PostgresCatalog, PostgresDdl, PostgresDataMovement,
                      PostgresStagedRows, PostgresMergeStaging, PostgresMergeHooks, TrackingLog,
                      PostgresTransactionalHooks, PostgresLocks, DialectBase):
    capabilities = Capabilities(
        name="postgresql",
        product="PostgreSQL",
        supports_schemas=True,
        supports_procedures=True,
        supports_logical_decoding=True,
        concurrent_writers=True,
        paramstyle="%s",
        sql=SqlFlavor("postgres", typed_booleans=True),
        lateral_joins=True,
        text_holds_nul=False,
        takes_server_text=True,
    )
