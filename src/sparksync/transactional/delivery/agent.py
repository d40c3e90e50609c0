"""The distribution agent: delivers each transactional publication's queued commands to its
subscriptions, on Spark.

Per publication: every active subscription's position is read at the subscriber (where it is
written, with the commands); one Spark task per subscription reads its commands after that position,
up to the last stored transaction (fixed when the run is planned, so a re-run task reads the same
rows), from the distribution database, in commit order, and delivers them (``deliver.py``):
subscriptions run in parallel, each in order. A round of at most ``[spark] driver_round_changes``
commands runs the same function in the agent's process instead (no Spark job for a trickle). The
driver then records history, errors and tracer tokens at the distributor and runs retention cleanup.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

from sparksync import locks
from sparksync.config import Topology
from sparksync.dialects import connect, dialect_for_url
from sparksync.errors import ErrorInfo, NotInitialized, SparksyncError
from sparksync.metadata import store
from sparksync.metadata.records import DistSubscriptionStatus
from sparksync.progress import ProgressListener, Reporter, driver_host, silent
from sparksync.redaction import redact
from sparksync.spark.lazy import LazySpark
from sparksync.spark.reads import ReadPartition, ReadPlan, map_partitions, stream_rows
from sparksync.transactional.delivery.deliver import DeliveryContext, SubscriptionTarget
from sparksync.transactional.delivery.results import RESULT_SCHEMA, DeliveryResult
from sparksync.transactional.delivery.subscriber import article_targets, position
from sparksync.transactional.delivery.task import deliver_stream, make_mapper
from sparksync.transactional.distribution import database as dst
from sparksync.types import Kind, SqlType

COMMAND_COLUMNS = [[name, SqlType(kind).to_dict()] for name, kind in (
    ("subscription", Kind.TEXT), ("xact_seqno", Kind.BIGINT), ("command_id", Kind.INTEGER),
    ("article_id", Kind.INTEGER), ("type", Kind.TEXT), ("origin", Kind.BIGINT), ("after", Kind.TEXT),
    ("before", Kind.TEXT), ("rowhash", Kind.BIGINT), ("data", Kind.BYTES), ("shape", Kind.TEXT))]


@dataclass
class DistributeOptions:
    subscriptions: list[str] | None = None
    driver_round_changes: int | None = None     # None: the topology's [spark] driver_round_changes


@dataclass
class SubscriptionRun(DeliveryResult):
    """What one distribution agent pass did for one subscription (the task's result, and more)."""

    publication: str = ""
    pending_before: int | None = None       # transactions waiting when the pass started

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class DistributeSummary:
    run_id: str
    subscriptions: list[SubscriptionRun] = field(default_factory=list)
    cleanup: dict[str, dict] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.subscriptions)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "ok": self.ok, "seconds": round(self.seconds, 3),
                "subscriptions": [{**vars(s), "error": s.error.to_dict() if s.error else None}
                                  for s in self.subscriptions], "cleanup": self.cleanup}


