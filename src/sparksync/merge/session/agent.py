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
from dataclasses import replace

from sparksync import failpoints, locks
from sparksync.config import PublicationConfig, SubscriptionConfig, Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ErrorInfo, NotInitialized, ReplicaDamaged, SchemaDrift, SparksyncError
from sparksync.merge.apply.handling import check_handlers
from sparksync.merge.conflicts.model import ConflictRecord, log_conflict
from sparksync.merge.conflicts.resolvers import check_resolvers
from sparksync.merge.maintenance.cleanup import ReplicaCleanup, clean_replica
from sparksync.merge.maintenance.expiration import SubscriptionExpired, expiry
from sparksync.merge.maintenance.integrity import describe, replica_problems
from sparksync.merge.partitions.evaluation import evaluate, evaluated_at_sync
from sparksync.merge.partitions.scheme import PartitionScheme, scheme_of
from sparksync.merge.publish.schema_changes import pending, publisher_drift, schema_version
from sparksync.merge.session.changes import (
    ALL_PARTITIONS,
    CHANGE_SCHEMA,
    REMOVE_GENERATION,
)
from sparksync.merge.session.context import destination, session_context
from sparksync.merge.session.enumeration import (
    KeyCut,
    PartitionRead,
    change_reads,
    keyset_cut,
    min_watermark,
    plan_link,
    removal_reads,
    retry_reads,
)
from sparksync.merge.session.in_driver import ONE_TASK_CHANGES, apply_in_driver, apply_in_one_task, estimated_changes
from sparksync.merge.session.links import (
    DirectionPlan,
    Endpoint,
    Link,
    PublisherSchema,
    article_rules,
)
from sparksync.merge.session.opening import open_subscribers, report_waits
from sparksync.merge.session.plan import (
    ROUTE_TABLE,
    ApplyContext,
    BatchInfo,
    Route,
    route_table,
    routes_by_key,
)
from sparksync.merge.session.stream import RESULT_SCHEMA, BatchResult, apply_stream_empty, make_mapper
from sparksync.merge.session.summary import DirectionStats, MergeOptions, MergeSummary, SubscriptionSession
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import enumeration_bound, make_generation
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow, Role, SubscriptionRow
from sparksync.progress import ProgressListener, Reporter, driver_host, silent
from sparksync.redaction import redact
from sparksync.spark.failures import recover, spark_error_message
from sparksync.spark.lazy import LazySpark
from sparksync.spark.partitioning import group_labels
from sparksync.spark.reads import ReadPlan


