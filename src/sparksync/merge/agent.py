"""The merge agent: one sync session over the subscriptions of a merge publication.

1. Close the open generations at both ends (sp_MSmakegeneration).
2. Upload: for each subscription, in configuration order, negotiate the common generation (the
   subscriber's sentgen vs the publisher's recgen; the lower if they differ), enumerate the
   subscriber's closed generations after it that the publisher does not already have, and apply them
   at the publisher in generation batches. All uploads go through one Spark task, sorted by
   subscription then batch: they are resolved as if the subscriptions had synced one after another.
3. Close the publisher's generation again, so what was just uploaded can go down in the same run.
4. Download: the publisher's changes are read once and fanned out to every subscription (a Spark
   join with each subscription's batches, which leave out generations it already has), then applied
   in parallel, one destination per group.
5. Move the senders' watermarks, log conflicts where ``conflict_logging`` says, record history.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .. import failpoints, locks
from ..config import PUBLISHER_PRIORITY, PublicationConfig, SubscriptionConfig, Topology
from ..dialects import connect
from ..dialects.replica import Replica
from ..errors import ConfigurationError, ErrorInfo, NotInitialized, ReplicaDamaged, SchemaDrift, SparksyncError
from ..metadata import store
from ..names import TableName
from ..progress import ProgressListener, Reporter, driver_host, silent
from ..redaction import redact
from ..spark.failures import recover, spark_error_message
from ..spark.partitioning import group_labels, split_ranges
from ..spark.reads import ReadPartition, ReadPlan
from .batch import ArticleStats
from .changes import (
    ALL_PARTITIONS,
    CHANGE_SCHEMA,
    OP_REMOVE,
    READ_ERROR_GENERATION,
    REALIGN_GENERATION,
    REMOVE_GENERATION,
    RETRY_GENERATION,
    change_read,
)
from .cleanup import ReplicaCleanup, clean_replica
from .conflicts import ConflictRecord, ConflictType, log_conflict
from .decide import ArticleRules
from .evaluation import evaluate, evaluated_at_sync, member_sql, partition_generations
from .expiration import SubscriptionExpired, expiry
from .generations import enumeration_bound, generation_rows, make_generation, waiting_writers
from .integrity import check_identity, check_not_behind, describe, replica_problems
from .partitions import PartitionScheme, scheme_of
from .plan import ApplyContext, BatchInfo, DestinationInfo, Route
from .resolvers import BUILTIN, Replicas, check_user_resolver
from .schema_changes import pending, publisher_drift, replay, schema_version
from .setupbelongs import belongs_reads, not_belongs_read
from .stream import RESULT_SCHEMA, BatchResult, apply_stream_empty, make_mapper
from .tracking import published_articles, tracked_article

DEFAULT_GENERATIONS_PER_BATCH = 100
RETRY_CHUNK = 1000            # failed changes re-read per partition (rowguids bound in one IN list)


@dataclass
class MergeOptions:
    exchange: str = "both"                       # both | upload | download
    upload_generations_per_batch: int = DEFAULT_GENERATIONS_PER_BATCH
    download_generations_per_batch: int = DEFAULT_GENERATIONS_PER_BATCH
    subscriptions: list[str] | None = None
    cleanup: bool = True                         # retention cleanup at the end of the session (-MetadataRetentionCleanup)


@dataclass
class DirectionStats(ArticleStats):
    """What one direction of a session moved for one article (batches: generation batches applied)."""

    batches: int = 0

    def add(self, s: dict) -> None:
        """Add one batch's ``ArticleStats`` (as a dict) to these."""
        for f in fields(ArticleStats):
            value = s.get(f.name, 0)
            setattr(self, f.name, getattr(self, f.name) + (float(value) if isinstance(f.default, float) else int(value)))


@dataclass
class SubscriptionSession:
    subscription: str
    publication: str
    upload: dict[str, DirectionStats] = field(default_factory=dict)     # article -> stats
    download: dict[str, DirectionStats] = field(default_factory=dict)
    problems: list[ErrorInfo] = field(default_factory=list)            # what went wrong, as data
    seconds: float = 0.0
    batches: dict[str, int] = field(default_factory=dict)               # direction -> batches applied

    def fail(self, message: str, error: ErrorInfo | SparksyncError | None = None) -> None:
        """Record a problem: ``message`` for the user, with the code and object of ``error``."""
        info = error.info() if isinstance(error, SparksyncError) else error
        self.problems.append(ErrorInfo(info.code, message, info.obj, info.transient) if info
                             else ErrorInfo("error", message))

    @property
    def errors(self) -> list[str]:
        return [p.message for p in self.problems]

    def total(self, direction: str) -> DirectionStats:
        t = DirectionStats()
        for s in getattr(self, direction).values():
            t.add(vars(s))
        t.batches = self.batches.get(direction, 0)
        return t

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class MergeSummary:
    session_id: str
    subscriptions: list[SubscriptionSession] = field(default_factory=list)
    conflicts: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    started_at: Any = field(default_factory=store.utcnow)
    # replica -> why changes made there cannot be sent yet (generations waiting for open transactions)
    waiting: dict[str, list[str]] = field(default_factory=dict)
    cleanup: list[ReplicaCleanup] = field(default_factory=list)    # retention cleanup at the session's end

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.subscriptions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id, "ok": self.ok, "seconds": round(self.seconds, 3),
            "subscriptions": [{
                "subscription": s.subscription, "publication": s.publication, "ok": s.ok, "errors": s.errors,
                "error_codes": [p.code for p in s.problems],
                "seconds": round(s.seconds, 3), "batches": s.batches,
                "upload": {a: vars(v) for a, v in s.upload.items()},
                "download": {a: vars(v) for a, v in s.download.items()},
            } for s in self.subscriptions],
            "conflicts": self.conflicts,
            "waiting": self.waiting,
            "cleanup": [c.to_dict() for c in self.cleanup],
        }


