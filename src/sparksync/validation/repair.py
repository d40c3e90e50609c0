"""Repair (SQL Server's answer to a failed validation is a reinitialization; sparksync can also repair the
rows that differ): the publisher's version of each differing row written at the subscriber as an agent
write, with its lineage; a row changed at the subscriber since validation is skipped, never overwritten.
The failed changes of a repaired row are cleared with it (the publisher's version is there now)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sparksync import failpoints, locks
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica, in_chunks
from sparksync.errors import CHANGE_REJECTED, ConfigurationError, ReplicaDamaged
from sparksync.merge.tracking import identity
from sparksync.merge.tracking import lineage as lin
from sparksync.merge.tracking.articles import agent_writes, forget_rows, published_articles, write_row_with_lineage
from sparksync.merge.tracking.generations import new_generation
from sparksync.merge.tracking.pending import flush, flush_rows
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import (
    FailedChangeRow,
    GenerationRow,
    GenStatus,
    PublicationRow,
    Role,
    SubscriptionRow,
)
from sparksync.progress import Reporter, silent
from sparksync.types import arrow_converter
from sparksync.validation.report import (
    EXTRA,
    MAX_LISTED,
    SKIPPED_NEWER,
    SKIPPED_PENDING,
    SKIPPED_REFUSED,
    ArticleValidation,
    RepairRefused,
    RowDifference,
    SkippedRow,
    SubscriptionValidation,
    ValidationReport,
)


def repair(topology: Topology, report_: ValidationReport, progress: Reporter = silent) -> ValidationReport:
    """Write the rows that differ at each subscriber of ``report_`` (a checksum validation) from the
    publisher; remove its extra rows. Returns ``report_`` with ``repaired`` counted and, in
    ``skipped``, the rows left as they are because they changed at the subscriber since validation."""
    if not report_.checksum:
        raise ConfigurationError("repair needs the rows that differ: validate with --checksum")
    todo = [s for s in report_.subscriptions if not s.ok and s.error is None]
    for s in todo:
        if s.kind != "merge":
            raise RepairRefused(f"subscription {s.subscription} is transactional: --repair writes merge replicas; "
                                f"'sparksync reinit --subscription {s.subscription}' re-creates it", obj=s.subscription)
        if s.pending:
            raise RepairRefused(f"subscription {s.subscription} has changes not merged yet ({s.pending_upload or 0} "
                                f"to upload, {s.pending_download or 0} to download): run 'sparksync merge' first, "
                                "then validate again", obj=s.subscription)
        if any(a.more for a in s.articles):
            raise RepairRefused(f"subscription {s.subscription}: more than {MAX_LISTED} rows of an article differ; "
                                "reinitialize it instead", obj=s.subscription)
    # under the publications' merge agent locks: no merge, snapshot or reinit moves these rows meanwhile
    with locks.hold(topology, "validate --repair", sorted({s.publication for s in todo}), progress), \
            connect(topology.publisher_url, topology.publisher.name) as pub:
        for s in todo:
            progress(f"repair {s.subscription}: {sum(len(a.differences) for a in s.articles)} row(s)")
            s.repaired = _repair_one(topology, pub, s)
    return report_


def _repair_one(topology: Topology, pub: Replica, s: SubscriptionValidation) -> int:
    """Repair one subscriber; rows changed there since validation are left to the next merge
    (``s.skipped``). Returns the rows written or removed.

    1. the publisher's version of each row to write: its values and lineage read by one statement;
    2. in the subscriber's transaction, the rows locked (``Dialect.row_lock_clause``), then their state
       read: the merge apply's lock-then-classify order, so a write committed before the lock is seen;
    3. a row with a change at the subscriber not uploaded yet (:func:`_local_state`), or one the
       subscriber holds in a version the publisher's does not include, is left as it is; the others
       are written (received from the publisher, never uploaded back) or removed, and the failed
       changes of the rows written or removed are cleared: the repair made them moot."""
    prow = store.select(pub, PublicationRow, {"name": s.publication})[0]
    pubid = prow.pubid
    flush(pub)                          # the publisher's rows are read with their lineage
    pub_articles = {a.name: a for a in published_articles(pub, pubid)}
    pub_nick = _nickname(pub)
    received = store.select_one(pub, SubscriptionRow, {"pubid": pubid, "name": s.subscription,
                                                       "role": Role.SUBSCRIBER})
    pub_recgen = received.recgen if received is not None else None
    order = sorted(s.articles, key=lambda a: pub_articles[a.article].nickname)
    versions = {a.article: _publisher_rows(pub, tracked_article(pub_articles[a.article]),
                                           [d.rowguid for d in a.differences if d.kind != EXTRA], s.subscription)
                for a in order}
    cfg = topology.subscription(s.subscription)
    done = 0
    s.skipped = []
    with connect(topology.subscriber_url(cfg), s.subscription) as sub:
        sub_articles = {a.name: tracked_article(a) for a in published_articles(sub, pubid)}
        sub_nick = _nickname(sub)
        failpoints.hit("repair.before_write", s.subscription)
        with sub.transaction(), agent_writes(sub):
            failpoints.hit("repair.before_lock", s.subscription)
            sent = store.select_one(sub, SubscriptionRow, {"pubid": pubid, "role": Role.PUBLISHER})
            # what the publisher has of this subscriber: as the merge negotiates it, the lower watermark
            since = min((v for v in (sent.sentgen if sent is not None else None, pub_recgen) if v is not None),
                        default=0)
            local = {a.article: _local_state(sub, sub_articles[a.article], [d.rowguid for d in a.differences],
                                             since, pub_nick) for a in order}
            gen = new_generation(sub, GenStatus.RECEIVED, [pub_nick, sub_nick], pubid, pub_nick)

            def leave(a: ArticleValidation, d: RowDifference, reason: str) -> bool:
                s.skipped.append(SkippedRow(a.article, d.key, d.rowguid, reason))
                return False

            def may_write(a: ArticleValidation, d: RowDifference, theirs: dict | None) -> bool:
                here = local[a.article].get(_guid_key(d.rowguid))
                if here is not None and here.pending:
                    return leave(a, d, SKIPPED_PENDING)
                if theirs is not None and here is not None and not lin.dominates(theirs, here.lineage):
                    return leave(a, d, SKIPPED_NEWER)
                return True

            for a in reversed(order):                     # children first: their parents may go
                extra = [d.rowguid for d in a.differences if d.kind == EXTRA and may_write(a, d, None)]
                done += forget_rows(sub, sub_articles[a.article], extra)
            for a in order:                               # parents first
                art = sub_articles[a.article]
                for d in a.differences:
                    if d.kind == EXTRA:
                        continue
                    row, lineage, colv = versions[a.article].get(_guid_key(d.rowguid)) or (None, {}, None)
                    if not may_write(a, d, None if row is None else lin.parse(lineage)):
                        continue
                    sub.execute("SAVEPOINT sparksync_repair")
                    try:
                        if row is None:                   # deleted at the publisher since validation
                            done += forget_rows(sub, art, [d.rowguid])
                        else:
                            write_row_with_lineage(sub, art, row, lineage, gen, colv)
                            _clear_failed(sub, art, d.rowguid, pub_nick)
                            done += 1
                        sub.execute("RELEASE SAVEPOINT sparksync_repair")
                    except CHANGE_REJECTED as e:          # e.g. its parent is one of the rows left
                        sub.execute("ROLLBACK TO SAVEPOINT sparksync_repair")
                        sub.execute("RELEASE SAVEPOINT sparksync_repair")
                        leave(a, d, f"{SKIPPED_REFUSED}: {e.message}")
            store.update(sub, GenerationRow, {"changecount": done}, {"generation": gen})
    return done


def _clear_failed(sub: Replica, art: TrackedArticle, rowguid: str, pub_nick: int) -> None:
    """The publisher's changes of a row that failed at the subscriber are moot once the repair wrote the
    publisher's version there (the row and its lineage, which includes theirs): no longer listed, nor
    tried again. (A row the repair removed loses its failed changes with its other metadata.)"""
    store.delete(sub, FailedChangeRow, {"tablenick": art.nickname, "rowguid": rowguid, "source_nickname": pub_nick})


def _nickname(replica: Replica) -> int:
    ident = store.replica_identity(replica)
    if ident is None:
        raise ReplicaDamaged(f"{replica.label}: its replica identity is missing; run 'sparksync setup'",
                             obj=replica.label)
    return int(ident.nickname)


def _guid_key(rowguid: Any) -> str:
    return str(rowguid).lower()


def _publisher_rows(pub: Replica, art: TrackedArticle, rowguids: list[str],
                    subscription: str) -> dict[str, tuple[dict, dict, Any]]:
    """The publisher's version of these rows: rowguid -> (values, lineage, colv), each row and its
    lineage read by one statement (one snapshot: a write committed meanwhile is in both or neither).
    A row the publisher no longer has is not in the result."""
    d = pub.dialect
    cols = list(art.info.columns)
    rg = d.quote(art.rowguid_column)
    out: dict[str, tuple[dict, dict, Any]] = {}
    for chunk in in_chunks(rowguids):
        found = pub.query(
            f"SELECT {', '.join('t.' + d.quote(c.name) for c in cols)}, c.lineage, c.colv "
            f"FROM {identity.rows_sql(d, art)} t LEFT JOIN {pub.meta('MSmerge_contents')} c "
            f"ON c.tablenick = {int(art.nickname)} AND c.rowguid = t.{rg} "
            f"WHERE t.{rg} IN ({', '.join([d.uuid_param()] * len(chunk))})", chunk)
        failpoints.hit("repair.publisher_read", subscription)
        for r in found:
            row = {c.name: arrow_converter(c.type)(v) for c, v in zip(cols, r)}
            lineage, colv = r[len(cols)], r[len(cols) + 1]
            out[_guid_key(row[art.rowguid_column])] = (
                row, {str(k): int(v) for k, v in lin.parse(lineage).items()},
                json.loads(colv) if isinstance(colv, str) else colv)
    return out


@dataclass
class _Local:
    """A row's state at the subscriber, read after it is locked."""

    lineage: dict[int, int]          # of its contents row, or of its tombstone when it is not there
    pending: bool                    # changed here and not uploaded yet


