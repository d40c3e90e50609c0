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

import time
from dataclasses import dataclass, field, fields
from typing import Any

from .. import failpoints
from ..config import PublicationConfig, SubscriptionConfig, Topology
from ..dialects import connect
from ..dialects.base import Replica
from ..errors import NotInitialized, SparksyncError
from ..metadata import store
from ..names import TableName
from ..progress import ProgressListener, Reporter, driver_host, silent
from ..spark.datasource import ReadPartition, ReadPlan
from ..spark.partitioning import group_labels, split_ranges
from .apply import (ApplyContext, ArticleStats, BatchInfo, DestinationInfo, apply_stream_empty, log_conflict, make_mapper,
                    RESULT_SCHEMA)
from .changes import CHANGE_SCHEMA, RETRY_GENERATION
from .conflicts import ConflictRecord, ConflictType
from .decide import ArticleRules
from .generations import enumeration_bound, generation_rows, make_generation
from .publish import published_articles, tracked_article
from .resolvers import PUBLISHER_PRIORITY, Replicas

DEFAULT_GENERATIONS_PER_BATCH = 100


@dataclass
class MergeOptions:
    exchange: str = "both"                       # both | upload | download
    upload_generations_per_batch: int = DEFAULT_GENERATIONS_PER_BATCH
    download_generations_per_batch: int = DEFAULT_GENERATIONS_PER_BATCH
    subscriptions: list[str] | None = None


@dataclass
class DirectionStats(ArticleStats):
    """What one direction of a session moved for one article (batches: generation batches applied)."""

    batches: int = 0

    def add(self, s: dict) -> None:
        """Add one batch's ``ArticleStats`` (as a dict) to these."""
        for f in fields(ArticleStats):
            setattr(self, f.name, getattr(self, f.name) + type(f.default)(s.get(f.name, 0)))   # int or float


@dataclass
class SubscriptionSession:
    subscription: str
    publication: str
    upload: dict[str, DirectionStats] = field(default_factory=dict)     # article -> stats
    download: dict[str, DirectionStats] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, direction: str) -> DirectionStats:
        t = DirectionStats()
        for s in getattr(self, direction).values():
            t.add(vars(s))
            t.batches += s.batches
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

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.subscriptions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id, "ok": self.ok, "seconds": round(self.seconds, 3),
            "subscriptions": [{
                "subscription": s.subscription, "publication": s.publication, "ok": s.ok, "errors": s.errors,
                "seconds": round(s.seconds, 3),
                "upload": {a: vars(v) for a, v in s.upload.items()},
                "download": {a: vars(v) for a, v in s.download.items()},
            } for s in self.subscriptions],
            "conflicts": self.conflicts,
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
                  source_nick: int, lo: int, hi: int, parts: int = 1) -> list[ReadPartition]:
    """Partitions reading one replica's changes in generations (lo, hi]: per article (``articles``: the
    replica's ``published_articles`` rows), upserts and
    deletes, each cut into up to ``parts`` generation ranges of about the same size (so every core
    reads, ``split_ranges``); a partition with nothing to read is left out (each one costs a Spark task)."""
    d = replica.dialect
    p = d.capabilities.paramstyle
    contents, tomb = replica.meta("MSmerge_contents"), replica.meta("MSmerge_tombstone")

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
        base = {"source": source, "source_nick": source_nick, "tablenick": art.nickname}
        upserts = counts(contents, art.nickname)
        for a_lo, a_hi in (split_ranges(upserts, lo, hi, parts) if upserts else []):
            out.append(ReadPartition(
                replica_url,
                f"SELECT c.generation, c.rowguid, c.lineage, c.colv, {select} FROM {contents} c "
                f"JOIN {d.table_sql(art.table)} t ON t.{rg} = c.rowguid "
                f"WHERE c.tablenick = {int(art.nickname)} AND c.generation > {p} AND c.generation <= {p}",
                [a_lo, a_hi], cols, None, f"{label}/{a['name']} changes", "changes", {**base, "op": "upsert"}))
        deletes = counts(tomb, art.nickname)
        for a_lo, a_hi in (split_ranges(deletes, lo, hi, parts) if deletes else []):
            out.append(ReadPartition(
                replica_url,
                f"SELECT generation, rowguid, lineage, NULL FROM {tomb} "
                f"WHERE tablenick = {int(art.nickname)} AND generation > {p} AND generation <= {p}",
                [a_lo, a_hi], [], None, f"{label}/{a['name']} deletes", "changes", {**base, "op": "delete"}))
    return out