def make_batches(generations: list[dict], start: int, bound: int, per_batch: int, source: str,
                 source_nick: int) -> tuple[list[BatchInfo], dict[int, int]]:
    """Generation batches of at most ``per_batch`` generations covering (start, bound].

    Returns the batches and generation -> batch number. The last batch's upper bound is ``bound``,
    so the watermark passes generations the partner already had.
    """
    if bound <= start:
        return [], {}
    chunks = [generations[i:i + per_batch] for i in range(0, len(generations), per_batch)] or [[]]
    batches, where, lo = [], {}, start
    for k, chunk in enumerate(chunks):
        hi = bound if k == len(chunks) - 1 else int(chunk[-1]["generation"])
        nicks = sorted({int(n) for g in chunk for n in (g["nicknames"] or [])})
        batches.append(BatchInfo(source, source_nick, k, lo, hi, nicks))
        for g in chunk:
            where[int(g["generation"])] = k
        lo = hi
    return batches, where


def _min_watermark(a: int | None, b: int | None) -> int:
    vals = [v for v in (a, b) if v is not None]
    return min(vals) if vals else 0


def _change_reads(replica_url: str, label: str, replica: Replica, articles: list[dict], source: str,
                  source_nick: int, lo: int, hi: int, parts: int = 1,
                  partitions: PartitionRead | None = None) -> list[ReadPartition]:
    """Partitions reading one replica's changes in generations (lo, hi]: per article (``articles``: the
    replica's ``published_articles`` rows), upserts and
    deletes, each cut into up to ``parts`` generation ranges of about the same size (so every core
    reads, ``split_ranges``); a partition with nothing to read is left out (each one costs a Spark task).
    ``partitions`` (a filtered publication's download): a filtered article's upserts are read once per
    partition of the run they belong to (current partition mappings), its deletes only for the
    partitions the row was in (past partition mappings)."""
    d = replica.dialect
    p = d.capabilities.paramstyle
    contents, tomb = replica.meta("MSmerge_contents"), replica.meta("MSmerge_tombstone")
    current, past = replica.meta("MSmerge_current_partition_mappings"), replica.meta("MSmerge_past_partition_mappings")

    def counts(table: str, nick: int) -> list[tuple[int, int]]:
        return [(int(g), int(n)) for g, n in replica.query(
            f"SELECT generation, count(*) FROM {table} WHERE tablenick = {int(nick)} AND generation > {p} "
            f"AND generation <= {p} GROUP BY generation ORDER BY generation", [lo, hi])]

    out = []
    for a in articles:
        art = tracked_article(a)
        cols = [[c.name, c.type.to_dict()] for c in art.info.columns]
        rg = d.quote(art.rowguid_column)
        select = ", ".join(f"t.{d.quote(c.name)}" for c in art.info.columns)
        base = {"source": source, "source_nick": source_nick, "tablenick": art.nickname,
                "key": list(art.info.primary_key)}
        filtered = partitions is not None and art.nickname in partitions.filtered
        if filtered and partitions is not None and art.nickname in partitions.at_sync:
            # evaluated at sync time: upserts are read by setupbelongs.belongs_reads; deletes go to every subscriber
            deletes = counts(tomb, art.nickname)
            for a_lo, a_hi in (split_ranges(deletes, lo, hi, parts) if deletes else []):
                out.append(change_read(
                    replica_url, f"SELECT generation, rowguid, lineage, NULL FROM {tomb} WHERE tablenick = "
                    f"{int(art.nickname)} AND generation > {p} AND generation <= {p}", [a_lo, a_hi], [],
                    f"{label}/{a['name']} deletes", {**base, "op": "delete"}))
            continue
        upserts = counts(contents, art.nickname)
        mapped, mapped_del, part_col = "", "", ""
        if filtered:
            assert partitions is not None
            ids = partitions.in_list()
            mapped = (f"JOIN {current} cm ON cm.tablenick = c.tablenick AND cm.rowguid = c.rowguid "
                      f"AND cm.partition_id IN ({ids}) ")
            # a delete goes to every partition of the run the row was ever in (not only the one it left
            # in the tombstone's generation: a delete that won a conflict later is written again)
            mapped_del = (f"JOIN {past} pm ON pm.tablenick = t.tablenick AND pm.rowguid = t.rowguid "
                          f"AND pm.partition_id IN ({ids}) ")
            part_col = ", cm.partition_id"
            base = {**base, "partitioned": True}
        for a_lo, a_hi in (split_ranges(upserts, lo, hi, parts) if upserts else []):
            out.append(change_read(
                replica_url,
                f"SELECT c.generation, c.rowguid, c.lineage, c.colv{part_col}, {select} FROM {contents} c "
                f"JOIN {d.table_sql(art.table)} t ON t.{rg} = c.rowguid {mapped}"
                f"WHERE c.tablenick = {int(art.nickname)} AND c.generation > {p} AND c.generation <= {p}",
                [a_lo, a_hi], cols, f"{label}/{a['name']} changes", {**base, "op": "upsert"}))
        deletes = counts(tomb, art.nickname)
        for a_lo, a_hi in (split_ranges(deletes, lo, hi, parts) if deletes else []):
            out.append(change_read(
                replica_url,
                f"SELECT {'DISTINCT ' if filtered else ''}t.generation, t.rowguid, t.lineage, "
                f"NULL{part_col.replace('cm.', 'pm.')} FROM {tomb} t "
                f"{mapped_del}WHERE t.tablenick = {int(art.nickname)} AND t.generation > {p} AND t.generation <= {p}",
                [a_lo, a_hi], [], f"{label}/{a['name']} deletes", {**base, "op": "delete"}))
    return out


@dataclass(frozen=True)
class PartitionRead:
    """What a filtered publication's download reads: the partitions of the run's subscriptions, the
    nicknames of the filtered articles, and how membership is known: the partition mappings
    (precomputed) or evaluated by the reads themselves (``at_sync``: every filtered article with
    SetupBelongs, those with partition_options = 3 otherwise; ``setupbelongs.py``)."""

    ids: tuple[int, ...]
    filtered: frozenset[int]
    precomputed: bool = True
    scheme: PartitionScheme | None = None
    at_sync: frozenset[int] = frozenset()     # filtered articles evaluated at sync time (no mappings)
    evaluated: int = 0                        # the highest generation whose partition mappings are made

    def in_list(self) -> str:
        return ", ".join(str(int(i)) for i in self.ids)


