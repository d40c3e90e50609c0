"""The tracking log on PostgreSQL: claiming its entries and flushing them (``merge/tracking/pending.py``
runs the flush; ``templates/merge_flush.sql`` is its SQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparksync.dialects.postgres.naming import METADATA_SCHEMA
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.dialects.templates import render_statements

FLUSH_LOCK_CLASS = 1397771085       # advisory lock class of the lock a whole flush of the tracking log holds
FLUSHING = "sparksync_flushing"     # the connection's temporary table of claimed tracking log entries


class TrackingLog:
    """``MergeHooks`` on PostgreSQL: the tracking log's part (the rest is ``tracking.PostgresMergeHooks``)."""

    def render_flush(self, ctx: dict) -> list[str]:
        columns = [{**c, "cmp": ""} for c in ctx["columns"]]
        return render_statements("postgres/templates/merge_flush.sql",
                                 {"inserts": None, **ctx, "columns": columns, "schema": METADATA_SCHEMA})

    def claim_pending(self: Dialect, replica: Replica, articles: Sequence[dict],
                      only: tuple[int, str, Sequence[Any]] | None = None, wait: bool = False):
        # Entries are claimed by deleting them into the connection's temporary table: two flushes never
        # take the same entry. One whole flush runs at a time (the flush lock; a second one finds it held
        # and leaves the entries to the next) and skips entries another transaction holds (an apply
        # flushing its rows); the apply's flush of its own rows waits for an entry another flush holds,
        # so it sees that flush's metadata.
        replica.execute(f"CREATE TEMP TABLE IF NOT EXISTS {FLUSHING} (tablenick integer, rowguid uuid, op smallint, "
                        "cols text) ON COMMIT DELETE ROWS")
        pending = self.metadata_table_sql("MSmerge_pending")
        if only is None and wait:
            replica.scalar("SELECT pg_advisory_xact_lock(%s, %s)", (FLUSH_LOCK_CLASS, 0))
            where = f"ctid = ANY(ARRAY(SELECT ctid FROM {pending} FOR UPDATE))"
        elif only is None:
            if not replica.scalar("SELECT pg_try_advisory_xact_lock(%s, %s)", (FLUSH_LOCK_CLASS, 0)):
                # another flush runs: what it claimed goes to the open generation it holds as a writer
                # (not enumerated before it ends); what it left is flushed by the next one
                return FLUSHING, [], 0
            where = f"ctid = ANY(ARRAY(SELECT ctid FROM {pending} FOR UPDATE SKIP LOCKED))"
        else:
            where = f"tablenick = {int(only[0])} AND rowguid IN ({only[1]})"
        cur = replica.execute(f"WITH claimed AS (DELETE FROM {pending} WHERE {where} RETURNING tablenick, rowguid, op, "
                              f"cols) INSERT INTO {FLUSHING} SELECT tablenick, rowguid, op, cols FROM claimed",
                              list(only[2]) if only is not None else [])
        n = max(getattr(cur, "rowcount", 0), 0)
        if not n:
            return FLUSHING, [], 0
        if n > 1000:
            replica.execute(f"ANALYZE {FLUSHING}")
        return FLUSHING, [int(x) for (x,) in replica.query(f"SELECT DISTINCT tablenick FROM {FLUSHING}")], n

    def release_pending(self, replica: Replica, source: str) -> None:
        replica.execute(f"DELETE FROM {source}")

    def flush_generation(self: Dialect, replica: Replica) -> int | None:
        return int(replica.scalar(f"SELECT {self.quote(METADATA_SCHEMA)}.writer_generation()"))