class MergeAgent:
    """Runs merge sessions; keeps one Spark session warm across them (``--continuous``).

    ``spark``: a SparkSession, or a function that makes one: then Spark is started only by the first
    direction that moves more than ``[spark] driver_round_changes`` changes, and a run of small rounds
    never starts a JVM (a cold ``sparksync merge`` of a few changes pays no Spark start-up)."""

    def __init__(self, topology: Topology, spark, report: Reporter = silent):
        self.topology = topology
        self._spark = LazySpark(spark)
        self.report = report

    @property
    def spark(self):
        return self._spark.get()

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
            prow = store.select_one(pub, PublicationRow, {"name": pubcfg.name})
            if prow is None:
                raise NotInitialized(f"publication {pubcfg.name} is not published; run 'sparksync setup'")
            try:
                self._session(pub, pubcfg, prow, subs, options, summary)
            except Exception as e:
                self._failed_history(pub, prow.pubid, subs, summary, e)
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

    def _session(self, pub: Replica, pubcfg: PublicationConfig, prow: PublicationRow, subs: list[SubscriptionConfig],
                 options: MergeOptions, summary: MergeSummary) -> None:
        topo = self.topology
        pubid = prow.pubid
        pub_rows = {r.name: r for r in store.select(pub, SubscriptionRow, {"pubid": pubid})}
        sessions: dict[str, SubscriptionSession] = {}
        active = []
        for s in subs:
            sess = sessions[s.name] = SubscriptionSession(s.name, pubcfg.name)
            summary.subscriptions.append(sess)
            r = pub_rows.get(s.name)
            if r is None or not r.active:
                sess.fail(f"subscription {s.name} is not initialized; run 'sparksync setup'",
                          ErrorInfo(NotInitialized.code, "", s.name))
                continue
            expired = expiry(prow.retention, r, store.utcnow())
            if expired is not None:
                sess.fail(expired, ErrorInfo(SubscriptionExpired.code, "", s.name))
                continue
            active.append((s, r))
        if not active:
            return
        check_resolvers(topo, pubcfg)
        check_handlers(topo, pubcfg)
        articles = published_articles(pub, pubid)
        scheme = scheme_of(articles)
        precomputed = prow.precomputed     # else SetupBelongs: evaluated by the reads
        filtered = frozenset(a.nickname for a in articles if scheme.articles[a.name].filtered)
        at_sync = evaluated_at_sync(articles, scheme, precomputed)
        base = session_context(pub, pubid, True, summary.session_id, pubcfg.name,
                               article_rules(pubcfg, pub, articles, str(topo.base_dir)), articles)
        started = {s.name: time.perf_counter() for s, _ in active}
        drift = publisher_drift(pub, articles, pubcfg.name)
        if drift:
            raise SchemaDrift(f"publication {pubcfg.name}: the publisher's table(s) changed since they were published "
                              f"(nothing was merged): {'; '.join(drift)}", obj=pubcfg.name)
        damaged = replica_problems(pub, pubid)
        if damaged:
            raise ReplicaDamaged(f"publication {pubcfg.name}: the publisher {topo.publisher.name} is damaged: "
                                 f"{describe(damaged)}; nothing was merged (run 'sparksync setup' to repair)",
                                 obj=topo.publisher.name)
        schema = PublisherSchema(pubcfg.name, schema_version(pub, pubid), pending(pub, pubid, 0))
        self.report(f"merge {pubcfg.name}: closing generations at {topo.publisher.name} and {len(active)} subscriber(s)")
        report_waits(topo.publisher.name, pub, make_generation(pub, 1), summary, self.report)
        publisher = Endpoint(topo.publisher.name, topo.publisher_url, 1, pub, True)
        ends: dict[str, Endpoint] = {}
        try:
            open_subscribers(topo, active, pubid, summary, schema, ends, sessions, self.report)
            synced = [(s, sessions[s.name]) for s, _ in active if s.name in ends]
            if options.exchange in ("both", "upload") and synced:
                self._direction("upload", [Link(s.name, sess, ends[s.name], publisher, order)
                                           for order, (s, sess) in enumerate(synced)],
                                options, pubcfg, base, summary)
            make_generation(pub, 1)
            partitions = None
            if scheme.filtered and precomputed:
                try:
                    self._evaluate_partitions(pub, pubid, scheme, articles)
                except SparksyncError as e:      # e.g. a row in two non-overlapping partitions: no download
                    for _, sess in synced:
                        sess.fail(f"partition evaluation: {e.message}", e)
                    synced = []
            if scheme.filtered:
                evaluated = store.select(pub, PublicationRow, {"pubid": pubid})[0].partitions_evaluated
                partitions = PartitionRead(
                    tuple(sorted({e.partition_id for e in ends.values() if e.partition_id != ALL_PARTITIONS})),
                    filtered, precomputed, scheme, at_sync, int(evaluated or 0))
            if options.exchange in ("both", "download") and synced:
                self._direction("download", [Link(s.name, sess, publisher, ends[s.name], order)
                                             for order, (s, sess) in enumerate(synced)],
                                options, pubcfg, base, summary, partitions)
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
            role = Role.PUBLISHER if end.is_publisher else Role.SUBSCRIBER
            try:
                result = clean_replica(end.replica, end.name, role, now, {publication})
            except SparksyncError as e:
                result = ReplicaCleanup(end.name, role, error=e.message)
            summary.cleanup.append(result)
            if result.error or result.total:
                self.report(f"cleanup {end.name}: " + (f"FAILED: {result.error}" if result.error else
                                                      ", ".join(f"{n} {t}" for t, n in sorted(result.removed.items()))
                                                      + " removed"))

    def _evaluate_partitions(self, pub: Replica, pubid: str, scheme: PartitionScheme, articles: list[ArticleRow]) -> None:
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
            make_generation(pub, 1)

    # -- one direction ------------------------------------------------------------------------------
    def _direction(self, direction: str, links: list[Link], options: MergeOptions, pubcfg: PublicationConfig,
                   base: ApplyContext, summary: MergeSummary, partitions: PartitionRead | None = None) -> None:
        """Upload (every subscriber to the publisher, one task, configuration order) or download (the
        publisher to every subscriber, in parallel): plan, apply on Spark, then move the senders'
        watermarks and log the conflicts where ``conflict_logging`` wants them."""
        per_batch = (options.upload_generations_per_batch if direction == "upload"
                     else options.download_generations_per_batch)
        limit = (options.driver_round_changes if options.driver_round_changes is not None
                 else self.topology.spark.driver_round_changes)
        plan = self._plan_direction(direction, links, per_batch, pubcfg, base.pubid, partitions, limit)
        ctx = replace(base, upload=direction == "upload", destinations=plan.destinations)
        t0 = time.perf_counter()
        results = self._run_isolated(plan, ctx, direction, limit)
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
                store.update(source.replica, SubscriptionRow, {"sentgen": done, "last_sync_date": store.utcnow()},
                             source.partner_row(base.pubid, link.subscription))
            except SparksyncError as e:   # applied at the destination; sent again next time (idempotent)
                sess.fail(f"{direction}: recording what was sent: {e.message}", e)
        self._remote_conflicts(ctx, results, plan.links, pubcfg, summary)

    def _plan_direction(self, direction: str, links: list[Link], per_batch: int, pubcfg: PublicationConfig,
                        pubid: str, partitions: PartitionRead | None = None, limit: int = 0) -> DirectionPlan:
        """For each link: the common generation (the source's ``sentgen`` toward the destination against
        the destination's ``recgen`` from the source; the lower when they differ), the source's closed
        generations after it that the destination does not already have, cut into batches; changes that
        failed at the destination before, read again. Each source is read once, from the lowest start
        of its links. A link whose planning fails is that subscription's error only."""
        plan = DirectionPlan()
        bounds: dict[str, int] = {}
        lowest: dict[str, int] = {}
        sources: dict[str, Endpoint] = {}
        cuts: dict[str, KeyCut] = {}   # source -> its generations' key cuts
        removals: dict[str, int] = {}         # source -> the lowest start of its filtered destinations
        removed_from: dict[str, Endpoint] = {}   # those sources
        here = {"publisher", "both"} if direction == "upload" else {"subscriber", "both"}
        there = {"subscriber", "both"} if direction == "upload" else {"publisher", "both"}
        for link in links:
            source, dest = link.source, link.dest
            try:
                sent = store.select_one(source.replica, SubscriptionRow, source.partner_row(pubid, link.subscription))
                received = store.select_one(dest.replica, SubscriptionRow, dest.partner_row(pubid, link.subscription))
                start = min_watermark(sent.sentgen if sent is not None else None,
                                      received.recgen if received is not None else None)
                if source.name not in bounds:
                    bounds[source.name] = enumeration_bound(source.replica)
                bound = bounds[source.name]
                retry = retry_reads(dest.replica, dest.name, source.replica, source.url, source.name, pubid,
                                     source.name, source.nickname, start, dest.partition_id, partitions)
                if source.name not in cuts:
                    cuts[source.name] = keyset_cut(source.replica)
                lp = plan_link(source.replica, pubid, source.name, source.nickname, dest.nickname, dest.partition_id,
                               start, bound, per_batch, partitions, retry=bool(retry),
                               threshold=pubcfg.generation_leveling_threshold,
                               cut=cuts[source.name])
                plan.changes += estimated_changes(lp.generations)
            except SparksyncError as e:      # this subscription only: the others still go on
                link.session.fail(f"{direction}: {e.message}", e)
                continue
            gens, batches = lp.generations, lp.batches
            for b in batches:
                b.partition_id = source.partition_id
            plan.reads += retry
            plan.routes += [Route(source.name, g, dest.name, link.order, k) for g, k in lp.where.items()]
            plan.routes += [Route(source.name, r.generation, dest.name, link.order, r.seq, r.after, r.upto)
                            for r in lp.ranges]
            if gens:
                lowest[source.name] = min(start, lowest.get(source.name, start))
                sources[source.name] = source
            if REMOVE_GENERATION in lp.where:      # rows that left its partition are read from this source
                removals[source.name] = min(start, removals.get(source.name, start))
                removed_from[source.name] = source
            link.batches = batches
            plan.links.append(link)
            info = plan.destinations.get(dest.name)
            if info is None:
                info = plan.destinations[dest.name] = destination(
                    dest.name, dest.url, dest.nickname, dest.is_publisher, pubid, pubcfg.conflict_logging in here,
                    pubcfg.conflict_logging in there, dest.partition_id)
            info.batches[source.name] = batches
            self.report(f"{direction} {link.subscription}: generations ({start}, {bound}], {len(gens)} to send in "
                        f"{len(batches)} batch(es)")
        # a direction applied in this process reads each source in one range; on Spark, in a range per core
        parts = 1 if plan.changes <= limit else self.spark.sparkContext.defaultParallelism
        for name, source in (removed_from | sources).items():
            try:
                articles = published_articles(source.replica, pubid)
                if name in sources:
                    plan.reads += change_reads(source.url, name, source.replica, articles, name, source.nickname,
                                                lowest[name], bounds[name], parts, partitions)
                if name in removals and partitions is not None:
                    plan.reads += removal_reads(source.url, name, source.replica, articles, name, source.nickname,
                                                 removals[name], bounds[name], partitions)
            except SparksyncError as e:
                for link in plan.links:
                    if link.source.name == name:
                        link.session.fail(f"{direction}: {e.message}", e)
                plan.links = [x for x in plan.links if x.source.name != name]
                plan.routes = [r for r in plan.routes if r.source != name]
        return plan

    # -- Spark ------------------------------------------------------------------------------------
    def _run_isolated(self, plan: DirectionPlan, ctx: ApplyContext, direction: str,
                      limit: int) -> list[BatchResult] | None:
        """``_run``; if the Spark job itself fails (not one destination or one read: those come back as
        results), every subscription of this direction gets the reason in one line, and no watermark moves."""
        try:
            return self._run(plan, ctx, limit)
        except Exception as e:  # noqa: BLE001 - a failed Spark job is reported per subscription
            error = recover(e) or ErrorInfo(ErrorInfo.INTERNAL, spark_error_message(e) or f"{type(e).__name__}: {e}")
        message = redact(" ".join(error.message.split()))
        for link in plan.links:
            link.session.fail(f"{direction} failed: {message}", error)
        return None

    def _run(self, plan: DirectionPlan, ctx: ApplyContext, limit: int) -> list[BatchResult]:
        """Read the changes once, send each to the apply groups that need it, apply.

        Destinations are dealt to at most as many groups as there are cores (a task costs a Python
        worker); each group is one Spark partition and one task, which applies to its destinations one
        batch at a time. A change is copied once per group, not once per destination."""
        if not plan.reads or not plan.routes:
            return []
        if plan.changes <= limit:
            return self._run_without_exchange(plan, ctx)
        if len({r.destination for r in plan.routes}) == 1 and plan.changes <= ONE_TASK_CHANGES:
            return self._run_without_exchange(plan, ctx, one_task=True)
        spark = self.spark
        from pyspark.sql import functions as F

        partitions = max(1, min(len(plan.destinations), spark.sparkContext.defaultParallelism))
        labels = group_labels(partitions)
        destinations = list(dict.fromkeys(r.destination for r in plan.routes))
        groups = {d: labels[i % partitions] for i, d in enumerate(destinations)}
        routes = routes_by_key(plan.routes)
        routed = spark.createDataFrame(route_table(plan.routes, plan.destinations, groups), ROUTE_TABLE)
        changes = spark.read.format("sparksync").schema(CHANGE_SCHEMA).option(
            "plan", ReadPlan(plan.reads).to_json()).load()
        with ProgressListener(self._progress_line, driver_host(spark)) as listener:
            task_ctx = replace(ctx, routes=routes, groups=groups, progress=listener.address)
            rows = (changes.join(F.broadcast(routed), ["source", "generation", "partition_id"])
                    .repartition(partitions, "apply_group")
                    .sortWithinPartitions("apply_group", "source_order", "generation", "tablenick", "rowguid")
                    .mapInArrow(make_mapper(task_ctx), RESULT_SCHEMA))
            return [BatchResult.from_row(r.asDict(recursive=True)) for r in rows.collect()]

    def _run_without_exchange(self, plan: DirectionPlan, ctx: ApplyContext, one_task: bool = False) -> list[BatchResult]:
        """A small direction (``[spark] driver_round_changes``): the same reads and apply task, in this process
        (``in_driver.py``), one apply group per destination; ``one_task``: a direction with one destination,
        in one Spark task that reads its own changes (no exchange)."""
        groups = {d: i for i, d in enumerate(dict.fromkeys(r.destination for r in plan.routes))}
        routes: dict[tuple[str, int], list[Route]] = {}
        for r in plan.routes:
            routes.setdefault((r.source, r.generation), []).append(r)
        with ProgressListener(self._progress_line, *([driver_host(self.spark)] if one_task else [])) as listener:
            task_ctx = replace(ctx, routes=routes, groups=groups, progress=listener.address)
            if one_task:
                return apply_in_one_task(self.spark, plan.reads, plan.routes, task_ctx, groups)
            return apply_in_driver(plan.reads, plan.routes, task_ctx, groups)

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
                n = st.inserts + st.updates + st.deletes + st.skipped + st.failed + st.removed
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
            sess.notes += r.notes
            for nick, st in r.stats.items():
                article = stats.setdefault(ctx.article_names.get(nick, str(nick)), DirectionStats())
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
                if c.log_remote and link is not None:
                    remote.setdefault((link.source.name, subscription), []).append(c.record)
                summary.conflicts.append({**vars(c.record), "conflict_type": int(c.record.conflict_type),
                                          "subscription": subscription, "direction": "upload" if ctx.upload else "download"})
        sources = {link.source.name: link.source for link in links}
        sessions = {link.subscription: link.session for link in links}
        for (source_name, subscription), recs in remote.items():
            target = sources[source_name].replica
            try:
                arts = {a.nickname: tracked_article(a) for a in published_articles(target, ctx.pubid)}
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
                    "failed": up.failed + down.failed, "message": redact("; ".join(s.errors + s.notes)) or None})
                if s.ok:     # a merge that succeeded, whatever it moved, is what expiration counts from
                    store.update(pub, SubscriptionRow, {"last_sync_date": now},
                                 {"pubid": pubid, "name": s.subscription, "role": Role.SUBSCRIBER})
                for direction in ("upload", "download"):
                    for article, st in getattr(s, direction).items():
                        store.insert_row(pub, "MSmerge_articlehistory", {
                            "session_id": session_id, "subscription": s.subscription,
                            "tablenick": nick_of.get(article, 0), "article": article, "direction": direction,
                            "inserts": st.inserts, "updates": st.updates, "deletes": st.deletes,
                            "conflicts": st.conflicts, "retries": st.retries, "failed": st.failed,
                            "duration": st.seconds, "removed": st.removed})