def _removal_reads(replica_url: str, label: str, replica: Replica, articles: list[dict], source: str,
                   source_nick: int, lo: int, hi: int, partitions: PartitionRead) -> list[ReadPartition]:
    """Rows that left a partition of the run in generations (lo, hi] and are in it no more (past
    mappings without a current one; deleted rows go as deletes): removed at that partition's
    subscribers (``OP_REMOVE``). Not subject to the generations a subscriber already has: a row a
    subscriber changed out of its partition is removed from it. SetupBelongs: the belongs and
    not-belongs reads of ``setupbelongs.py`` instead."""
    p = replica.p
    current, past = replica.meta("MSmerge_current_partition_mappings"), replica.meta("MSmerge_past_partition_mappings")
    tomb = replica.meta("MSmerge_tombstone")
    by_name = {a["name"]: a for a in articles}
    out = []
    for a in articles:
        nick = int(a["nickname"])
        if nick not in partitions.filtered:
            continue
        if nick in partitions.at_sync:
            assert partitions.scheme is not None
            base = {"source": source, "source_nick": source_nick, "tablenick": nick,
                    "key": list(tracked_article(a).info.primary_key)}
            out += belongs_reads(replica_url, label, replica, partitions.scheme, a, by_name, base,
                                 partitions.in_list(), lo, hi)
            out.append(not_belongs_read(replica_url, label, replica, partitions.scheme, a, by_name, base,
                                        partitions.in_list(), lo, hi))
            continue
        base = {"source": source, "source_nick": source_nick, "tablenick": nick, "op": OP_REMOVE,
                "generation": REMOVE_GENERATION, "partitioned": True}
        out.append(change_read(
            replica_url,
            f"SELECT DISTINCT pm.generation, pm.rowguid, '{{}}', NULL, pm.partition_id FROM {past} pm "
            f"WHERE pm.tablenick = {nick} AND pm.generation > {p} AND pm.generation <= {p} "
            f"AND pm.partition_id IN ({partitions.in_list()}) "
            f"AND NOT EXISTS (SELECT 1 FROM {current} cm WHERE cm.tablenick = pm.tablenick "
            f"AND cm.rowguid = pm.rowguid AND cm.partition_id = pm.partition_id) "
            f"AND NOT EXISTS (SELECT 1 FROM {tomb} t WHERE t.tablenick = pm.tablenick AND t.rowguid = pm.rowguid)",
            [lo, hi], [], f"{label}/{a['name']} partition removals", base))
    return out


def _partition_generations(replica: Replica, pubid: str, partition_id: int, start: int, gens: list[dict],
                           evaluated: int) -> list[dict]:
    """Of ``gens``, the ones with changes for the partition (generation partition mappings); a
    generation above ``evaluated`` (not evaluated yet) is kept."""
    if not gens:
        return gens
    mine = partition_generations(replica, pubid, partition_id, start, int(gens[-1]["generation"]))
    return [g for g in gens if int(g["generation"]) in mine or int(g["generation"]) > evaluated]


def _retry_reads(destination: Replica, dest_name: str, source: Replica, source_url: str, label: str, pubid: str,
                 source_name: str, source_nick: int, start: int, partition: int | None = None,
                 partitions: PartitionRead | None = None) -> list[ReadPartition]:
    """Changes that failed at ``destination`` before and sit in generations it has passed: read them
    again from the source, for that destination only (newer ones come with the normal batches); a row
    of a filtered article only while it is in the destination's ``partition`` (by its mappings, or
    evaluated for an article evaluated at sync time)."""
    failed = store.select_rows(destination, "MSmerge_failed_changes", {"source_nickname": source_nick})
    if not failed:
        return []
    by_nick: dict[int, list[str]] = {}
    for f in failed:
        by_nick.setdefault(f["tablenick"], []).append(f["rowguid"])
    rows = {a["nickname"]: a for a in published_articles(source, pubid)}
    parts = []
    for nick, guids in by_nick.items():
        if nick not in rows:
            continue
        art = tracked_article(rows[nick])
        member = None
        if partitions is not None and partition is not None and nick in partitions.filtered:
            if nick in partitions.at_sync:
                assert partitions.scheme is not None
                member = member_sql(source, partitions.scheme, rows[nick], "c.rowguid", str(int(partition)))
            else:
                member = (f"EXISTS (SELECT 1 FROM {source.meta('MSmerge_current_partition_mappings')} cm WHERE "
                          f"cm.tablenick = c.tablenick AND cm.rowguid = c.rowguid AND cm.partition_id = {int(partition)})")
        base = {"source": source_name, "source_nick": source_nick, "tablenick": nick, "target": dest_name,
                "key": list(art.info.primary_key)}
        for i in range(0, len(guids), RETRY_CHUNK):   # a driver binds at most so many parameters
            parts += _retry_partitions(source, source_url, label, art, guids[i:i + RETRY_CHUNK], start, base, member)
    return parts


def _retry_partitions(source: Replica, source_url: str, label: str, art, guids: list[str], start: int,
                      base: dict, member: str | None = None) -> list[ReadPartition]:
    """The upserts and the deletes of ``guids`` (one article) at the source, in generations up to
    ``start``; ``member``: a condition on the contents row ``c`` an upsert must meet (its partition)."""
    d = source.dialect
    p = d.capabilities.paramstyle
    nick = int(art.nickname)
    inlist = ", ".join([d.uuid_param()] * len(guids))
    cols = [[c.name, c.type.to_dict()] for c in art.info.columns]
    rg = d.quote(art.rowguid_column)
    select = ", ".join(f"t.{d.quote(c.name)}" for c in art.info.columns)
    return [
        change_read(
            source_url, f"SELECT c.generation, c.rowguid, c.lineage, c.colv, {select} "
            f"FROM {source.meta('MSmerge_contents')} c JOIN {d.table_sql(art.table)} t ON t.{rg} = c.rowguid "
            f"WHERE c.tablenick = {nick} AND c.rowguid IN ({inlist}) AND c.generation <= {p}"
            + (f" AND {member}" if member else ""),
            [*guids, start], cols, f"{label}/{art.table} retries", {**base, "op": "upsert"}),
        change_read(
            source_url, f"SELECT generation, rowguid, lineage, NULL FROM {source.meta('MSmerge_tombstone')} "
            f"WHERE tablenick = {nick} AND rowguid IN ({inlist}) AND generation <= {p}",
            [*guids, start], [], f"{label}/{art.table} retried deletes", {**base, "op": "delete"}),
    ]