def _local_state(sub: Replica, art: TrackedArticle, rowguids: list[str], since: int,
                 pub_nick: int) -> dict[str, _Local]:
    """Lock these rows (where other transactions write at the same time) and read their metadata:
    rowguid -> state, for the rows the subscriber has any metadata of. A row is *pending* when its
    contents or tombstone row is in a generation above ``since`` (what the publisher has received of
    this subscriber) that is not a generation received from the publisher: a change made here that
    the next merge uploads (what ``status`` counts as pending_upload)."""
    d, p = sub.dialect, sub.p
    t, rg = identity.rows_sql(d, art), d.quote(art.rowguid_column)
    nick = int(art.nickname)
    gh = sub.meta("MSmerge_genhistory")
    present: set[str] = set()
    meta: dict[str, dict[str, tuple[Any, bool]]] = {}
    for chunk in in_chunks(sorted(rowguids)):
        inlist = ", ".join([d.uuid_param()] * len(chunk))
        present |= {_guid_key(g) for (g,) in sub.query(
            f"SELECT {rg} FROM {t} WHERE {rg} IN ({inlist}) ORDER BY {rg}{d.row_lock_clause()}", chunk)}
        flush_rows(sub, nick, inlist, chunk)        # locked: what was changed here before is in the metadata
        for table in ("MSmerge_contents", "MSmerge_tombstone"):
            for g, lineage, pending in sub.query(
                    f"SELECT x.rowguid, x.lineage, CASE WHEN x.generation > {p} AND NOT EXISTS (SELECT 1 FROM {gh} g "
                    f"WHERE g.generation = x.generation AND g.genstatus = {GenStatus.RECEIVED:d} "
                    f"AND g.source_nickname = {p}) "
                    f"THEN 1 ELSE 0 END FROM {sub.meta(table)} x WHERE x.tablenick = {nick} AND x.rowguid IN ({inlist})",
                    [since, pub_nick, *chunk]):
                meta.setdefault(_guid_key(g), {})[table] = (lineage, bool(pending))
    out = {}
    for g, m in meta.items():
        contents, tomb = m.get("MSmerge_contents"), m.get("MSmerge_tombstone")
        mine = contents if g in present or tomb is None else tomb
        out[g] = _Local(lin.parse(mine[0]) if mine else {}, any(x[1] for x in m.values()))
    return out