def _retry_reads(destination: Replica, dest_name: str, source: Replica, source_url: str, label: str, pubid: str,
                 source_name: str, source_nick: int, start: int) -> list[ReadPartition]:
    """Changes that failed at ``destination`` before and sit in generations it has passed: read them
    again from the source, for that destination only (newer ones come with the normal batches)."""
    failed = store.select_rows(destination, "MSmerge_failed_changes", {"source_nickname": source_nick})
    if not failed:
        return []
    d = source.dialect
    p = d.capabilities.paramstyle
    parts = []
    by_nick: dict[int, list[str]] = {}
    for f in failed:
        by_nick.setdefault(f["tablenick"], []).append(f["rowguid"])
    arts = {a["nickname"]: tracked_article(a) for a in published_articles(source, pubid)}
    for nick, guids in by_nick.items():
        art = arts.get(nick)
        if art is None:
            continue
        inlist = ", ".join([d.uuid_param()] * len(guids))
        cols = [[c.name, c.type.to_dict()] for c in art.info.columns]
        rg = d.quote(art.rowguid_column)
        select = ", ".join(f"t.{d.quote(c.name)}" for c in art.info.columns)
        base = {"source": source_name, "source_nick": source_nick, "tablenick": nick, "target": dest_name}
        parts.append(ReadPartition(
            source_url, f"SELECT c.generation, c.rowguid, c.lineage, c.colv, {select} FROM {source.meta('MSmerge_contents')} c "
            f"JOIN {d.table_sql(art.table)} t ON t.{rg} = c.rowguid WHERE c.tablenick = {int(nick)} "
            f"AND c.rowguid IN ({inlist}) AND c.generation <= {p}",
            [*guids, start], cols, None, f"{label}/{art.table} retries", "changes", {**base, "op": "upsert"}))
        parts.append(ReadPartition(
            source_url, f"SELECT generation, rowguid, lineage, NULL FROM {source.meta('MSmerge_tombstone')} "
            f"WHERE tablenick = {int(nick)} AND rowguid IN ({inlist}) AND generation <= {p}",
            [*guids, start], [], None, f"{label}/{art.table} retried deletes", "changes", {**base, "op": "delete"}))
    return parts


def _rules(pubcfg: PublicationConfig, replica: Replica, articles: list[dict]) -> dict[int, ArticleRules]:
    d = replica.dialect
    by_key = {str(d.resolve_name(a.table_name)): a for a in pubcfg.articles}
    out = {}
    for a in articles:
        key = str(TableName(a["source_schema"], a["source_table"]))
        cfg = by_key.get(key)
        out[a["nickname"]] = ArticleRules(a["nickname"], bool(a["column_tracking"]),
                                          cfg.resolver if cfg else "default", cfg.resolver_column if cfg else None,
                                          cfg.compensate_for_errors if cfg else False)
    return out


