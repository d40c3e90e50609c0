"""The partition feed: a round's changes of a publication read once and written once per partition, as
compressed columnar segments that every device's download sends as they are.

After a round (the web door's ``Door.round``: ``publisher.close_and_evaluate``) has closed the publisher's
generation and evaluated partitions, the feed takes the generations after its head up to the new bound (at
most the last evaluated one) and makes one *segment* of them: the unfiltered articles' changes read once for
every device, each web partition's changes — and the rows that left it — read once for its devices, each
written as one wire frame (``frames.py``) under ``[server] feed_dir``. Small rounds are read and written in
this process; a round of more than ``[spark] driver_round_changes`` changes is one Spark job, a task per
group of partitions (``spark.reads.per_task``), so the work that grows with the number of devices runs in
bulk, in Spark.

A download whose watermark is the feed's head or the start of one of its segments (a device that synced
before: every download ends at the head) is its own small frame (its batches, changes sent again) followed
by the segments' files: nothing read from the publisher's tables for that device, nothing encoded for it.
The device applies a row's last appearance only (``subscriber.apply_download``): a segment is what the publisher
held when it was read, so a row changed again, or that left the partition, in a later segment appears
twice. A device further behind, of a partition a segment was not written for, or of a publication the feed
cannot serve (filters evaluated at sync time: SetupBelongs, partitions not precomputed) is read for itself
(``downloads.py``), up to the same head. A change of the publication's shape (a schema change, an article
or filter changed) starts the feed again at the current bound; segments every device has passed are removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, ErrorInfo, ReportedError
from sparksync.merge.partitions.evaluation import evaluated_at_sync
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.session.changes import ALL_PARTITIONS, READ_ERROR_GENERATION
from sparksync.merge.session.enumeration import PartitionRead, change_reads, removal_reads
from sparksync.merge.session.in_driver import estimated_changes, read_changes
from sparksync.merge.session.remote import feed_index
from sparksync.merge.session.remote.feed_index import Index, Segment
from sparksync.merge.session.remote.frames import write_changes
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import enumeration_bound, generation_rows
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow, Role, SubscriptionStatus
from sparksync.progress import Reporter, silent
from sparksync.redaction import redact
from sparksync.result_rows import result_arrow_schema
from sparksync.spark.reads import ReadPartition, per_task
from sparksync.storage import Folder

MAX_SEGMENTS = 4096           # segments kept per publication (a device behind the oldest is read for itself)
WRITTEN = "partition_id INT, path STRING, rows BIGINT, bytes BIGINT"     # a Spark task's result rows
ECHO_LIMIT = 1000     # a device's own changes a download may carry back to it (each skipped there) before it is
                      # read for the device instead of served from the segments


def _sources(gens: list[dict]) -> dict[int, int]:
    """Replica nickname -> the changes of ``gens`` received from it (the generations a replica's upload made
    at the publisher name it)."""
    out: dict[int, int] = {}
    for g in gens:
        for n in g["nicknames"] or []:
            if int(n) != 1:
                out[int(n)] = out.get(int(n), 0) + int(g.get("changecount") or 0)
    return out


@dataclass(frozen=True)
class FeedItem:
    """One task of a segment's writing: the reads of some partitions' rows (or of the unfiltered articles'), written
    under ``folder`` (the feed's epoch: a path or URL)."""

    folder: str
    lo: int
    hi: int
    reads: list[ReadPartition]


class Feed:
    """The feed of every publication ``serve`` serves devices of, shared by every ``serve`` whose ``feed_dir`` is the
    same storage (``feed_index.py``). ``spark``: the SparkSession if it is up, or None at once while it starts
    (``LazySpark.ready``: a device's request never waits for a JVM; the round runs in this process then); ``spark``
    None: every round in this process. ``driver_round_changes``: the largest round read in this process when Spark
    is up. ``extend`` and ``drop`` are called by the holder of the publication's feed round lock (``Door.round``)."""

    def __init__(self, root: Folder | Path | str, spark: Callable[[], Any] | None = None,
                 driver_round_changes: int = 5000, report: Reporter = silent):
        self.root = root if isinstance(root, Folder) else Folder(root)
        self.spark = spark
        self.driver_round_changes = driver_round_changes
        self.report = report
        self._cache: dict[str, Index] = {}
        self._lock = threading.Lock()
        self._said_starting = False

    def start(self) -> None:
        """At start: ``feed_dir`` is writable (else one message naming it), and the folders of an earlier release's
        ``serve`` that is gone are deleted (``feed-<32 hex>`` with an ``owner`` file: host and process id). The
        feed itself stays: another ``serve`` may be serving it, and a restarted one goes on from its head."""
        try:
            self.root.check_writable()
        except (OSError, ConfigurationError) as e:
            why = e.message if isinstance(e, ConfigurationError) else e.strerror or str(e)
            raise ConfigurationError(f"[server] feed_dir = {self.root.describe()!r}: serve cannot write there "
                                     f"({redact(why)})", obj="server.feed_dir") from None
        if not self.root.local:
            return
        for old in self.root.local_path().glob("feed-*"):
            if not (old.is_dir() and len(old.name) == 37 and all(c in "0123456789abcdef" for c in old.name[5:])):
                continue
            try:
                host, pid = (old / "owner").read_text().split()
            except (OSError, ValueError):
                host, pid = socket.gethostname(), "0"
            if host == socket.gethostname() and not _alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)

    def stop(self) -> None:
        """At a clean exit: nothing to remove (the feed is every door's, and the next start's)."""
        with self._lock:
            self._cache.clear()

    def index(self, publication: str, fresh: bool = False) -> Index | None:
        """The publication's index: as this door last read or wrote it, or (``fresh``) as it is on storage now.
        Each round reads it fresh (``extend``), and every download follows a round (its own, or one it shared),
        so a download never ends before what another door's round wrote: one read per round, none per download,
        whatever the storage."""
        with self._lock:
            if not fresh and publication in self._cache:
                return self._cache[publication]
        index = feed_index.load(self.root, publication)
        self._keep(publication, index)
        return index

    def _keep(self, publication: str, index: Index | None) -> None:
        with self._lock:
            if index is None:
                self._cache.pop(publication, None)
            else:
                self._cache[publication] = index

    def epoch(self, publication: str, index: Index) -> Folder:
        """The folder of the index's segments (``Segment.files`` are relative to it)."""
        return feed_index.folder_of(self.root, publication).child(index.epoch)

    # -- a download -------------------------------------------------------------------------------
    def head(self, publication: str) -> int | None:
        """Where every download of ``publication`` ends (None: the feed does not serve it)."""
        index = self.index(publication)
        return index.head if index is not None else None

    def serve(self, publication: str, start: int, partition_id: int,
              nickname: int | None = None) -> tuple[int, list[bytes], int] | None:
        """(head, the frames of the segments covering (start, head], the rows they hold) for a device of partition
        ``partition_id`` whose download starts at ``start``; None when the feed cannot give it (the device is read
        for itself). A device (``nickname``) whose own uploads are more than ``ECHO_LIMIT`` changes of these
        segments is read for itself too: its download leaves its own changes out (what the segments, written
        for every device of the partition, cannot). A segment removed meanwhile (another door's round, or by
        hand): None."""
        feed = self.index(publication)
        if feed is None:
            return None
        if start == feed.head:
            return feed.head, [], 0
        at = next((i for i, s in enumerate(feed.segments) if s.lo == start), None)
        if at is None or any(partition_id not in s.partitions for s in feed.segments[at:]):
            return None
        if nickname is not None and sum(s.sources.get(nickname, 0) for s in feed.segments[at:]) > ECHO_LIMIT:
            return None
        epoch = self.epoch(publication, feed)
        try:
            files = [epoch.read(rel) for s in feed.segments[at:] for rel in s.files_of(partition_id)]
        except OSError:
            return None
        return feed.head, files, sum(s.rows_of(partition_id) for s in feed.segments[at:])

    # -- a round ----------------------------------------------------------------------------------
    def extend(self, pub: Replica, url: str, publisher: str, publication: str) -> Segment | None:
        """Bring the feed of ``publication`` up to the publisher's evaluated bound: the segment written (None:
        nothing new, or the feed started again). Raises ``ReportedError`` when a read failed (nothing kept)."""
        prow = store.select_one(pub, PublicationRow, {"name": publication})
        if prow is None:
            return None
        articles = published_articles(pub, prow.pubid)
        scheme = scheme_of(articles)
        at_sync = evaluated_at_sync(articles, scheme, prow.precomputed) if scheme.filtered else frozenset()
        if scheme.filtered and (not prow.precomputed or at_sync):
            self.drop(publication)            # partitions evaluated by each download's own reads
            return None
        bound = enumeration_bound(pub)
        if scheme.filtered:
            bound = min(bound, int(prow.partitions_evaluated or 0))
        shape = _shape(prow, articles)
        feed = self.index(publication, fresh=True)
        why = None if feed is None else "its articles or schema changed" if feed.shape != shape else \
            "the publisher is behind the feed's head" if bound < feed.head else \
            f"the publisher's generation {feed.head} is not the one the feed was written from" \
            if _guid(pub, feed.head) != feed.head_guid else None
        if feed is None or why is not None:
            self.drop(publication)
            started = Index.new(publication, shape, bound, _guid(pub, bound))
            feed_index.save(self.root, started)
            self._keep(publication, started)
            self.report(f"feed {publication}: starts at generation {bound}" + (f" ({why})" if why else ""))
            return None
        if bound == feed.head:
            return None
        # (partition, sentgen, active) of the web subscriptions (configured or enrolled: a device's database is
        # named web:<subscription> at the publisher): the partitions written, what devices have passed
        regs = [(int(part or 0), int(sent or 0), int(status) == SubscriptionStatus.ACTIVE)
                for part, sent, status in pub.query(
                    f"SELECT partition_id, sentgen, status FROM {pub.meta('sysmergesubscriptions')} "
                    f"WHERE pubid = {pub.dialect.uuid_param()} AND role = {pub.p} AND database_label LIKE {pub.p}",
                    [prow.pubid, Role.SUBSCRIBER.value, "web:%"])]
        pids = frozenset(part for part, _, _ in regs if part) if scheme.filtered else frozenset({ALL_PARTITIONS})
        gens = generation_rows(pub, feed.head, bound)
        lo = feed.head
        filtered = [a for a in articles if scheme.articles[a.name].filtered]
        unfiltered = [a for a in articles if not scheme.articles[a.name].filtered]
        estimate = estimated_changes(gens)
        on_spark = self.spark is not None and estimate > self.driver_round_changes
        epoch = self.epoch(publication, feed)
        name = f"{lo}-{bound}"
        items = []
        spark = None
        if gens:
            parts = 1
            if on_spark:
                assert self.spark is not None
                spark = self.spark()
                if spark is None and not self._said_starting:
                    self.report(f"feed {publication}: Spark is starting; its rounds run in this process until it is up")
                self._said_starting = spark is None
            if spark is not None:
                parts = spark.sparkContext.defaultParallelism
            if unfiltered:
                items.append(FeedItem(epoch.location, lo, bound,
                                      change_reads(url, publisher, pub, unfiltered, publisher, 1, lo, bound, parts)))
            ids = sorted(pids - {ALL_PARTITIONS})
            groups = [ids[i::parts] for i in range(min(parts, len(ids)))] if filtered else []
            nicks = frozenset(a.nickname for a in filtered)
            for group in groups:
                read = PartitionRead(tuple(group), nicks, True, scheme, frozenset(), int(prow.partitions_evaluated or 0))
                items.append(FeedItem(epoch.location, lo, bound,
                                      change_reads(url, publisher, pub, filtered, publisher, 1, lo, bound, 1, read)
                                      + removal_reads(url, publisher, pub, filtered, publisher, 1, lo, bound, read)))
        items = [i for i in items if i.reads]
        if spark is not None and items:
            written = [r.asDict() for r in per_task(spark, items, write_item, WRITTEN).collect()]
        else:
            written = [r for item in items for b in write_item(item) for r in b.to_pylist()]
        errors = [w for w in written if w["partition_id"] == READ_ERROR_GENERATION]
        if errors:
            epoch.delete(name)
            raise ReportedError(ErrorInfo.from_dict(json.loads(errors[0]["path"])))
        segment = Segment(lo, bound, pids, {int(w["partition_id"]): str(w["path"]) for w in written},
                          sum(int(w["rows"]) for w in written), sum(int(w["bytes"]) for w in written),
                          {int(w["partition_id"]): int(w["rows"]) for w in written}, _sources(gens))
        lowest = min((sent for _, sent, active in regs if active), default=bound)
        segments = [*feed.segments, segment]
        gone = [s for s in segments if s.hi <= lowest] + segments[:-MAX_SEGMENTS]
        kept = [s for s in segments if s.hi > lowest][-MAX_SEGMENTS:]
        extended = Index(publication, feed.epoch, shape, bound, _guid(pub, bound), kept)
        feed_index.save(self.root, extended)
        self._keep(publication, extended)
        for s in gone:
            with contextlib.suppress(OSError):
                epoch.delete(f"{s.lo}-{s.hi}")
        self.report(f"feed {publication}: generations ({lo}, {bound}], {segment.rows} row(s) in {len(segment.files)} "
                    f"file(s) for {len(pids)} partition(s){' (Spark)' if spark is not None and items else ''}")
        return segment

    def drop(self, publication: str) -> None:
        """Stop serving ``publication`` from the feed (its downloads are read for each device) and remove its
        files, until a round starts it again (after a round that failed to write its segment: no device
        waits on it)."""
        folder = feed_index.folder_of(self.root, publication)
        with contextlib.suppress(OSError):
            folder.delete(feed_index.INDEX)
        with self._lock:
            self._cache.pop(publication, None)
        with contextlib.suppress(OSError):
            folder.delete("")


def _guid(pub: Replica, generation: int) -> str | None:
    """The publisher's generation ``generation`` (its guid; None: no such generation, or 0)."""
    if generation <= 0:
        return None
    g = pub.scalar(f"SELECT guidsrc FROM {pub.meta('MSmerge_genhistory')} WHERE generation = {pub.p}", [generation])
    return str(g).lower() if g is not None else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _shape(prow: PublicationRow, articles: list[ArticleRow]) -> str:
    """What a segment's rows depend on besides their generations: a change of it starts the feed again."""
    return json.dumps([prow.pubid, prow.schema_version, prow.precomputed,
                       [(a.nickname, a.name, a.filter_clause, a.join_filters, a.partition_options, a.table_schema,
                         a.processing_group) for a in articles]], sort_keys=True, default=str)


def write_item(item: FeedItem) -> Iterator:
    """Read one item's rows and write each partition's as one frame (in a Spark task, or in ``serve``) under
    ``<lo>-<hi>/`` of the item's folder (a path or URL: ``storage.Folder``): Arrow batches of ``WRITTEN`` rows, each
    path relative to that folder; a failed read is one row of partition ``READ_ERROR_GENERATION`` whose path is the
    error (nothing is written)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = result_arrow_schema(WRITTEN)
    table = read_changes(item.reads)
    failed = table.filter(pc.equal(table.column("generation"), READ_ERROR_GENERATION)) if table.num_rows else table
    if failed.num_rows:
        yield pa.RecordBatch.from_pylist([{"partition_id": READ_ERROR_GENERATION, "path": failed.column("row")[0].as_py(),
                                           "rows": 0, "bytes": 0}], schema=schema)
        return
    folder = Folder(item.folder)
    out = []
    pids = pc.unique(table.column("partition_id")).to_pylist() if table.num_rows else []
    table = table.combine_chunks()      # one copy, the read's batches freed: a take from many chunks combines them again
    pa.default_memory_pool().release_unused()
    for pid in pids:
        rows = table if len(pids) == 1 else table.filter(pc.equal(table.column("partition_id"), pid))
        # in the order a device applies them (its batches' rows together: what it holds at once, spooled.py), taken
        # by index as the frame is written: no sorted copy of the round's rows
        order = pc.sort_indices(rows, [("generation", "ascending"), ("tablenick", "ascending"),
                                       ("rowguid", "ascending")])
        data = write_changes(rows, {"segment": [item.lo, item.hi], "partition": int(pid)}, order)
        path = f"{item.lo}-{item.hi}/p{int(pid)}.ssw"
        folder.write(path, data)
        out.append({"partition_id": int(pid), "path": path, "rows": rows.num_rows, "bytes": len(data)})
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=schema)