def check_resolvers(topology: Topology, pubcfg: PublicationConfig) -> None:
    """Every user resolver of the publication imports, is callable and takes the three arguments; one
    error lists every problem (setup and the merge agent both check, before anything changes)."""
    search = str(topology.base_dir)
    problems = [f"publications ({pubcfg.name}).articles ({a.table}).resolver: {why}" for a in pubcfg.articles
                if a.resolver not in BUILTIN and (why := check_user_resolver(a.resolver, search))]
    if problems:
        raise ConfigurationError(f"publication {pubcfg.name}: resolvers cannot be used", problems, obj=pubcfg.name)


def _rules(pubcfg: PublicationConfig, replica: Replica, articles: list[dict],
           search: str | None = None) -> dict[int, ArticleRules]:
    d = replica.dialect
    by_key = {str(d.resolve_name(a.table_name)): a for a in pubcfg.articles}
    out = {}
    for a in articles:
        key = str(TableName(a["source_schema"], a["source_table"]))
        cfg = by_key.get(key)
        out[a["nickname"]] = ArticleRules(a["nickname"], bool(a["column_tracking"]),
                                          cfg.resolver if cfg else "default", cfg.resolver_column if cfg else None,
                                          cfg.compensate_for_errors if cfg else False, search)
    return out


def _replicas(pub: Replica, pubid: str) -> Replicas:
    """This publication's replicas: a database subscribed to two publications has a priority and a
    subscriber type in each."""
    rows = store.select_rows(pub, "sysmergesubscriptions", {"pubid": pubid})
    prio, local, names = {}, set(), {}
    for r in rows:
        names[r["replnickname"]] = r["name"]
        if r["role"] == "publisher":
            prio[r["replnickname"]] = PUBLISHER_PRIORITY
        elif r["subscriber_type"] == 2:
            local.add(r["replnickname"])
        else:
            prio[r["replnickname"]] = float(r["priority"])
    return Replicas(publisher=1, priority=prio, local=frozenset(local), names=names)


@dataclass(frozen=True)
class Endpoint:
    """One end of an exchange: the publisher or a subscriber, with its open connection."""

    name: str
    url: str
    nickname: int
    replica: Replica
    is_publisher: bool
    partition_id: int = ALL_PARTITIONS          # a subscriber of a filtered publication: its partition

    def partner_row(self, pubid: str, subscription: str) -> dict:
        """The key of this replica's ``sysmergesubscriptions`` row for its partner in ``subscription``:
        at the publisher the subscriber's row, at a subscriber the publisher's."""
        if self.is_publisher:
            return {"pubid": pubid, "name": subscription, "role": "subscriber"}
        return {"pubid": pubid, "role": "publisher"}


@dataclass
class Link:
    """One subscription's exchange in one direction: ``source``'s changes to ``dest``."""

    subscription: str
    session: SubscriptionSession
    source: Endpoint
    dest: Endpoint
    order: int                                   # upload: configuration order (first to sync wins)
    batches: list[BatchInfo] = field(default_factory=list)


@dataclass
class DirectionPlan:
    """Everything one direction's Spark stage needs: the change reads, the routes of each source's
    generations to the destinations' batches, and the destinations."""

    links: list[Link] = field(default_factory=list)          # the links that could be planned
    reads: list[ReadPartition] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    destinations: dict[str, DestinationInfo] = field(default_factory=dict)


