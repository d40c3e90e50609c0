"""A subscription's backlog, counted in the metadata: the changes it has yet to receive from the publisher
(of its partition) or to send (a replica's changes after a watermark), and the lowest generation holding
one. ``status`` shows them, the monitor rates them, and a validation is conclusive only where both are
zero."""

from __future__ import annotations

from typing import Any

from sparksync.dialects.replica import Replica
from sparksync.merge.partitions.evaluation import evaluated_at_sync
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.tracking import pending
from sparksync.merge.tracking.articles import published_articles
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, FailedChangeRow, GenStatus, PublicationRow, Role, SubscriptionRow


def count_after(replica: Replica, nicknames: list[int], after: int | None,
                 exclude_received_from: int | None = None) -> tuple[int, int | None]:
    """Changes of the articles ``nicknames`` in generations after ``after`` (leaving out those received
    from ``exclude_received_from``), and the lowest generation holding one."""
    if not nicknames:
        return 0, None
    p = replica.p
    nick_list = ", ".join(str(int(n)) for n in nicknames)
    gh = replica.meta("MSmerge_genhistory")
    excl = ""
    params: list[Any] = [int(after or 0)]
    if exclude_received_from is not None:
        excl = (f" AND generation NOT IN (SELECT generation FROM {gh} WHERE genstatus = {GenStatus.RECEIVED:d} "
                f"AND source_nickname = {p})")
        params.append(exclude_received_from)
    total = logged = pending.count(replica, nicknames, after)     # read-only: what the next flush records
    lowest = replica.dialect.current_open_generation(replica) if logged else None
    for t in ("MSmerge_contents", "MSmerge_tombstone"):
        n, g = replica.aggregate(
            f"SELECT count(*), min(generation) FROM {replica.meta(t)} WHERE tablenick IN ({nick_list}) "
            f"AND generation > {p}{excl}", params)
        total += int(n or 0)
        lowest = lower(lowest, g)
    return total, lowest


def lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(int(a), int(b))


def pending_download(pub: Replica, arts: list[ArticleRow], scheme, registered: SubscriptionRow) -> tuple[int, int | None]:
    """What the publisher has for a subscription: every change of its unfiltered articles, and of the
    filtered ones only what concerns its partition (by their mappings, with precomputed partitions;
    ``scheme`` None: every change, as SetupBelongs evaluates them at the sync; so for articles with
    partition_options = 3, which have no mappings); and the lowest generation holding one."""
    whole, filtered = split(arts, scheme)
    n, lowest = count_after(pub, whole, registered.sentgen, exclude_received_from=registered.replnickname)
    if filtered and registered.partition_id is not None:
        m, g = count_for_partition(pub, filtered, registered.sentgen, registered.partition_id,
                                    registered.replnickname)
        n, lowest = n + m, lower(lowest, g)
    return n, lowest


def split(arts: list[ArticleRow], scheme) -> tuple[list[int], list[int]]:
    """The articles' nicknames as ``pending_download`` counts them: (every change counted, only a partition's
    counted by its mappings)."""
    at_sync = evaluated_at_sync(arts, scheme, True) if scheme is not None else frozenset()
    filtered = {a.nickname for a in arts if scheme is not None and scheme.articles[a.name].filtered
                and a.nickname not in at_sync}
    return [a.nickname for a in arts if a.nickname not in filtered], sorted(filtered)


def count_for_partition(replica: Replica, nicknames: list[int], after: int | None, partition_id: int,
                         exclude_received_from: int | None) -> tuple[int, int | None]:
    """Changes of filtered articles after ``after`` for one partition (as of the last partition
    evaluation): upserts of rows in it, deletes and removals of rows that left it; and the lowest
    generation holding one."""
    if not nicknames:
        return 0, None
    p = replica.p
    nick_list = ", ".join(str(int(n)) for n in nicknames)
    gh, cur, past = (replica.meta(t) for t in ("MSmerge_genhistory", "MSmerge_current_partition_mappings",
                                                "MSmerge_past_partition_mappings"))
    excl, params = "", [int(after or 0)]
    if exclude_received_from is not None:
        excl = (f" AND x.generation NOT IN (SELECT generation FROM {gh} WHERE genstatus = {GenStatus.RECEIVED:d} "
                f"AND source_nickname = {p})")
        params.append(exclude_received_from)
    logged = pending.count(replica, nicknames, after, partition_id)    # rows of the partition changed since
    ups, g1 = replica.aggregate(
        f"SELECT count(*), min(x.generation) FROM {replica.meta('MSmerge_contents')} x JOIN {cur} cm "
        f"ON cm.tablenick = x.tablenick AND cm.rowguid = x.rowguid AND cm.partition_id = {int(partition_id)} "
        f"WHERE x.tablenick IN ({nick_list}) AND x.generation > {p}{excl}", params)
    gone, g2 = replica.aggregate(
        f"SELECT count(DISTINCT x.rowguid), min(x.generation) FROM {past} x WHERE x.partition_id = {int(partition_id)} "
        f"AND x.tablenick IN ({nick_list}) AND x.generation > {p} AND NOT EXISTS (SELECT 1 FROM {cur} cm "
        f"WHERE cm.tablenick = x.tablenick AND cm.rowguid = x.rowguid AND cm.partition_id = x.partition_id)",
        [int(after or 0)])
    lowest = lower(g1, g2)
    if logged:
        lowest = lower(lowest, replica.dialect.current_open_generation(replica))
    return int(ups or 0) + int(gone or 0) + logged, lowest


def unsettled(pub: Replica, pubid: str, reg: SubscriptionRow) -> int:
    """What stands between a subscription and the publisher's partition of it, counted at the publisher: the
    changes it has to receive (``pending_download``, after what it acknowledged), its changes that failed
    there (rows the two hold apart until they are sent again), and, in a filtered publication, rows whose
    partition is not known yet (logged, or changed after the last partition evaluation). A validation is
    conclusive only where this is zero, before and after the rows are read."""

    prow = store.select_one(pub, PublicationRow, {"pubid": pubid})
    reg = store.select_one(pub, SubscriptionRow, {"subid": reg.subid}) or reg
    if prow is None:
        return 0
    articles = published_articles(pub, pubid)
    scheme = scheme_of(articles)
    waiting = pending_download(pub, articles, scheme if prow.precomputed else None, reg)[0] + \
        len(store.select(pub, FailedChangeRow, {"source_nickname": reg.replnickname}))
    filtered = [a.nickname for a in articles if scheme.articles[a.name].filtered]
    if filtered:
        waiting += pending.count(pub, filtered)
        nicks = ", ".join(str(int(n)) for n in filtered)
        for t in ("MSmerge_contents", "MSmerge_tombstone"):
            waiting += int(pub.scalar(f"SELECT count(*) FROM {pub.meta(t)} WHERE tablenick IN ({nicks}) AND "
                                      f"generation > {pub.p}", [int(prow.partitions_evaluated or 0)]) or 0)
    return waiting


def unsent(replica: Replica, pubid: str, publisher_nick: int) -> int:
    """What a subscriber holds apart from the publisher, counted at the subscriber: its changes not sent yet
    (after what it recorded as uploaded) and the publisher's changes that failed there."""

    partner = store.select_one(replica, SubscriptionRow, {"pubid": pubid, "role": Role.PUBLISHER})
    nicks = [a.nickname for a in published_articles(replica, pubid)]
    waiting, _ = count_after(replica, nicks, partner.sentgen if partner else None, exclude_received_from=publisher_nick)
    return waiting + len(store.select(replica, FailedChangeRow, {"source_nickname": publisher_nick}))
