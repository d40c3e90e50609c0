"""Rows in and out of PostgreSQL: COPY, streamed reads in a read-only transaction (in an exported
snapshot when given one), the exported snapshot itself, bounded deletes by ``ctid``, row locks."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from sparksync.dialects.defaults import DataMovementDefaults
from sparksync.dialects.postgres.driver import lenient_temporal
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.errors import SparksyncError
from sparksync.names import TableName
from sparksync.types import Kind, SqlType

_SNAPSHOT_ID = re.compile(r"^[0-9A-Fa-f-]+$")


class PostgresDataMovement(DataMovementDefaults):
    """``DataMovement`` on PostgreSQL."""

    def _converter(self, t: SqlType):
        if t.kind is Kind.JSON:
            import json as _json

            from psycopg.types.json import Jsonb
            return lambda v: Jsonb(_json.loads(v)) if isinstance(v, str) else Jsonb(v)
        return None

    def bulk_load(self: Dialect, replica: Replica, table: TableName, columns: Sequence[str], types: Sequence[SqlType],
                  rows: Iterable[Sequence[Any]]) -> int:
        return self.load_rows(replica, self.table_sql(table), columns, rows)   # COPY adapts the values itself

    def load_rows(self: Dialect, replica: Replica, table_sql: str, columns: Sequence[str],
                  rows: Iterable[Sequence[Any]]) -> int:
        n = 0
        try:
            with replica.raw.cursor() as cur:
                with cur.copy(f"COPY {table_sql} ({', '.join(self.quote(c) for c in columns)}) FROM STDIN") as copy:
                    for r in rows:
                        copy.write_row(r)
                        n += 1
        except SparksyncError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self.translate_error(exc, f"{replica.label}: load {table_sql}") from exc
        return n

    def stream(self, replica, sql, params, batch_rows, snapshot=None, lenient_text=False):
        # lenient_text: the server checks encodings on the way in; a UTF8 database holds none invalid.
        import psycopg

        raw = replica.raw
        ended = False
        try:
            raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if snapshot:
                if not _SNAPSHOT_ID.match(snapshot):
                    raise ValueError(f"invalid snapshot id {snapshot!r}")
                raw.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
            with raw.cursor(name="sparksync_read") as cur:
                lenient_temporal(cur)
                cur.execute(sql, tuple(params) if params else None)
                while True:
                    rows = cur.fetchmany(batch_rows)
                    if not rows:
                        break
                    yield rows
            raw.execute("COMMIT")
            ended = True
        except psycopg.Error as exc:
            raise self.translate_error(exc, f"{replica.label}: {sql[:80]}") from exc
        finally:
            if not ended:     # a failure, or a consumer that stopped early (GeneratorExit): no transaction left open
                with contextlib.suppress(Exception):
                    raw.execute("ROLLBACK")

    @contextlib.contextmanager
    def consistent_reads(self: Dialect, replica: Replica, workdir: str):
        """An exported snapshot, held open by a second connection until the readers are done."""
        holder = self.connect(replica.url, replica.label)
        try:
            holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            sid = holder.scalar("SELECT pg_export_snapshot()")
            yield replica.url, sid, holder
        finally:
            with contextlib.suppress(Exception):
                holder.execute("COMMIT")
            holder.close()

    def delete_some_sql(self, table_sql: str, where: str, limit: int) -> str:
        return (f"DELETE FROM {table_sql} WHERE ctid = ANY(ARRAY("
                f"SELECT ctid FROM {table_sql} WHERE {where} LIMIT {int(limit)}))")

    def row_lock_clause(self) -> str:
        return " FOR UPDATE"