class MergeAgent:
    """Runs merge sessions; keeps one Spark session warm across them (``--continuous``)."""

    def __init__(self, topology: Topology, spark, report: Reporter = silent):
        self.topology = topology
        self.spark = spark
        self.report = report

    # -- public -------------------------------------------------------------------------------
    def run(self, options: MergeOptions | None = None) -> MergeSummary:
        options = options or MergeOptions()
        t0 = time.perf_counter()
        summary = MergeSummary(store.new_guid())
        for pubcfg, subs in self.topology.subscriptions_by_publication("merge", options.subscriptions):
            self._publication(pubcfg, subs, options, summary)
        summary.seconds = time.perf_counter() - t0
        return summary

    # -- one publication ------------------------------------------------------------------------
    def _publication(self, pubcfg: PublicationConfig, subs: list[SubscriptionConfig], options: MergeOptions,
                     summary: MergeSummary) -> None:
        topo = self.topology
        with locks.hold(topo, "merge", [pubcfg.name], self.report), \
                connect(topo.publisher_url, topo.publisher.name) as pub:
            store.require_metadata(pub)
            prows = store.select_rows(pub, "sysmergepublications", {"name": pubcfg.name})
            if not prows:
                raise NotInitialized(f"publication {pubcfg.name} is not published; run 'sparksync setup'")
            try:
                self._session(pub, pubcfg, prows[0], subs, options, summary)
            except Exception as e:
                self._failed_history(pub, prows[0]["pubid"], subs, summary, e)
                raise

    def _failed_history(self, pub: Replica, pubid: str, subs: list[SubscriptionConfig], summary: MergeSummary,
                        error: Exception) -> None:
        """A session that stopped before its end (the publisher damaged or drifted, a resolver that cannot
        be loaded, a failed Spark job): one failed session row per subscription, with the error, so
        ``status`` shows them stopped and why. Best effort: the error itself is what the caller sees."""
        message = ErrorInfo.of(error).recorded()
        now = store.utcnow()
        with contextlib.suppress(Exception), pub.transaction():
            recorded = {r["subscription"] for r in store.select_rows(pub, "MSmerge_sessions",
                                                                    {"session_id": summary.session_id})}
            for s in subs:
                if s.name in recorded:
                    continue
                store.insert_row(pub, "MSmerge_sessions", {
                    "session_id": summary.session_id, "subscription": s.name, "pubid": pubid,
                    "start_time": summary.started_at, "end_time": now,
                    "duration": (now - summary.started_at).total_seconds(), "status": "failed",
                    **{f"{d}_{k}": 0 for d in ("upload", "download") for k in ("inserts", "updates", "deletes",
                                                                                  "conflicts")},
                    "retries": 0, "failed": 0, "message": message})

    def _session(self, pub: Replica, pubcfg: PublicationConfig, prow: dict, subs: list[SubscriptionConfig],
                 options: MergeOptions, summary: MergeSummary) -> None:
        topo = self.topology
        pubid, threshold = prow["pubid"], prow["generation_leveling_threshold"]
        pub_rows = {r["name"]: r for r in store.select_rows(pub, "sysmergesubscriptions", {"pubid": pubid})}
        sessions: dict[str, SubscriptionSession] = {}
        active = []
        for s in subs:
            sess = sessions[s.name] = SubscriptionSession(s.name, pubcfg.name)
            summary.subscriptions.append(sess)
            r = pub_rows.get(s.name)
            if r is None or r["status"] != 1:
                sess.fail(f"subscription {s.name} is not initialized; run 'sparksync setup'",
                          ErrorInfo(NotInitialized.code, "", s.name))
                continue
            expired = expiry(prow.get("retention"), r, store.utcnow())
            if expired is not None:
                sess.fail(expired, ErrorInfo(SubscriptionExpired.code, "", s.name))
                continue
            active.append((s, r))
        if not active:
            return
        check_resolvers(topo, pubcfg)
        articles = published_articles(pub, pubid)
        scheme = scheme_of(articles)
        precomputed = prow.get("use_partition_groups") in (None, 1)     # else SetupBelongs: evaluated by the reads
        filtered = frozenset(int(a["nickname"]) for a in articles if scheme.articles[a["name"]].filtered)
        at_sync = evaluated_at_sync(articles, scheme, precomputed)
        base = ApplyContext(pubid=pubid, upload=True, session_id=summary.session_id, publication=pubcfg.name,
                            rules=_rules(pubcfg, pub, articles, str(topo.base_dir)), replicas=_replicas(pub, pubid),
                            destinations={}, article_names={a["nickname"]: a["name"] for a in articles},
                            filtered=filtered, mapped=filtered - at_sync,
                            refused_out_of_partition=frozenset(int(a["nickname"]) for a in articles
                                                               if int(a["nickname"]) in filtered
                                                               and a.get("partition_options") in (1, 3)))
        started = {s.name: time.perf_counter() for s, _ in active}
        drift = publisher_drift(pub, articles)
        if drift:
            raise SchemaDrift(f"publication {pubcfg.name}: the publisher's table(s) changed since they were published: "
                              f"{', '.join(drift)}; run 'sparksync setup' to replicate the schema change (nothing was "
                              "merged)", obj=pubcfg.name)
        damaged = replica_problems(pub, pubid)
        if damaged:
            raise ReplicaDamaged(f"publication {pubcfg.name}: the publisher {topo.publisher.name} is damaged: "
                                 f"{describe(damaged)}; nothing was merged (run 'sparksync setup' to repair)",
                                 obj=topo.publisher.name)
        schema = (pubcfg.name, schema_version(pub, pubid), pending(pub, pubid, 0))
        self.report(f"merge {pubcfg.name}: closing generations at {topo.publisher.name} and {len(active)} subscriber(s)")
        self._report_waits(topo.publisher.name, pub, make_generation(pub, 1, threshold), summary)
        publisher = Endpoint(topo.publisher.name, topo.publisher_url, 1, pub, True)
        ends: dict[str, Endpoint] = {}
        try:
            for s, r in active:
                try:
                    ends[s.name] = self._open_subscriber(s, r, pubid, threshold, summary, schema)
                except SparksyncError as e:
                    sessions[s.name].fail(e.message, e)
            synced = [(s, sessions[s.name]) for s, _ in active if s.name in ends]
            if options.exchange in ("both", "upload") and synced:
                self._direction("upload", [Link(s.name, sess, ends[s.name], publisher, order)
                                           for order, (s, sess) in enumerate(synced)],
                                options.upload_generations_per_batch, pubcfg, base, summary)
            make_generation(pub, 1, threshold)
            partitions = None
            if scheme.filtered and precomputed:
                try:
                    self._evaluate_partitions(pub, pubid, scheme, articles, threshold)
                except SparksyncError as e:      # e.g. a row in two non-overlapping partitions: no download
                    for _, sess in synced:
                        sess.fail(f"partition evaluation: {e.message}", e)
                    synced = []
            if scheme.filtered:
                evaluated = store.select_rows(pub, "sysmergepublications", {"pubid": pubid})[0]["partitions_evaluated"]
                partitions = PartitionRead(
                    tuple(sorted({e.partition_id for e in ends.values() if e.partition_id != ALL_PARTITIONS})),
                    filtered, precomputed, scheme, at_sync, int(evaluated or 0))
            if options.exchange in ("both", "download") and synced:
                self._direction("download", [Link(s.name, sess, publisher, ends[s.name], order)
                                             for order, (s, sess) in enumerate(synced)],
                                options.download_generations_per_batch, pubcfg, base, summary, partitions)
            if options.cleanup:
                self._cleanup(publisher, [ends[s.name] for s, sess in synced if sess.ok], pubcfg.name, summary)
        finally:
            for end in ends.values():
                end.replica.close()
        for s, _ in active:
            sessions[s.name].seconds = time.perf_counter() - started[s.name]
        self._history(pub, pubid, base.article_names, summary, [sessions[s.name] for s, _ in active])

    def _cleanup(self, publisher: Endpoint, subscribers: list[Endpoint], publication: str,
                 summary: MergeSummary) -> None:
        """Retention cleanup at the replicas of this session that merged (SQL Server's merge agent does it
        at the start of a session); a failure is reported, never the session's."""
        now = store.utcnow()
        for end in [publisher, *subscribers]:
            try:
                result = clean_replica(end.replica, end.name, "publisher" if end.is_publisher else "subscriber", now,
                                       {publication})
            except SparksyncError as e:
                result = ReplicaCleanup(end.name, "publisher" if end.is_publisher else "subscriber", error=e.message)
            summary.cleanup.append(result)
            if result.error or result.total:
                self.report(f"cleanup {end.name}: " + (f"FAILED: {result.error}" if result.error else
                                                      ", ".join(f"{n} {t}" for t, n in sorted(result.removed.items()))
                                                      + " removed"))

    def _evaluate_partitions(self, pub: Replica, pubid: str, scheme: PartitionScheme, articles: list[dict],
                             threshold: int) -> None:
        """Bring the partition mappings up to the closed generations; when rows were realigned into a
        new generation, close again (so the download passes it) and evaluate what that closed."""
        for _ in range(2):
            ev = evaluate(pub, pubid, scheme, articles)
            if ev.entered or ev.left or ev.realigned:
                self.report(f"partitions: generations ({ev.generations[0]}, {ev.generations[1]}]: {ev.entered} "
                            f"row(s) entered and {ev.left} left a partition"
                            + (f", {ev.realigned} join-filter row(s) realigned into generation "
                               f"{ev.realignment_generation}" if ev.realigned else ""))
            if ev.realignment_generation is None:
                return
            make_generation(pub, 1, threshold)

    def _open_subscriber(self, s: SubscriptionConfig, registered: dict, pubid: str, threshold: int,
                         summary: MergeSummary, schema: tuple[str, int, list[dict]]) -> Endpoint:
        """Connect to a subscriber, check it is the registered replica and intact, replay the schema
        changes it has not had, close its generation."""
        url = self.topology.resolve_url(s.database)
        rep = connect(url, s.name)
        try:
            store.require_metadata(rep)
            check_identity(rep, s.name, registered)
            check_not_behind(rep, s.name, registered, pubid)
            damaged = replica_problems(rep, pubid)
            if damaged:
                raise ReplicaDamaged(
                    f"subscriber {s.name} is damaged: {describe(damaged)}; its changes may not have been "
                    "recorded, so it was not merged (run 'sparksync setup' to repair its tracking)", obj=s.name)
            publication, version, changes = schema
            have = schema_version(rep, pubid)
            if have < version:
                for line in replay(rep, pubid, publication, [c for c in changes if int(c["schemaversion"]) > have],
                                   int(registered["replnickname"])):
                    self.report(f"{s.name}: schema change replayed: {line}")
            self._report_waits(s.name, rep, make_generation(rep, registered["replnickname"], threshold), summary)
        except BaseException:
            rep.close()
            raise
        return Endpoint(s.name, url, registered["replnickname"], rep, False,
                        int(registered.get("partition_id") or ALL_PARTITIONS))

    def _report_waits(self, name: str, replica: Replica, result, summary: MergeSummary) -> None:
        """Say which closed generations cannot be sent yet and which open transactions they wait for
        (commit safety: a generation is enumerated only once every transaction that wrote into it ended)."""
        if not result.unsettled:
            return
        lines = [w.describe() for w in waiting_writers(replica, result.unsettled)]
        summary.waiting[name] = lines
        for line in lines:
            self.report(f"{name}: {line}; its changes go at a later merge")

    # -- one direction ------------------------------------------------------------------------------
    def _direction(self, direction: str, links: list[Link], per_batch: int, pubcfg: PublicationConfig,
                   base: ApplyContext, summary: MergeSummary, partitions: PartitionRead | None = None) -> None:
        """Upload (every subscriber to the publisher, one task, configuration order) or download (the
        publisher to every subscriber, in parallel): plan, apply on Spark, then move the senders'
        watermarks and log the conflicts where ``conflict_logging`` wants them."""
        plan = self._plan_direction(direction, links, per_batch, pubcfg, base.pubid, partitions)
        ctx = replace(base, upload=direction == "upload", destinations=plan.destinations)
        t0 = time.perf_counter()
        results = self._run_isolated(plan, ctx, direction)
        if results is None:
            return
        self._report_phase(direction, results, time.perf_counter() - t0)
        for link in plan.links:
            sess, source, dest = link.session, link.source, link.dest
            try:
                mine = self._settle_direction(ctx, dest.name, source.name, link.batches, results, sess, direction)
            except SparksyncError as e:
                sess.fail(f"{direction}: {e.message}", e)
                continue
            done = self._done_hi(mine, link.batches)
            failpoints.hit("agent.before_sender_watermark", link.subscription)
            if done is None:
                continue
            try:
                store.update_rows(source.replica, "sysmergesubscriptions",
                                  {"sentgen": done, "last_sync_date": store.utcnow()},
                                  source.partner_row(base.pubid, link.subscription))
            except SparksyncError as e:   # applied at the destination; sent again next time (idempotent)
                sess.fail(f"{direction}: recording what was sent: {e.message}", e)
        self._remote_conflicts(ctx, results, plan.links, pubcfg, summary)

    def _plan_direction(self, direction: str, links: list[Link], per_batch: int, pubcfg: PublicationConfig,
                        pubid: str, partitions: PartitionRead | None = None) -> DirectionPlan:
        """For each link: the common generation (the source's ``sentgen`` toward the destination against
        the destination's ``recgen`` from the source; the lower when they differ), the source's closed
        generations after it that the destination does not already have, cut into batches; changes that
        failed at the destination before, read again. Each source is read once, from the lowest start
        of its links. A link whose planning fails is that subscription's error only."""
        plan = DirectionPlan()
        bounds: dict[str, int] = {}
        lowest: dict[str, int] = {}
        sources: dict[str, Endpoint] = {}
        removals: dict[str, tuple[Endpoint, int]] = {}    # source -> (it, lowest start of filtered destinations)
        here = {"publisher", "both"} if direction == "upload" else {"subscriber", "both"}
        there = {"subscriber", "both"} if direction == "upload" else {"publisher", "both"}
        for link in links:
            source, dest = link.source, link.dest
            try:
                sent = store.select_rows(source.replica, "sysmergesubscriptions",
                                         source.partner_row(pubid, link.subscription))
                received = store.select_rows(dest.replica, "sysmergesubscriptions",
                                             dest.partner_row(pubid, link.subscription))
                start = _min_watermark(sent[0]["sentgen"] if sent else None,
                                       received[0]["recgen"] if received else None)
                if source.name not in bounds:
                    bounds[source.name] = enumeration_bound(source.replica)
                bound = bounds[source.name]
                gens = [g for g in generation_rows(source.replica, start, bound)
                        if dest.nickname not in (g["nicknames"] or [])]
                if partitions is not None and partitions.precomputed and dest.partition_id != ALL_PARTITIONS:
                    gens = _partition_generations(source.replica, pubid, dest.partition_id, start, gens,
                                                  partitions.evaluated)
                batches, where = make_batches(gens, start, bound, per_batch, source.name, source.nickname)
                for b in batches:
                    b.partition_id = source.partition_id
                retry = _retry_reads(dest.replica, dest.name, source.replica, source.url, source.name, pubid,
                                     source.name, source.nickname, start, dest.partition_id, partitions)
            except SparksyncError as e:      # this subscription only: the others still go on
                link.session.fail(f"{direction}: {e.message}", e)
                continue
            if retry:
                if not batches:
                    batches = [BatchInfo(source.name, source.nickname, 0, start, start, [],
                                         partition_id=source.partition_id)]
                batches[0].retry = True
                plan.reads += retry
                plan.routes.append(Route(source.name, RETRY_GENERATION, dest.name, link.order, 0))
            if gens:
                lowest[source.name] = min(start, lowest.get(source.name, start))
                sources[source.name] = source
                plan.routes += [Route(source.name, g, dest.name, link.order, k) for g, k in where.items()]
            if partitions is not None and dest.partition_id != ALL_PARTITIONS and batches:
                # rows that left its partition: removed in its first batch, whatever generations it has
                removals[source.name] = (source, min(start, removals.get(source.name, (source, start))[1]))
                plan.routes.append(Route(source.name, REMOVE_GENERATION, dest.name, link.order, batches[0].seq))
                if partitions.at_sync:           # descendants of changed rows: after their parents, last batch
                    plan.routes.append(Route(source.name, REALIGN_GENERATION, dest.name, link.order, batches[-1].seq))
            link.batches = batches
            plan.links.append(link)
            info = plan.destinations.get(dest.name)
            if info is None:
                info = plan.destinations[dest.name] = DestinationInfo(
                    name=dest.name, url=dest.url, nickname=dest.nickname, is_publisher=dest.is_publisher,
                    partition_id=dest.partition_id,
                    watermark={"pubid": pubid}, batches={}, log_conflicts_here=pubcfg.conflict_logging in here,
                    log_conflicts_remote=pubcfg.conflict_logging in there)
            info.batches[source.name] = batches
            self.report(f"{direction} {link.subscription}: generations ({start}, {bound}], {len(gens)} to send in "
                        f"{len(batches)} batch(es)")
        for name, source in ({n: s for n, (s, _) in removals.items()} | sources).items():
            try:
                articles = published_articles(source.replica, pubid)
                if name in sources:
                    plan.reads += _change_reads(source.url, name, source.replica, articles, name, source.nickname,
                                                lowest[name], bounds[name], self.spark.sparkContext.defaultParallelism,
                                                partitions)
                if name in removals and partitions is not None:
                    plan.reads += _removal_reads(source.url, name, source.replica, articles, name, source.nickname,
                                                 removals[name][1], bounds[name], partitions)
            except SparksyncError as e:
                for link in plan.links:
                    if link.source.name == name:
                        link.session.fail(f"{direction}: {e.message}", e)
                plan.links = [x for x in plan.links if x.source.name != name]
                plan.routes = [r for r in plan.routes if r.source != name]
        return plan

    # -- Spark ------------------------------------------------------------------------------------
    def _run_isolated(self, plan: DirectionPlan, ctx: ApplyContext, direction: str) -> list[BatchResult] | None:
        """``_run``; if the Spark job itself fails (not one destination or one read: those come back as
        results), every subscription of this direction gets the reason in one line, and no watermark moves."""
        try:
            return self._run(plan, ctx)
        except Exception as e:  # noqa: BLE001 - a failed Spark job is reported per subscription
            error = recover(e) or ErrorInfo(ErrorInfo.INTERNAL, spark_error_message(e) or f"{type(e).__name__}: {e}")
        message = redact(" ".join(error.message.split()))
        for link in plan.links:
            link.session.fail(f"{direction} failed: {message}", error)
        return None

    def _run(self, plan: DirectionPlan, ctx: ApplyContext) -> list[BatchResult]:
        """Read the changes once, send each to the apply groups that need it, apply.

        Destinations are dealt to at most as many groups as there are cores (a task costs a Python
        worker); each group is one Spark partition and one task, which applies to its destinations one
        batch at a time. A change is copied once per group, not once per destination."""
        if not plan.reads or not plan.routes:
            return []
        spark = self.spark
        from pyspark.sql import functions as F

        partitions = max(1, min(len(plan.destinations), spark.sparkContext.defaultParallelism))
        labels = group_labels(partitions)
        destinations = list(dict.fromkeys(r.destination for r in plan.routes))
        source_order = {s: i for i, s in enumerate(dict.fromkeys(r.source for r in plan.routes))}   # upload: config order
        groups = {d: labels[i % partitions] for i, d in enumerate(destinations)}
        routes: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for r in plan.routes:
            routes.setdefault((r.source, r.generation), []).append((r.destination, r.seq))
        # every destination takes the changes of all partitions (unfiltered articles) and of its own
        part_of = {name: info.partition_id for name, info in plan.destinations.items()}
        route_rows = {(r.source, r.generation, p, groups[r.destination], source_order[r.source]) for r in plan.routes
                      for p in {ALL_PARTITIONS, part_of.get(r.destination, ALL_PARTITIONS)}}
        # a failed read sends one error row, to every group with a destination fed by its source
        route_rows |= {(r.source, READ_ERROR_GENERATION, ALL_PARTITIONS, groups[r.destination], source_order[r.source])
                       for r in plan.routes}
        routed = spark.createDataFrame(
            sorted(route_rows), "source STRING, generation BIGINT, partition_id INT, apply_group INT, source_order INT")
        changes = spark.read.format("sparksync").schema(CHANGE_SCHEMA).option(
            "plan", ReadPlan(plan.reads).to_json()).load()
        with ProgressListener(self._progress_line, driver_host(spark)) as listener:
            task_ctx = replace(ctx, routes=routes, groups=groups, progress=listener.address)
            rows = (changes.join(F.broadcast(routed), ["source", "generation", "partition_id"])
                    .repartition(partitions, "apply_group")
                    .sortWithinPartitions("apply_group", "source_order", "generation", "tablenick", "rowguid")
                    .mapInArrow(make_mapper(task_ctx), RESULT_SCHEMA))
            return [BatchResult.from_row(r.asDict()) for r in rows.collect()]

    def _progress_line(self, e: dict) -> None:
        """One line per article of a generation batch applied in a Spark task, as it commits."""
        n = sum(int(e.get(k, 0)) for k in ("inserts", "updates", "deletes", "removed"))
        secs = float(e.get("seconds") or 0.0)
        parts = [f"{e[k]:,} {label}" for k, label in (("inserts", "ins"), ("updates", "upd"), ("deletes", "del"),
                                                     ("conflicts", "conflict(s)"), ("skipped", "skipped"),
                                                     ("failed", "failed"), ("removed", "removed: left the partition"))
                 if e.get(k)]
        where = f"{e['source']} -> {e['destination']}"
        self.report(f"{e['direction']} {where} batch {e['batch']}/{e['batches']}, {e['article']}: {n:,} change(s)"
                    + (f" ({', '.join(parts)})" if parts else "") + f" in {secs:.2f}s"
                    + (f", {n / secs:,.0f} changes/s" if secs >= 0.05 and n else ""))

    def _report_phase(self, phase: str, results: list[BatchResult], seconds: float) -> None:
        if not results:
            return
        moved: dict[str, int] = {}
        for r in results:
            for st in r.stats.values():
                n = sum(int(st.get(k, 0)) for k in ("inserts", "updates", "deletes", "skipped", "failed", "removed"))
                moved[r.destination] = moved.get(r.destination, 0) + n
        total = sum(moved.values())
        batches = sum(1 for r in results if r.status == "applied")
        self.report(f"{phase}: {total} change(s) in {batches} batch(es) to {len(moved)} destination(s) in "
                    f"{seconds:.1f}s ({total / seconds if seconds else 0:,.0f} changes/s)")

    # -- bookkeeping ------------------------------------------------------------------------------
    def _settle_direction(self, ctx: ApplyContext, dest: str, source: str, batches: list[BatchInfo],
                          results: list[BatchResult], sess: SubscriptionSession, direction: str) -> list[BatchResult]:
        """This link's results, completed with the trailing batches no change row reached (applied on
        the driver: they only move the watermark), counted into the session. Returns them."""
        mine = sorted((r for r in results if r.destination == dest and r.source == source), key=lambda r: r.batch_seq)
        if not any(r.status == "error" for r in mine):
            last = max((r.batch_seq for r in mine), default=-1)
            rest = [b for b in batches if b.seq > last]   # trailing batches no change row reached: empty
            if rest:
                extra = [BatchResult.from_row(x) for x in apply_stream_empty(ctx, dest, source, rest)]
                mine += extra
                results.extend(extra)
        stats = getattr(sess, direction)
        for r in mine:
            if r.status == "error":
                sess.fail(f"{direction} batch {r.batch_seq} at {dest}: {r.message.splitlines()[0]}", r.error)
                continue
            for nick, st in r.stats.items():
                article = stats.setdefault(ctx.article_names.get(int(nick), nick), DirectionStats())
                article.add(st)
                article.batches += r.status == "applied"      # batches that carried this article
        sess.batches[direction] = len([r for r in mine if r.status == "applied"])
        return mine

    @staticmethod
    def _done_hi(mine: list[BatchResult], batches: list[BatchInfo]) -> int | None:
        """The generation the sender may record as sent: the end of the last batch of an unbroken run
        of applied (or already applied) batches."""
        status = {r.batch_seq: r.status for r in mine}
        hi = None
        for b in batches:
            if status.get(b.seq) not in ("applied", "skipped"):
                break
            hi = b.hi
        return hi

    def _remote_conflicts(self, ctx: ApplyContext, results: list[BatchResult], links: list[Link],
                          pubcfg: PublicationConfig, summary: MergeSummary) -> None:
        """Log the conflicts that ``conflict_logging`` wants at the source side of this direction
        (one transaction per replica), and list every conflict in the summary."""
        by_source = {(link.source.name, link.dest.name): link for link in links}
        remote: dict[tuple[str, str], list[ConflictRecord]] = {}
        for r in results:
            link = by_source.get((r.source, r.destination))
            for c in r.conflicts:
                subscription = link.subscription if link else (r.source if ctx.upload else r.destination)
                if c.get("log_remote") and link is not None:
                    remote.setdefault((link.source.name, subscription), []).append(ConflictRecord(
                        ConflictType(c["conflict_type"]), c["tablenick"], c["rowguid"], c["reason_code"],
                        c["reason_text"], c["origin"], c["winner"], c["losing_row"], c["columns"]))
                summary.conflicts.append({k: v for k, v in c.items() if k != "log_remote"} | {
                    "subscription": subscription, "direction": "upload" if ctx.upload else "download"})
        sources = {link.source.name: link.source for link in links}
        sessions = {link.subscription: link.session for link in links}
        for (source_name, subscription), recs in remote.items():
            target = sources[source_name].replica
            try:
                arts = {a["nickname"]: tracked_article(a) for a in published_articles(target, ctx.pubid)}
                with target.transaction():
                    for rec in recs:
                        log_conflict(target, ctx.pubid, pubcfg.name, arts[rec.tablenick], rec, subscription,
                                     ctx.upload, ctx.session_id)
            except SparksyncError as e:
                sessions[subscription].fail(f"logging {len(recs)} conflict(s) at {target.label}: {e.message}", e)

    def _history(self, pub: Replica, pubid: str, names: dict[int, str], summary: MergeSummary,
                 sessions: list[SubscriptionSession]) -> None:
        nick_of = {name: nick for nick, name in names.items()}
        session_id, now = summary.session_id, store.utcnow()
        with pub.transaction():
            for s in sessions:
                up, down = s.total("upload"), s.total("download")
                store.insert_row(pub, "MSmerge_sessions", {
                    "session_id": session_id, "subscription": s.subscription, "pubid": pubid,
                    "start_time": summary.started_at,
                    "end_time": now, "duration": s.seconds, "status": "succeeded" if s.ok else "failed",
                    "upload_inserts": up.inserts, "upload_updates": up.updates, "upload_deletes": up.deletes,
                    "upload_conflicts": up.conflicts, "download_inserts": down.inserts,
                    "download_updates": down.updates, "download_deletes": down.deletes,
                    "download_conflicts": down.conflicts, "retries": up.retries + down.retries,
                    "failed": up.failed + down.failed, "message": redact("; ".join(s.errors)) or None})
                if s.ok:     # a merge that succeeded, whatever it moved, is what expiration counts from
                    store.update_rows(pub, "sysmergesubscriptions", {"last_sync_date": now},
                                      {"pubid": pubid, "name": s.subscription, "role": "subscriber"})
                for direction in ("upload", "download"):
                    for article, st in getattr(s, direction).items():
                        store.insert_row(pub, "MSmerge_articlehistory", {
                            "session_id": session_id, "subscription": s.subscription,
                            "tablenick": nick_of.get(article, 0), "article": article, "direction": direction,
                            "inserts": st.inserts, "updates": st.updates, "deletes": st.deletes,
                            "conflicts": st.conflicts, "retries": st.retries, "failed": st.failed,
                            "duration": st.seconds, "removed": st.removed})
