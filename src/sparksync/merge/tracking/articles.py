"""Installing change tracking on an article, and writing rows that carry their own lineage.

Triggers record every insert, update and delete made by any client (seed 000). The merge agent
writes through :func:`agent_writes`, so the rows it applies keep the lineage they arrived with and
are not recorded again as new local changes (no echo).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sparksync.dialects.protocols import MergeHooks
from sparksync.dialects.replica import Replica, in_chunks
from sparksync.errors import SparksyncError
from sparksync.merge.tracking import identity, pending
from sparksync.merge.tracking.tracked import TrackedArticle, trigger_context
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow


def install_tracking(replica: Replica, article: TrackedArticle, replica_nickname: int) -> None:
    """(Re)create the insert, update and delete triggers of one article, unless they are exactly what
    would be installed: re-creating a trigger locks its table against writes until the transaction
    ends, which a setup run again must not do to a live publisher. Idempotent."""
    d: MergeHooks = replica.dialect
    ctx = trigger_context(replica, article, replica_nickname)
    if not d.tracking_problems(replica, ctx):
        return
    if d.captures_from_log(replica):      # PostgreSQL, change_capture = "log": no trigger, the server's log
        d.capture_from_log(replica, ctx)
        return
    for stmt in d.render_merge_triggers(ctx):
        replica.execute(stmt)


def remove_tracking(replica: Replica, article: TrackedArticle) -> None:
    d: MergeHooks = replica.dialect
    d.drop_merge_triggers(replica, article.table, article.trigger_id)
    if d.captures_from_log(replica):
        d.stop_capture_from_log(replica, {"table_name": article.table})


@contextlib.contextmanager
def agent_writes(replica: Replica) -> Iterator[Replica]:
    """Inside a transaction: DML on articles is not tracked by the triggers until the block ends."""
    if not replica.in_transaction:
        raise SparksyncError("agent_writes() must run inside replica.transaction()")
    d: MergeHooks = replica.dialect
    d.begin_agent_writes(replica)
    yield replica  # on an error the transaction rolls back, and the flag with it
    d.end_agent_writes(replica)


def _upsert_metadata(replica: Replica, table: str, key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    existing = store.select_rows(replica, table, dict(key))
    if existing:
        store.update_rows(replica, table, dict(values), dict(key))
    else:
        store.insert_row(replica, table, {**key, **values})


def write_row_with_lineage(replica: Replica, article: TrackedArticle, row: Mapping[str, Any],
                           lineage: Mapping[Any, int], generation: int,
                           colv: Mapping[str, Any] | None = None) -> str:
    """Insert or update one row (found by its rowguid) and record the lineage it arrived with.

    Must run inside :func:`agent_writes`. Returns ``"insert"`` or ``"update"``. A row whose primary key
    already belongs to another rowguid raises ConstraintViolation (a failed change, not an overwrite).
    """
    action = upsert_by_rowguid(replica, article, row)
    guid = str(row[article.rowguid_column])
    lin = {str(k): int(v) for k, v in lineage.items()}
    _upsert_metadata(replica, "MSmerge_contents", {"tablenick": article.nickname, "rowguid": guid},
                     {"generation": generation, "lineage": lin, "colv": dict(colv) if colv is not None else None})
    store.delete_rows(replica, "MSmerge_tombstone", {"tablenick": article.nickname, "rowguid": guid})
    return action


def upsert_by_rowguid(replica: Replica, article: TrackedArticle, row: Mapping[str, Any]) -> str:
    """Update the row that has ``row``'s rowguid to ``row``'s values (the article's columns it names), or
    insert it when there is none: ``"update"`` or ``"insert"``. Tracked or not is the caller's
    (inside :func:`agent_writes`, or as an application's write). A primary key that belongs to another
    rowguid raises ConstraintViolation. A keyed article's identity follows (``identity.py``)."""
    d = replica.dialect
    rg = article.rowguid_column
    guid = str(row[rg])
    types = {c.name: c.type for c in article.info.columns}
    names = [c for c in row if c in types]
    convs = dict(zip(names, d.db_converters([types[c] for c in names])))
    val = {c: row[c] if row[c] is None or convs[c] is None else convs[c](row[c]) for c in names}
    t, u = d.table_sql(article.table), d.uuid_param()
    others = [c for c in names if c != rg]
    keys = list(article.info.primary_key)
    if others:
        cur = replica.execute(f"UPDATE {t} SET " + ", ".join(f"{d.quote(c)} = {replica.p}" for c in others)
                              + f" WHERE {identity.rows_of(d, article, u)}", [val[c] for c in others] + [guid])
        if getattr(cur, "rowcount", 0) > 0:
            if article.keyed and any(k in others for k in keys):     # the key may have changed: its rowguid follows
                replica.execute(f"UPDATE {d.metadata_table_sql(article.ids_table)} SET "
                                + ", ".join(f"{d.quote(k)} = {replica.p}" for k in keys if k in others)
                                + f" WHERE {d.quote(rg)} = {u}", [val[k] for k in keys if k in others] + [guid])
            return "update"
    elif replica.scalar(f"SELECT count(*) FROM {identity.guids_sql(d, article)} WHERE {d.quote(rg)} = {u}", [guid]):
        return "update"                      # no column besides the rowguid: nothing to set
    if article.keyed:
        replica.execute(f"INSERT INTO {t} (" + ", ".join(d.quote(c) for c in others) + ") VALUES ("
                        + ", ".join([replica.p] * len(others)) + ")", [val[c] for c in others])
        identity.insert_ids(replica, article, "VALUES (" + ", ".join([replica.p] * len(keys)) + f", {u})",
                            [val.get(k) for k in keys] + [guid])
        return "insert"
    replica.execute(f"INSERT INTO {t} (" + ", ".join(d.quote(c) for c in [rg, *others]) + ") VALUES ("
                    + ", ".join([u] + [replica.p] * len(others)) + ")", [guid] + [val[c] for c in others])
    return "insert"


def forget_rows(replica: Replica, article: TrackedArticle, rowguids: Sequence[str]) -> int:
    """Rows this replica should not hold (they left its partition, or a repair found them extra): gone
    with every piece of metadata about them here — contents, tombstone, failed changes — and recorded
    nowhere: not a delete, nothing to send. Inside :func:`agent_writes`. Returns the rows deleted."""
    d, n = replica.dialect, 0
    for chunk in in_chunks(list(rowguids)):
        inlist = ", ".join([d.uuid_param()] * len(chunk))
        n += identity.delete_rows(replica, article, inlist, chunk)
        for table in ("MSmerge_contents", "MSmerge_tombstone", "MSmerge_failed_changes"):
            replica.execute(f"DELETE FROM {replica.meta(table)} WHERE tablenick = {int(article.nickname)} "
                            f"AND rowguid IN ({inlist})", chunk)
        pending.forget(replica, article.nickname, inlist, chunk)
    return n


def delete_row_with_lineage(replica: Replica, article: TrackedArticle, rowguid: str,
                            lineage: Mapping[Any, int], generation: int, tombstone_type: int = 1) -> bool:
    """Delete one row by rowguid and record its tombstone with the given lineage. Inside agent_writes."""
    n = identity.delete_rows(replica, article, replica.dialect.uuid_param(), [str(rowguid)])
    lin = {str(k): int(v) for k, v in lineage.items()}
    _upsert_metadata(replica, "MSmerge_tombstone", {"tablenick": article.nickname, "rowguid": str(rowguid)},
                     {"type": tombstone_type, "lineage": lin, "generation": generation})
    store.delete_rows(replica, "MSmerge_contents", {"tablenick": article.nickname, "rowguid": str(rowguid)})
    return n > 0


def published_articles(replica: Replica, pubid: str) -> list[ArticleRow]:
    """The publication's articles in ascending nickname order."""
    return store.select(replica, ArticleRow, {"pubid": pubid}, order_by=("nickname",))
