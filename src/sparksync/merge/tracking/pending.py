"""The flush: the tracking triggers' log (``MSmerge_pending``) written into the tracking metadata.

An application's write pays only an append to the log (which row of which article, insert, update or
delete, and for column-tracked articles which columns). The metadata (a rowguid for a SQLite row
inserted without one, ``MSmerge_contents`` with one lineage bump per row however many times it
changed, ``MSmerge_tombstone`` for deleted rows) is written here, set-based, in the open generation.

Every reader and writer of the tracking metadata comes through here first: ``Replica.meta`` refuses
``MSmerge_contents`` and ``MSmerge_tombstone`` on a connection that never flushed. The merge agent
flushes before it closes a replica's generation (``generations.make_generation``); the apply flushes
the rows of a batch inside its transaction *after* it has locked them and *before* it classifies them
(:func:`flush_rows`), so a local change committed just before the lock is a conflict, never silently
overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparksync import failpoints
from sparksync.dialects.protocols import MergeHooks
from sparksync.dialects.replica import Replica
from sparksync.errors import ReplicaDamaged
from sparksync.merge.tracking.open_generation import ensure_open_generation
from sparksync.merge.tracking.tracked import tracked_article, trigger_context
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow

LOG = "MSmerge_pending"
INSERTS = "MSdevice_inserts"      # a web device's rows inserted by its application, not yet answered (its outbox)


def flush(replica: Replica, wait: bool = False) -> int:
    """Flush every committed entry of the log (in the caller's transaction if one is open, else in its
    own). Returns the entries flushed. Where flushes run at once (PostgreSQL) and another whole flush is
    running, what it claimed is its own and the rest is left for the next, unless ``wait``: then this
    one waits for it (a schema change, which must read the log with the columns it was written with).
    A database without the log (no merge metadata, or metadata of a release before it, whose triggers
    write the metadata themselves) has nothing to flush."""
    if not has_log(replica):
        replica.tracking_flushed = True
        return 0
    with replica.transaction():
        n = _flush(replica, None, wait)
    failpoints.hit("tracking.flushed", replica.label)       # tests: committed (a slot not moved on yet)
    return n


def flush_rows(replica: Replica, tablenick: int, rowguids_sql: str, params: Sequence[Any] = ()) -> int:
    """Inside the apply's transaction, after it locked the rows it will write: flush the entries of
    those rows (``rowguids_sql``: their rowguids, a SELECT or a list of placeholders for ``params``),
    waiting for a flush that holds one."""
    if not replica.in_transaction:
        raise RuntimeError("flush_rows() runs inside the apply's transaction")
    if not has_log(replica):
        replica.tracking_flushed = True
        return 0
    if not replica.dialect.capabilities.concurrent_writers and replica.flushed_in == replica.transaction_serial:
        return 0            # one writer at a time: this transaction flushed everything already, nothing came since
    return _flush(replica, (int(tablenick), rowguids_sql, list(params)), True)


def count(replica: Replica, nicknames: Sequence[int], after: int | None = None, partition_id: int | None = None) -> int:
    """Read-only, for ``status``: the rows of these articles changed since the last flush (logged, or on
    SQLite inserted without a rowguid) that the metadata does not already count as changed after
    generation ``after``; ``partition_id``: only rows mapped to that partition (a new row is in none
    until the partitions are evaluated). The connection may then read the tracking metadata: it has
    accounted for the log."""
    replica.tracking_flushed = True
    if not has_log(replica) or not nicknames:
        return 0
    wanted = {int(n) for n in nicknames}
    d = replica.dialect
    m = d.metadata_table_sql
    nick_list = ", ".join(str(int(n)) for n in nicknames)
    where, params = "", []
    if after is not None:
        where = " WHERE " + " AND ".join(
            f"NOT EXISTS (SELECT 1 FROM {m(t)} c WHERE c.tablenick = x.tablenick AND c.rowguid = x.rowguid "
            f"AND c.generation > {replica.p})" for t in ("MSmerge_contents", "MSmerge_tombstone"))
        params = [int(after), int(after)]
    join = ""
    if partition_id is not None:
        join = (f" JOIN {m('MSmerge_current_partition_mappings')} cm ON cm.tablenick = x.tablenick "
                f"AND cm.rowguid = x.rowguid AND cm.partition_id = {int(partition_id)}")
    source, source_params = _logged_source(replica)
    n = int(replica.scalar(f"SELECT count(*) FROM (SELECT DISTINCT tablenick, rowguid FROM {source} "
                           f"WHERE tablenick IN ({nick_list})) AS x{join}{where}", source_params + params) or 0)
    return n + (unkeyed(replica, wanted) if partition_id is None else 0)


def _logged_source(replica: Replica) -> tuple[str, list]:
    """What the next flush will read, as a table expression (tablenick, rowguid) and its parameters: the tracking
    log (and keyed articles' logs: the rows in them that have a rowguid), or (a database whose changes are read
    from the server's log) the entries peeked from it."""
    d = replica.dialect
    if not d.captures_from_log(replica):
        keyed = [_keyed_logged(ctx) for ctx in _articles(replica)[1] if ctx["keyed"]]
        if not keyed:
            return d.metadata_table_sql(LOG), []
        return ("(SELECT tablenick, rowguid FROM " + d.metadata_table_sql(LOG) + " UNION ALL "
                + " UNION ALL ".join(keyed) + ") AS logged"), []
    entries = d.peek_log(replica, _articles(replica)[1])
    # and what triggers logged before the database moved to the log, until a flush records it
    return (f"(SELECT tablenick, rowguid FROM {d.metadata_table_sql(LOG)} UNION ALL "
            "SELECT * FROM unnest(%s::integer[], %s::uuid[]) AS e(tablenick, rowguid)) AS logged",
            [[e[0] for e in entries], [e[1] for e in entries]])


def _keyed_logged(ctx: dict) -> str:
    """A keyed article's logged rows that have a rowguid (tablenick, rowguid): a delete's, or its row's now."""
    match = " AND ".join(f"i.{k['name']} = l.{k['k']}" for k in ctx["keys"])
    return (f"SELECT {ctx['tablenick']} AS tablenick, coalesce(l.rowguid, i.{ctx['rowguid']}) AS rowguid "
            f"FROM {ctx['log']} AS l LEFT JOIN {ctx['ids']} AS i ON l.op <> 3 AND {match} "
            f"WHERE coalesce(l.rowguid, i.{ctx['rowguid']}) IS NOT NULL")


def unkeyed(replica: Replica, nicknames: set[int]) -> int:
    """Rows of these articles inserted without a rowguid (SQLite), which get one at the flush."""
    n = 0
    for ctx in _articles(replica)[1]:
        if ctx["tablenick"] not in nicknames:
            continue
        if ctx["keyed"]:
            keys = ", ".join(k["k"] for k in ctx["keys"])
            n += int(replica.scalar(
                f"SELECT count(*) FROM (SELECT DISTINCT {keys} FROM {ctx['log']} WHERE op <> 3) AS p "
                f"WHERE NOT EXISTS (SELECT 1 FROM {ctx['ids']} AS i WHERE "
                + " AND ".join(f"i.{k['name']} = p.{k['k']}" for k in ctx["keys"]) + ") "
                f"AND EXISTS (SELECT 1 FROM {ctx['table']} AS t WHERE "
                + " AND ".join(f"t.{k['name']} = p.{k['k']}" for k in ctx["keys"]) + ")") or 0)
        else:
            n += int(replica.scalar(f"SELECT count(*) FROM {ctx['table']} WHERE {ctx['rowguid']} IS NULL") or 0)
    return n


def logged(replica: Replica, nicknames: Sequence[int]) -> list[tuple[int, Any, int | None, int | None]]:
    """Read-only, for ``status`` of many subscriptions at once (``backlogs.py``): the rows of these articles in
    the log, each as (tablenick, rowguid, partition it is mapped to or None, the highest generation the tracking
    metadata gives it or None), a row for each partition it is mapped to. ``count`` of any watermark and
    partition is a count over these."""
    replica.tracking_flushed = True
    if not has_log(replica) or not nicknames:
        return []
    m = replica.dialect.metadata_table_sql
    nick_list = ", ".join(str(int(n)) for n in nicknames)
    newest = ", ".join(f"(SELECT max(c.generation) FROM {m(t)} c WHERE c.tablenick = x.tablenick AND "
                       "c.rowguid = x.rowguid)" for t in ("MSmerge_contents", "MSmerge_tombstone"))
    source, source_params = _logged_source(replica)
    rows = replica.query(f"SELECT x.tablenick, x.rowguid, cm.partition_id, {newest} FROM (SELECT DISTINCT tablenick, "
                         f"rowguid FROM {source} WHERE tablenick IN ({nick_list})) AS x LEFT JOIN "
                         f"{m('MSmerge_current_partition_mappings')} cm ON cm.tablenick = x.tablenick "
                         "AND cm.rowguid = x.rowguid", source_params)
    return [(int(t), g, None if pid is None else int(pid),
             max((int(v) for v in (c, d) if v is not None), default=None)) for t, g, pid, c, d in rows]


def discard(replica: Replica) -> None:
    """The replica's tracking metadata is being thrown away, its log with it (a replica dropped or
    reinitialized): nothing in it is recorded. Inside the transaction that deletes the metadata."""
    if has_log(replica):
        replica.execute(f"DELETE FROM {replica.dialect.metadata_table_sql(LOG)}")
        for ctx in _articles(replica)[1]:
            if ctx["keyed"]:
                replica.execute(f"DELETE FROM {ctx['log']}")
    if replica.dialect.captures_from_log(replica):
        replica.dialect.skip_log(replica)
    replica.tracking_flushed = True


def reading_closed(replica: Replica) -> None:
    """For a reader of closed generations only, up to an enumeration bound taken after a flush (a web
    download): what the log holds now is flushed later into the open generation, above that bound, and
    read then. (A row it changed is read with its new values and its lineage of before; the flush's
    version of it follows in the next window.)"""
    replica.tracking_flushed = True


def rehearsing(replica: Replica) -> None:
    """For a rehearsal of a batch (``merge.apply.rehearsal``), which reads the metadata as it stands and writes
    nothing: what it decides is thrown away (only business logic handlers' answers are kept, by their rows), so the
    log not flushed into it changes nothing that counts."""
    replica.tracking_flushed = True


def has_log(replica: Replica) -> bool:
    if replica.has_tracking_log:
        return True
    found = replica.dialect.metadata_table_exists(replica, LOG)
    if found:                               # an absent log may appear (setup); a present one stays
        replica.has_tracking_log = True
    return found


def _notes_inserts(replica: Replica) -> bool:
    """A web device's file notes which rows its application inserted (``INSERTS``)."""
    if replica.notes_inserts is None:
        replica.notes_inserts = replica.dialect.metadata_table_exists(replica, INSERTS)
    return replica.notes_inserts


def forget(replica: Replica, tablenick: int, rowguids_sql: str, params: list) -> None:
    """Entries of rows this replica forgets (they left its partition): nothing to flush for them."""
    if has_log(replica):
        replica.execute(f"DELETE FROM {replica.dialect.metadata_table_sql(LOG)} WHERE tablenick = {int(tablenick)} "
                        f"AND rowguid IN ({rowguids_sql})", params)


def _articles(replica: Replica) -> tuple[int, list[dict]]:
    ident = store.replica_identity(replica)
    if ident is None:
        return 0, []
    seen: dict[int, dict] = {}
    for row in store.select(replica, ArticleRow, order_by=("nickname",)):
        if int(row.nickname) not in seen:
            seen[int(row.nickname)] = trigger_context(replica, tracked_article(row), ident.nickname)
    return ident.nickname, list(seen.values())


def _flush(replica: Replica, only: tuple[int, str, list] | None, wait: bool) -> int:
    d: MergeHooks = replica.dialect
    nickname, articles = _articles(replica)
    source, nicks, n = d.claim_pending(replica, articles, only, wait)
    if not nicks:
        _flushed(replica)
        return 0
    generation = d.flush_generation(replica)
    if generation is None:
        if not nickname:
            raise ReplicaDamaged(f"{replica.label}: its replica identity (MSmerge_replica) is missing; its changes "
                                 "cannot be recorded", obj=replica.label)
        generation = ensure_open_generation(replica, nickname)
    by_nick = {a["tablenick"]: a for a in articles}
    inserts = replica.meta(INSERTS) if _notes_inserts(replica) else None
    for nick in nicks:
        ctx = by_nick.get(nick)
        if ctx is None:                 # an article dropped since its rows were logged: nothing to record
            continue
        for stmt in d.render_flush({**ctx, "source": source, "inserts": inserts}):
            replica.execute(stmt.replace("__GEN__", str(int(generation))))
        failpoints.hit("tracking.flush", replica.label)     # tests: an article's metadata written, not committed
    d.release_pending(replica, source)
    _flushed(replica)
    return n


def _flushed(replica: Replica) -> None:
    """This connection has flushed (in this transaction): it may read the tracking metadata."""
    replica.tracking_flushed, replica.flushed_in = True, replica.transaction_serial