def _replicas(pub: Replica, pubid: str, topology: Topology) -> Replicas:
    rows = store.select_rows(pub, "sysmergesubscriptions")
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
        for pubcfg, subs in self.topology.subscriptions_by_publication("merge", options.subscriptions, "distribute"):
            self._publication(pubcfg, subs, options, summary)
        summary.seconds = time.perf_counter() - t0
        return summary

    # -- one publication ------------------------------------------------------------------------
    def _publication(self, pubcfg: PublicationConfig, subs: list[SubscriptionConfig], options: MergeOptions,
                     summary: MergeSummary) -> None:
        topo = self.topology
        with connect(topo.publisher_url, topo.publisher.name) as pub:
            store.require_metadata(pub)
            prows = store.select_rows(pub, "sysmergepublications", {"name": pubcfg.name})
            if not prows:
                raise NotInitialized(f"publication {pubcfg.name} is not published; run 'sparksync setup'")
            prow = prows[0]
            pubid, threshold = prow["pubid"], prow["generation_leveling_threshold"]
            if not pub.dialect.try_agent_lock(pub, f"merge:{pubid}"):
                raise SparksyncError(f"publication {pubcfg.name}: another merge agent is running", obj=pubcfg.name)
            try:
                self._session(pub, pubcfg, pubid, threshold, subs, options, summary)
            finally:
                pub.dialect.release_agent_lock(pub, f"merge:{pubid}")

    def _session(self, pub: Replica, pubcfg: PublicationConfig, pubid: str, threshold: int,
                 subs: list[SubscriptionConfig], options: MergeOptions, summary: MergeSummary) -> None:
        topo = self.topology
        pub_rows = {r["name"]: r for r in store.select_rows(pub, "sysmergesubscriptions", {"pubid": pubid})}
        sessions: dict[str, SubscriptionSession] = {}
        active = []
        for s in subs:
            sess = sessions[s.name] = SubscriptionSession(s.name, pubcfg.name)
            summary.subscriptions.append(sess)
            r = pub_rows.get(s.name)
            if r is None or r["status"] != 1:
                sess.errors.append(f"subscription {s.name} is not initialized; run 'sparksync setup'")
                continue
            active.append((s, r))
        if not active:
            return
        articles = published_articles(pub, pubid)
        rules = _rules(pubcfg, pub, articles)
        article_names = {a["nickname"]: a["name"] for a in articles}
        replicas = _replicas(pub, pubid, topo)
        started = {s.name: time.perf_counter() for s, _ in active}
        self.report(f"merge {pubcfg.name}: closing generations at {topo.publisher.name} and {len(active)} subscriber(s)")
        make_generation(pub, 1, threshold)
        subs_open: dict[str, Replica] = {}
        try:
            for s, r in list(active):
                try:
                    rep = subs_open[s.name] = connect(topo.resolve_url(s.database), s.name)
                    store.require_metadata(rep)
                    make_generation(rep, r["replnickname"], threshold)
                except SparksyncError as e:
                    sessions[s.name].errors.append(e.message)
                    active.remove((s, r))
            if options.exchange in ("both", "upload") and active:
                self._upload(pub, pubcfg, pubid, rules, article_names, replicas, active, subs_open, options, sessions,
                             summary)
            make_generation(pub, 1, threshold)
            if options.exchange in ("both", "download") and active:
                self._download(pub, pubcfg, pubid, articles, rules, article_names, replicas, active, subs_open, options,
                               sessions, summary)
        finally:
            for rep in subs_open.values():
                rep.close()
        for s, _ in active:
            sessions[s.name].seconds = time.perf_counter() - started[s.name]
        synced = {s.name for s, _ in active}
        self._history(pub, pubid, article_names, summary, [sessions[s.name] for s, _ in active] +
                      [x for x in sessions.values() if x.errors and x.subscription not in synced])

    # -- upload ----------------------------------------------------------------------------------
    def _upload(self, pub, pubcfg, pubid, rules, article_names, replicas, active, subs_open, options, sessions,
                summary) -> None:
        topo = self.topology
        parts, assign, batches_by_source = [], [], {}
        for order, (s, r) in enumerate(active):
            sub = subs_open[s.name]
            mine = store.select_rows(sub, "sysmergesubscriptions", {"pubid": pubid, "role": "publisher"})
            start = _min_watermark(mine[0]["sentgen"] if mine else None, r["recgen"])
            bound = enumeration_bound(sub)
            gens = [g for g in generation_rows(sub, start, bound) if 1 not in (g["nicknames"] or [])]
            batches, where = make_batches(gens, start, bound, options.upload_generations_per_batch, s.name,
                                          r["replnickname"])
            retry_parts = _retry_reads(pub, topo.publisher.name, sub, topo.resolve_url(s.database), s.name, pubid,
                                       s.name, r["replnickname"], start)
            if retry_parts:
                if not batches:
                    batches = [BatchInfo(s.name, r["replnickname"], 0, start, start, [])]
                batches[0].retry = True
                parts += retry_parts
                assign.append((s.name, RETRY_GENERATION, topo.publisher.name, order, 0))
            batches_by_source[s.name] = batches
            if gens:
                parts += _change_reads(topo.resolve_url(s.database), s.name, sub, published_articles(sub, pubid),
                                       s.name, r["replnickname"],
                                       start, bound, self.spark.sparkContext.defaultParallelism)
                assign += [(s.name, g, topo.publisher.name, order, k) for g, k in where.items()]
            self.report(f"upload {s.name}: generations ({start}, {bound}], {len(gens)} to send in "
                        f"{len(batches)} batch(es)")
        dest = DestinationInfo(topo.publisher.name, topo.publisher_url, 1, True, {"pubid": pubid}, batches_by_source,
                               pubcfg.conflict_logging in ("publisher", "both"))
        ctx = ApplyContext(pubid, True, summary.session_id, pubcfg.name, rules, replicas, {dest.name: dest},
                           article_names=article_names)
        t0 = time.perf_counter()
        results = self._run(parts, assign, ctx, partitions=1)
        self._report_phase("upload", results, time.perf_counter() - t0)
        for s, r in active:
            self._settle_direction(ctx, dest.name, s.name, batches_by_source[s.name], results, sessions[s.name],
                                   "upload")
            done = self._done_hi(results, dest.name, s.name, batches_by_source[s.name])
            failpoints.hit("agent.before_sender_watermark", s.name)
            if done is not None:
                store.update_rows(subs_open[s.name], "sysmergesubscriptions", {"sentgen": done, "last_sync_date": store.utcnow()},
                                  {"pubid": pubid, "role": "publisher"})
        self._remote_conflicts(ctx, results, subs_open, pub, pubcfg, summary)

    # -- download --------------------------------------------------------------------------------
    def _download(self, pub, pubcfg, pubid, articles, rules, article_names, replicas, active, subs_open, options, sessions,
                  summary) -> None:
        topo = self.topology
        bound = enumeration_bound(pub)
        pub_rows = {r["name"]: r for r in store.select_rows(pub, "sysmergesubscriptions", {"pubid": pubid})}
        dests, assign = {}, []
        retry_all: list[ReadPartition] = []
        lowest = None
        for order, (s, _) in enumerate(active):
            sub = subs_open[s.name]
            r = pub_rows[s.name]
            mine = store.select_rows(sub, "sysmergesubscriptions", {"pubid": pubid, "role": "publisher"})
            start = _min_watermark(r["sentgen"], mine[0]["recgen"] if mine else None)
            gens = [g for g in generation_rows(pub, start, bound) if r["replnickname"] not in (g["nicknames"] or [])]
            batches, where = make_batches(gens, start, bound, options.download_generations_per_batch,
                                          topo.publisher.name, 1)
            retry_parts = _retry_reads(sub, s.name, pub, topo.publisher_url, topo.publisher.name, pubid,
                                       topo.publisher.name, 1, start)
            if retry_parts:
                if not batches:
                    batches = [BatchInfo(topo.publisher.name, 1, 0, start, start, [])]
                batches[0].retry = True
                retry_all.extend(retry_parts)
                assign.append((topo.publisher.name, RETRY_GENERATION, s.name, order, 0))
            dests[s.name] = DestinationInfo(s.name, topo.resolve_url(s.database), r["replnickname"], False,
                                            {"pubid": pubid}, {topo.publisher.name: batches},
                                            pubcfg.conflict_logging in ("subscriber", "both"))
            if gens:
                lowest = start if lowest is None else min(lowest, start)
                assign += [(topo.publisher.name, g, s.name, order, k) for g, k in where.items()]
            self.report(f"download {s.name}: generations ({start}, {bound}], {len(gens)} to send in "
                        f"{len(batches)} batch(es)")
        parts = list(retry_all)
        if lowest is not None:
            parts += _change_reads(topo.publisher_url, topo.publisher.name, pub, articles, topo.publisher.name, 1,
                                   lowest, bound, self.spark.sparkContext.defaultParallelism)
        ctx = ApplyContext(pubid, False, summary.session_id, pubcfg.name, rules, replicas, dests,
                           article_names=article_names)
        t0 = time.perf_counter()
        results = self._run(parts, assign, ctx, partitions=max(1, len({a[2] for a in assign})))
        self._report_phase("download", results, time.perf_counter() - t0)
        for s, _ in active:
            batches = dests[s.name].batches[topo.publisher.name]
            self._settle_direction(ctx, s.name, topo.publisher.name, batches, results, sessions[s.name], "download")
            done = self._done_hi(results, s.name, topo.publisher.name, batches)
            failpoints.hit("agent.before_sender_watermark", s.name)
            if done is not None:
                store.update_rows(pub, "sysmergesubscriptions", {"sentgen": done, "last_sync_date": store.utcnow()},
                                  {"pubid": pubid, "name": s.name, "role": "subscriber"})
        self._remote_conflicts(ctx, results, subs_open, pub, pubcfg, summary)

    # -- Spark ------------------------------------------------------------------------------------
    def _run(self, parts: list[ReadPartition], assign: list[tuple], ctx: ApplyContext, partitions: int) -> list[dict]:
        """Read the changes once, send each to the apply groups that need it, apply.

        ``assign``: (source, generation, destination, order, batch seq). Destinations are dealt to
        at most ``partitions`` groups, no more than there are cores (a task costs a Python worker);
        each group is one Spark partition and one task, which applies to its destinations one
        batch at a time. A change is copied once per group, not once per destination."""
        if not parts or not assign:
            return []
        spark = self.spark
        from pyspark.sql import functions as F

        partitions = max(1, min(partitions, spark.sparkContext.defaultParallelism))
        labels = group_labels(partitions)
        destinations = list(dict.fromkeys(a[2] for a in assign))
        source_order = {s: i for i, s in enumerate(dict.fromkeys(a[0] for a in assign))}   # upload: config order
        ctx.groups = {d: labels[i % partitions] for i, d in enumerate(destinations)}
        ctx.routes = {}
        for source, generation, dest, _, seq in assign:
            ctx.routes.setdefault((source, generation), []).append((dest, seq))
        route_rows = sorted({(source, generation, ctx.groups[dest], source_order[source])
                             for source, generation, dest, _, _ in assign})
        routes = spark.createDataFrame(route_rows, "source STRING, generation BIGINT, apply_group INT, source_order INT")
        changes = spark.read.format("sparksync").schema(CHANGE_SCHEMA).option("plan", ReadPlan(parts).to_json()).load()
        with ProgressListener(self._progress_line, driver_host(spark)) as listener:
            ctx.progress = listener.address           # before the mapper (and ctx with it) is pickled
            rows = (changes.join(F.broadcast(routes), ["source", "generation"])
                    .repartition(partitions, "apply_group")
                    .sortWithinPartitions("apply_group", "source_order", "generation", "tablenick", "rowguid")
                    .mapInArrow(make_mapper(ctx), RESULT_SCHEMA))
            return [r.asDict() for r in rows.collect()]

    def _progress_line(self, e: dict) -> None:
        """One line per article of a generation batch applied in a Spark task, as it commits."""
        n = sum(int(e.get(k, 0)) for k in ("inserts", "updates", "deletes"))
        secs = float(e.get("seconds") or 0.0)
        parts = [f"{e[k]:,} {label}" for k, label in (("inserts", "ins"), ("updates", "upd"), ("deletes", "del"),
                                                     ("conflicts", "conflict(s)"), ("skipped", "skipped"),
                                                     ("failed", "failed")) if e.get(k)]
        where = f"{e['source']} -> {e['destination']}"
        self.report(f"{e['direction']} {where} batch {e['batch']}/{e['batches']}, {e['article']}: {n:,} change(s)"
                    + (f" ({', '.join(parts)})" if parts else "") + f" in {secs:.2f}s"
                    + (f", {n / secs:,.0f} changes/s" if secs >= 0.05 and n else ""))

    def _report_phase(self, phase: str, results: list[dict], seconds: float) -> None:
        import json as _json

        if not results:
            return
        by_article: dict[str, int] = {}
        for r in results:
            for _, st in _json.loads(r["stats"] or "{}").items():
                n = sum(int(st.get(k, 0)) for k in ("inserts", "updates", "deletes", "skipped", "failed"))
                by_article[r["destination"]] = by_article.get(r["destination"], 0) + n
        total = sum(by_article.values())
        batches = sum(1 for r in results if r["status"] == "applied")
        self.report(f"{phase}: {total} change(s) in {batches} batch(es) to {len(by_article)} destination(s) in "
                    f"{seconds:.1f}s ({total / seconds if seconds else 0:,.0f} changes/s)")

    # -- bookkeeping ------------------------------------------------------------------------------
    def _settle_direction(self, ctx: ApplyContext, dest: str, source: str, batches: list[BatchInfo],
                          results: list[dict], sess: SubscriptionSession, direction: str) -> None:
        import json as _json

        mine = sorted((r for r in results if r["destination"] == dest and r["source"] == source),
                      key=lambda r: r["batch_seq"])
        errors = [r for r in mine if r["status"] == "error"]
        if not errors:
            last = max((r["batch_seq"] for r in mine), default=-1)
            rest = [b for b in batches if b.seq > last]   # trailing batches no change row reached: empty
            if rest:
                mine += list(apply_stream_empty(ctx, dest, source, rest))
                errors = [r for r in mine if r["status"] == "error"]
        results.extend(r for r in mine if r not in results)
        for r in mine:
            if r["status"] == "error":
                sess.errors.append(f"{direction} batch {r['batch_seq']} at {dest}: {r['message'].splitlines()[0]}")
                continue
            stats = getattr(sess, direction)
            for nick, st in _json.loads(r["stats"] or "{}").items():
                stats.setdefault(ctx.article_names.get(int(nick), nick), DirectionStats()).add(st)
        for st in getattr(sess, direction).values():
            st.batches = len([r for r in mine if r["status"] == "applied"])

    @staticmethod
    def _done_hi(results: list[dict], dest: str, source: str, batches: list[BatchInfo]) -> int | None:
        status = {r["batch_seq"]: r["status"] for r in results if r["destination"] == dest and r["source"] == source}
        hi = None
        for b in batches:
            if status.get(b.seq) in ("applied", "skipped"):
                hi = b.hi
            else:
                break
        return hi

    def _remote_conflicts(self, ctx: ApplyContext, results: list[dict], subs_open: dict[str, Replica],
                          pub: Replica, pubcfg: PublicationConfig, summary: MergeSummary) -> None:
        import json as _json

        for r in results:
            for c in _json.loads(r.get("conflicts") or "[]"):
                rec = ConflictRecord(ConflictType(c["conflict_type"]), c["tablenick"], c["rowguid"], c["reason_code"],
                                     c["reason_text"], c["origin"], c["winner"], c["losing_row"], c["columns"])
                subscription = r["source"] if ctx.upload else r["destination"]
                target = subs_open.get(subscription) if ctx.upload else pub
                if target is None:
                    continue
                arts = {a["nickname"]: tracked_article(a) for a in published_articles(target, ctx.pubid)}
                with target.transaction():
                    log_conflict(target, ctx.pubid, pubcfg.name, arts[rec.tablenick], rec, subscription, ctx.upload,
                                 ctx.session_id)
        for r in results:
            for c in _json.loads(r.get("conflicts") or "[]"):
                summary.conflicts.append({**c, "subscription": r["source"] if ctx.upload else r["destination"],
                                          "direction": "upload" if ctx.upload else "download"})

    def _history(self, pub: Replica, pubid: str, names: dict[int, str], summary: MergeSummary,
                 sessions: list[SubscriptionSession]) -> None:
        nick_of = {name: nick for nick, name in names.items()}
        session_id, now = summary.session_id, store.utcnow()
        with pub.transaction():
            for s in sessions:
                up, down = s.total("upload"), s.total("download")
                store.insert_row(pub, "MSmerge_sessions", {
                    "session_id": session_id, "subscription": s.subscription, "pubid": pubid, "start_time": summary.started_at,
                    "end_time": now, "duration": s.seconds, "status": "succeeded" if s.ok else "failed",
                    "upload_inserts": up.inserts, "upload_updates": up.updates, "upload_deletes": up.deletes,
                    "upload_conflicts": up.conflicts, "download_inserts": down.inserts,
                    "download_updates": down.updates, "download_deletes": down.deletes,
                    "download_conflicts": down.conflicts, "retries": up.retries + down.retries,
                    "failed": up.failed + down.failed, "message": "; ".join(s.errors) or None})
                for direction in ("upload", "download"):
                    for article, st in getattr(s, direction).items():
                        store.insert_row(pub, "MSmerge_articlehistory", {
                            "session_id": session_id, "subscription": s.subscription,
                            "tablenick": nick_of.get(article, 0), "article": article, "direction": direction,
                            "inserts": st.inserts, "updates": st.updates, "deletes": st.deletes,
                            "conflicts": st.conflicts, "retries": st.retries, "failed": st.failed,
                            "duration": st.seconds})
