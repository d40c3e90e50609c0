"""A remote subscriber's download (a web device's), planned and read at the publisher: the merge agent's
plan of one link (the publisher to one subscription, ``merge.session.enumeration.plan_link``), with the
device's own watermark.

The generations after the common watermark (the publisher's ``sentgen`` toward the device against the
device's ``recgen``; the lower) that the device does not already have, of its partition, cut into
generation batches; the rows that left its partition go in the first batch, SetupBelongs realignments in
the last. The rows come from the partition feed's segments (``feed.py``) when the device's watermark is
where one starts; otherwise they are read here (``merge.session.in_driver.read_changes``) and only those
of the device's partition and generations are sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sparksync.dialects.replica import Replica, in_chunks
from sparksync.errors import ErrorInfo, ReportedError
from sparksync.merge.partitions.evaluation import evaluated_at_sync
from sparksync.merge.partitions.evaluation import partitions as partitions_of
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.session.changes import ALL_PARTITIONS, OP_REMOVE, READ_ERROR_GENERATION, REMOVE_GENERATION
from sparksync.merge.session.enumeration import (
    KeyRange,
    PartitionRead,
    change_reads,
    min_watermark,
    plan_link,
    removal_reads,
    retries_of,
)
from sparksync.merge.session.in_driver import read_changes
from sparksync.merge.session.plan import BatchInfo
from sparksync.merge.session.remote.trust import membership
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import enumeration_bound
from sparksync.metadata.records import PublicationRow, SubscriptionRow
from sparksync.spark.reads import ReadPartition


@dataclass
class DownloadPlan:
    """What one device receives: its batches, the reads of their rows, and which rows go where."""

    subscription: str
    publisher: str
    partition_id: int
    start: int
    bound: int
    batches: list[BatchInfo] = field(default_factory=list)
    where: dict[int, int] = field(default_factory=dict)       # generation -> batch
    ranges: list[KeyRange] = field(default_factory=list)      # generations cut across batches, by key
    reads: list[ReadPartition] = field(default_factory=list)
    retried: list[tuple[int, str]] = field(default_factory=list)   # failed rows of filtered articles it asked for

    def metadata(self) -> dict:
        return {"source": self.publisher, "source_nick": 1, "start": self.start, "bound": self.bound,
                "partition_id": self.partition_id,
                "batches": [{"seq": b.seq, "lo": b.lo, "hi": b.hi, "nicknames": b.nicknames, "retry": b.retry,
                             "ends_within": b.ends_within} for b in self.batches],
                "where": {str(g): k for g, k in self.where.items()},
                "ranges": [[r.generation, r.after, r.upto, r.seq] for r in self.ranges]}


def plan_download(pub: Replica, url: str, publisher: str, prow: PublicationRow, reg: SubscriptionRow,
                  device_recgen: int, per_batch: int, failed: list[tuple[int, str]], bound: int | None = None,
                  from_feed: bool = False, keyset: bool = False) -> DownloadPlan:
    """``bound``: where the download ends (the partition feed's head), at most the enumeration bound;
    ``from_feed``: the feed's segments carry the changes and the removals (only retries are read here);
    ``keyset``: a generation bigger than a batch is cut by key (``plan_batches``), as the merge agent does."""
    pubid = prow.pubid
    start = min_watermark(reg.sentgen, device_recgen)
    articles = published_articles(pub, pubid)
    scheme = scheme_of(articles)
    bound = enumeration_bound(pub) if bound is None else min(bound, enumeration_bound(pub))
    if scheme.filtered and prow.precomputed:
        # a generation whose partition mappings are not made yet (a round skipped while a merge agent held
        # the publication) would be read without its rows' mappings: the device's watermark would pass
        # them. The download stops at the last evaluated generation; the next one brings the rest.
        bound = min(bound, int(prow.partitions_evaluated or 0))
    pid = int(reg.partition_id or ALL_PARTITIONS)
    plan = DownloadPlan(reg.name, publisher, pid, start, bound)
    partitions = None
    if scheme.filtered:
        filtered = frozenset(a.nickname for a in articles if scheme.articles[a.name].filtered)
        at_sync = evaluated_at_sync(articles, scheme, prow.precomputed)
        partitions = PartitionRead((pid,) if pid != ALL_PARTITIONS else (), filtered, prow.precomputed, scheme,
                                   at_sync, int(prow.partitions_evaluated or 0))
    retry = retries_of(failed, reg.name, pub, url, publisher, pubid, publisher, 1, start,
                       pid if pid != ALL_PARTITIONS else None, partitions, guarded=True)
    if partitions is not None and pid != ALL_PARTITIONS:
        plan.retried = _outside(pub, pubid, scheme, articles, pid, [(int(n), str(g).lower()) for n, g in failed
                                                                  if int(n) in partitions.filtered])
    link = plan_link(pub, pubid, publisher, 1, reg.replnickname, pid, start, bound, per_batch, partitions,
                     retry=bool(retry), threshold=prow.generation_leveling_threshold if keyset else 0)
    plan.batches, plan.where, plan.ranges = link.batches, link.where, link.ranges
    plan.reads += retry
    if link.generations and not from_feed:
        plan.reads += change_reads(url, publisher, pub, articles, publisher, 1, start, bound, 1, partitions)
    if REMOVE_GENERATION in link.where and partitions is not None and not from_feed:
        plan.reads += removal_reads(url, publisher, pub, articles, publisher, 1, start, bound, partitions)
    return plan


def _outside(pub: Replica, pubid: str, scheme, articles, partition_id: int,
             failed: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Of ``failed`` (rows of filtered articles), those the publisher does not hold in the partition."""
    if not failed:
        return failed
    part = next((p for p in partitions_of(pub, pubid) if p.partition_id == partition_id), None)
    if part is None:
        return failed
    by_nick = {a.nickname: a for a in articles}
    inside: set[tuple[int, str]] = set()
    for nick in {n for n, _ in failed}:
        a = by_nick.get(nick)
        cond = scheme.condition(pub.dialect, a.name, "m", part.params) if a is not None else None
        if a is None or cond is None:
            continue
        for chunk in in_chunks([g for n, g in failed if n == nick]):
            inside |= {(nick, g) for g in membership(pub, a, cond, chunk)[1]}
    return [f for f in failed if f not in inside]


def read_download(plan: DownloadPlan):
    """The plan's change rows that are the device's: of its generations, of its partition (or of every
    partition), and not meant for another destination."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = read_changes(plan.reads)
    failed = table.filter(pc.equal(table.column("generation"), READ_ERROR_GENERATION))
    if failed.num_rows:      # a read that failed: nothing of this download is sent (never a partial one)
        raise ReportedError(ErrorInfo.from_dict(json.loads(failed.column("row")[0].as_py())))
    table = _not_in_partition(plan, table)
    if not table.num_rows:
        return table
    keep = pc.is_in(table.column("generation"),
                    pa.array(list(plan.where) + [r.generation for r in plan.ranges], pa.int64()))
    part = table.column("partition_id")
    keep = pc.and_(keep, pc.or_(pc.equal(part, ALL_PARTITIONS), pc.equal(part, plan.partition_id)))
    target = table.column("target")
    keep = pc.and_(keep, pc.fill_null(pc.equal(target, plan.subscription), True))
    return table.filter(keep).sort_by([("generation", "ascending"), ("tablenick", "ascending"),
                                       ("rowguid", "ascending")])


def _not_in_partition(plan: DownloadPlan, table):
    """The failed rows of filtered articles the device asked for that are not in its partition and were read
    for nobody (in another partition, deleted there, or nowhere at all) go as removals: the device forgets
    them if it holds them, and the answer is the same whatever the rowguid is elsewhere."""
    import pyarrow as pa

    if not plan.retried or REMOVE_GENERATION not in plan.where:
        return table
    got = {(int(n), str(g).lower()) for n, g in zip(table.column("tablenick").to_pylist(),
                                                    table.column("rowguid").to_pylist())}
    gone = [(n, g) for n, g in dict.fromkeys(plan.retried) if (n, g) not in got]
    if not gone:
        return table
    n = len(gone)
    removals = pa.table({
        "source": [plan.publisher] * n, "source_nick": pa.array([1] * n, pa.int32()),
        "tablenick": pa.array([t for t, _ in gone], pa.int32()), "rowguid": [g for _, g in gone],
        "generation": pa.array([REMOVE_GENERATION] * n, pa.int64()), "op": [OP_REMOVE] * n,
        "lineage": ["{}"] * n, "colv": pa.nulls(n, pa.string()), "row": pa.nulls(n, pa.string()),
        "target": [plan.subscription] * n, "partition_id": pa.array([plan.partition_id] * n, pa.int32()),
    }, schema=table.schema)
    return pa.concat_tables([table, removals])
