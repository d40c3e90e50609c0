"""The tracking log on PostgreSQL: claiming its entries and flushing them (``merge/tracking/pending.py``
runs the flush; ``templates/merge_flush.sql`` is its SQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparksync.dialects.postgres import log_capture
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
        if log_capture.capture_of(replica) is not None:
            return _claim_from_log(replica, articles, only is not None or wait)
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

    def peek_log(self, replica: Replica, articles: Sequence[dict]) -> list[tuple]:
        """Read-only (``status``): the entries the log holds past the recorded position. Takes no lock: a flush
        in flight, even one left open, never blocks it. A lost slot has nothing to say (``capture_problems`` says
        it is lost)."""
        if log_capture.problems(replica):
            return []
        with replica.transaction():
            return log_capture.read(replica, articles, advance=False)[0]

    def log_mark(self, replica: Replica) -> int:
        """A web door's mark of the server's log (``log_capture.unread``)."""
        return log_capture.unread(replica, FLUSH_LOCK_CLASS)

    def release_pending(self, replica: Replica, source: str) -> None:
        replica.execute(f"DELETE FROM {source}")

    def flush_generation(self: Dialect, replica: Replica) -> int | None:
        return int(replica.scalar(f"SELECT {self.quote(METADATA_SCHEMA)}.writer_generation()"))


def _claim_from_log(replica: Replica, articles: Sequence[dict], wait: bool):
    # One reader of the slot at a time (the flush lock): an apply's flush of its rows reads every change
    # committed before it (the log has no per-row claim) and waits for a flush that reads now.
    if wait:
        replica.scalar("SELECT pg_advisory_xact_lock(%s, %s)", (FLUSH_LOCK_CLASS, 0))
    elif not replica.scalar("SELECT pg_try_advisory_xact_lock(%s, %s)", (FLUSH_LOCK_CLASS, 0)):
        return FLUSHING, [], 0
    entries, position = log_capture.read(replica, articles)
    log_capture.record(replica, position)
    if entries:
        log_capture.copy_entries(replica, FLUSHING, entries)
    # what triggers logged before the database moved to the log (setup switches in one transaction)
    cur = replica.execute(f"WITH claimed AS (DELETE FROM {replica.dialect.metadata_table_sql('MSmerge_pending')} RETURNING "
                          f"tablenick, rowguid, op, cols) INSERT INTO {FLUSHING} SELECT * FROM claimed")
    n = len(entries) + max(getattr(cur, "rowcount", 0), 0)
    if not n:
        return FLUSHING, [], 0
    if n > 1000:
        replica.execute(f"ANALYZE {FLUSHING}")
    return FLUSHING, [int(x) for (x,) in replica.query(f"SELECT DISTINCT tablenick FROM {FLUSHING}")], n