class DistributionAgent:
    """Runs distribution agent passes; keeps one Spark session warm across them (``--continuous``)."""

    def __init__(self, topology: Topology, spark, report: Reporter = silent):
        """``spark``: a SparkSession, or a function making one (called for the first round above
        ``[spark] driver_round_changes`` commands: a small round never starts Spark)."""
        self.topology = topology
        self._spark = LazySpark(spark)
        self.report = report
        self.driver_round_changes = topology.spark.driver_round_changes

    @property
    def spark(self):
        return self._spark.get()

    def run(self, options: DistributeOptions | None = None) -> DistributeSummary:
        options = options or DistributeOptions()
        self.driver_round_changes = (options.driver_round_changes if options.driver_round_changes is not None
                                     else self.topology.spark.driver_round_changes)     # for this run
        t0 = time.perf_counter()
        summary = DistributeSummary(store.new_guid())
        for pub, subs in self.topology.subscriptions_by_publication("transactional", options.subscriptions):
            self._publication(pub.name, subs, summary)
        summary.seconds = time.perf_counter() - t0
        return summary

    # -- one publication -------------------------------------------------------------------------
    def _publication(self, name: str, subs, summary: DistributeSummary) -> None:
        topo = self.topology
        started = store.utcnow()
        with locks.hold(topo, "distribute", [name], self.report), connect(topo.distributor_url, "distributor") as dist:
            dst.require(dist)
            p = dst.require_publication(dist, name)
            try:
                runs = self._deliver(dist, p, subs)
            except Exception as e:     # the pass stopped as a whole (a failed Spark job): each subscription's run
                failed = [SubscriptionRun(s.name, status="error", message=ErrorInfo.of(e).recorded(), publication=name)
                          for s in subs]
                with contextlib.suppress(Exception):
                    self._record(dist, p, failed, started, summary.run_id)
                raise
            summary.subscriptions += runs
            self._record(dist, p, runs, started, summary.run_id)
            d = topo.distributor_config
            c = dst.cleanup(dist, p.publication_id, d.min_distretention, d.max_distretention, d.history_retention)
            summary.cleanup[name] = {"transactions": c.transactions, "commands": c.commands,
                                     "deactivated": c.deactivated}
            if c.transactions:
                self.report(f"distribute {name}: cleanup removed {c.transactions:,} delivered transaction(s)")
            for s in c.deactivated:
                self.report(f"distribute {name}: subscription {s} is inactive (commands it needed expired); "
                            "reinitialize it with 'sparksync setup'")

    def _deliver(self, dist, p: dst.Publication, subs) -> list[SubscriptionRun]:
        topo = self.topology
        rows = {s.subscription: s for s in dst.subscriptions(dist, p.publication_id)}
        bound = dst.bound(dist, p.publication_id)
        runs: dict[str, SubscriptionRun] = {}
        targets: dict[str, SubscriptionTarget] = {}
        starts: dict[str, int] = {}
        for s in subs:
            run = runs[s.name] = SubscriptionRun(s.name, publication=p.name)
            r = rows.get(s.name)
            if r is None or r.status is DistSubscriptionStatus.INITIALIZING:
                run.fail(NotInitialized(f"subscription {s.name} is not initialized; run 'sparksync setup'", obj=s.name))
                continue
            if r.status is DistSubscriptionStatus.INACTIVE:
                run.fail(SparksyncError(f"subscription {s.name}: {r.message}", obj=s.name))
                continue
            url = topo.subscriber_url(s)
            try:
                start = self._position(url, s.name, p.name)
            except SparksyncError as e:
                run.fail(e)
                continue
            run.last_seqno = start
            if bound is None or start >= bound:
                continue
            run.pending_before = dst.pending(dist, p.publication_id, start)
            starts[s.name] = start
            targets[s.name] = SubscriptionTarget(
                s.name, url, s.name, topo.publisher.name, s.subscription_streams, s.commit_batch_size,
                s.commit_batch_threshold, list(s.skip_errors), article_targets(dialect_for_url(url), p.articles),
                r.sync_point, s.subscription_streams_threshold)
            self.report(f"distribute {p.name} -> {s.name}: {run.pending_before:,} transaction(s) after "
                        f"xact_seqno {start}")
        if targets and bound is not None:        # (targets: only when something is pending below bound)
            ctx = DeliveryContext(p.name, p.publication_id, targets, dst.shapes(dist, p.publication_id))
            for res in self._deliver_commands(dist, p, ctx, starts, bound):
                runs[res.subscription].take(res)
        return list(runs.values())

    def _position(self, url: str, subscription: str, publication: str) -> int:
        with connect(url, subscription) as sub:
            at = position(sub, publication, subscription)
        if at is None:
            raise SparksyncError(f"subscription {subscription}: no record of publication {publication} at the "
                                 "subscriber: its database was lost, emptied or replaced; run 'sparksync reinit "
                                 f"--subscription {subscription}'", obj=subscription)
        return at

    def _deliver_commands(self, dist, p: dst.Publication, ctx: DeliveryContext, starts: dict[str, int],
               bound: int) -> list[DeliveryResult]:
        """One task per subscription reads its pending commands, in order, and applies them
        (``map_partitions``: no Data Source planning, the commands never pass through the JVM):
        subscriptions are delivered in parallel, each in commit order. A round of at most
        ``driver_round_changes`` commands runs the same function here, one subscription after another:
        a Spark job's fixed costs are most of a small round's time."""
        sql = dst.commands_query(dist, ordered=True)
        url = self.topology.distributor_url
        order = sorted(starts)
        parts = [ReadPartition(url, sql, [s, p.publication_id, starts[s], dst.LAST_COMMAND, bound, dst.LAST_COMMAND],
                               COMMAND_COLUMNS, None, f"{p.name} -> {s}") for s in order]
        small = dst.pending_commands(dist, p.publication_id, list(starts.values()), bound) <= self.driver_round_changes
        with ProgressListener(self._progress_line, driver_host(self.spark) if not small else "127.0.0.1") as listener:
            ctx.progress = listener.address
            if small:             # one delivery after another: each may use every core
                ctx.processes = os.cpu_count() or 1
                return [DeliveryResult.from_row(r) for part in parts
                        for r in deliver_stream(ctx, stream_rows(part))]
            # each task reads its subscription's commands itself: they never travel through the JVM; the
            # tasks share the cores (a task may use more than one when there are fewer tasks than cores)
            ctx.processes = max(1, self.spark.sparkContext.defaultParallelism // len(parts))
            rows = map_partitions(self.spark, ReadPlan(parts), make_mapper(ctx), RESULT_SCHEMA)
            return [DeliveryResult.from_row(r.asDict(recursive=True)) for r in rows.collect()]

    def _progress_line(self, e: dict) -> None:
        secs = float(e.get("seconds") or 0)
        n = int(e.get("commands") or 0)
        self.report(f"distribute {e['publication']} -> {e['subscription']} batch {e['batch']}: "
                    f"{e['transactions']:,} transaction(s), {n:,} command(s) up to xact_seqno {e['last_seqno']} "
                    f"in {secs:.2f}s" + (f", {n / secs:,.0f} commands/s" if secs >= 0.05 and n else "")
                    + (f" ({e['fallback']} batch(es) retried on one connection)" if e.get("fallback") else ""))

    # -- bookkeeping ------------------------------------------------------------------------------
    def _record(self, dist, p: dst.Publication, runs: list[SubscriptionRun], started, run_id: str) -> None:
        now = store.utcnow()
        with dist.transaction():
            for r in runs:
                store.insert_row(dist, "MSdistribution_history", {
                    "run_id": run_id, "publication_id": p.publication_id, "subscription": r.subscription,
                    "start_time": started, "end_time": now, "transactions": r.transactions, "commands": r.commands,
                    "batches": r.batches, "fallbacks": r.fallbacks, "skipped": r.skipped,
                    "streams": self.topology.subscription(r.subscription).subscription_streams,
                    "last_seqno": r.last_seqno, "seconds": r.seconds, "status": r.status,
                    "message": redact(r.message or "") or None})
                dst.record_errors(dist, p.publication_id, r.subscription, r.errors)
                if r.status == "ok" or r.transactions:      # last_seqno is None when it could not be made durable
                    dst.update_delivered(dist, p.publication_id, r.subscription, r.last_seqno)
                for t in r.tokens:
                    if store.select_rows(dist, "MStracer_tokens", {"tracer_id": t["tracer_id"]}):
                        store.delete_rows(dist, "MStracer_history", {"tracer_id": t["tracer_id"],
                                                                     "subscription": r.subscription})
                        store.insert_row(dist, "MStracer_history", {
                            "tracer_id": t["tracer_id"], "subscription": r.subscription,
                            "subscriber_commit": _ts(t["subscriber_commit"])})


def _ts(text: str):
    import datetime as dt

    return dt.datetime.fromisoformat(text)
