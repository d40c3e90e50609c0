"""``setup``: publish, track, snapshot and initialize subscribers, idempotently.

Everything is validated before anything changes: the publisher's articles (existence, primary key,
names, types, drift) and every subscriber database's reachability. Then the publisher is published in
one transaction, a snapshot is written where none exists (or the articles changed), and
subscriptions that are not initialized yet are initialized in parallel Spark tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import Topology
from .dialects import connect
from .errors import ConfigurationError, SchemaDrift, SparksyncError
from .merge.publish import apply_publication, plan_publication
from .metadata import store
from .progress import Reporter, silent
from .snapshot.initialize import (InitResult, check_subscriber_tables, finish_registrations,
                                  initialize_subscriptions, register_subscriptions)
from .snapshot.manifest import current_snapshot
from .snapshot.writer import write_snapshot


@dataclass
class SetupSummary:
    published: dict[str, list[str]] = field(default_factory=dict)      # publication -> new articles
    snapshots: dict[str, str] = field(default_factory=dict)             # publication -> snapshot folder
    initialized: list[InitResult] = field(default_factory=list)

    @property
    def failures(self) -> list[InitResult]:
        return [r for r in self.initialized if not r.ok]


class SetupFailed(SparksyncError):
    code = "setup_failed"


def _check_subscribers_reachable(topology: Topology) -> None:
    problems = []
    for s in topology.subscriptions:
        try:
            connect(topology.resolve_url(s.database), s.name).close()
        except SparksyncError as e:
            problems.append(f"subscription {s.name}: {e.message}")
    if problems:
        raise ConfigurationError("cannot reach every subscriber database; nothing was changed", problems)


def _check_initialized_subscribers(pub, topology: Topology) -> None:
    """Initialized subscribers must still have the articles' tables as published (schema drift)."""
    if store.metadata_version(pub) is None:
        return
    problems = []
    for p in topology.publications:
        rows = store.select_rows(pub, "sysmergepublications", {"name": p.name})
        if not rows:
            continue
        try:
            _, manifest = current_snapshot(topology.snapshot_root, p.name)
        except SparksyncError:
            continue
        active = {r["name"] for r in store.select_rows(pub, "sysmergesubscriptions", {"pubid": rows[0]["pubid"]})
                  if r["status"] == 1 and r["role"] == "subscriber"}
        for s in topology.subscriptions_of(p.name):
            if s.name not in active:
                continue
            with connect(topology.resolve_url(s.database), s.name) as sub:
                try:
                    check_subscriber_tables(sub, manifest)
                except SparksyncError as e:
                    problems.append(f"subscription {s.name}: {e.message}")
    if problems:
        raise SchemaDrift("subscriber schema drift; nothing was changed:\n" + "\n".join(f"  - {x}" for x in problems))


def _upgrade_subscribers(topology: Topology, report: Reporter) -> None:
    """Bring subscribers initialized by an older sparksync to this metadata version."""
    for s in topology.subscriptions:
        with connect(topology.resolve_url(s.database), s.name) as sub:
            if store.upgrade_metadata(sub):
                report(f"subscription {s.name}: replication metadata upgraded to version {store.SCHEMA_VERSION}")


def setup(topology: Topology, spark_factory, report: Reporter = silent) -> SetupSummary:
    """Bring the topology to its configured state. ``spark_factory()`` is called only if Spark is needed."""
    summary = SetupSummary()
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        plans = [plan_publication(pub, p) for p in topology.publications]   # raises before any change
        _check_subscribers_reachable(topology)
        _check_initialized_subscribers(pub, topology)
        with pub.transaction():
            store.install_metadata(pub)
            results = [apply_publication(pub, topology, plan) for plan in plans]
        _upgrade_subscribers(topology, report)
        for plan, res in zip(plans, results):
            summary.published[plan.config.name] = res["created_articles"]
            report(f"publication {plan.config.name}: {len(plan.articles)} article(s) tracked at "
                   f"{topology.publisher.name}" + (f", new: {', '.join(res['created_articles'])}" if res["created_articles"] else ""))
        spark = None
        for plan, res in zip(plans, results):
            name = plan.config.name
            need = bool(res["created_articles"])
            try:
                snap_dir, manifest = current_snapshot(topology.snapshot_root, name)
                if {a.name for a in manifest.articles} != {a.key for a in plan.articles}:
                    need = True
            except SparksyncError:
                need = True
            if need:
                spark = spark or spark_factory()
                snap_dir, manifest = write_snapshot(spark, topology, name, report)
                summary.snapshots[name] = str(snap_dir)
            subs = topology.subscriptions_of(name)
            rows = {r["name"]: r for r in store.select_rows(pub, "sysmergesubscriptions", {"pubid": manifest.pubid})}
            pending = [s for s in subs if rows.get(s.name, {}).get("status") != 1]
            if not pending:
                continue
            specs = register_subscriptions(pub, topology, manifest, snap_dir, pending)
            report(f"publication {name}: initializing {len(specs)} subscription(s) from snapshot {manifest.snapshot_id}")
            spark = spark or spark_factory()
            init = initialize_subscriptions(spark, specs)
            finish_registrations(pub, manifest, specs, init)
            for r in init:
                report(f"subscription {r.subscription}: " + (f"{r.message}, {r.rows} rows in {r.seconds:.1f}s" if r.ok
                                                             else f"FAILED: {r.message}"))
            summary.initialized.extend(init)
    if summary.failures:
        raise SetupFailed("setup finished with failed subscriptions:\n" + "\n".join(
            f"  - {r.subscription}: {r.message}" for r in summary.failures))
    return summary


def snapshot(topology: Topology, spark, publications: list[str] | None = None, report: Reporter = silent) -> dict[str, str]:
    """(Re)write the snapshot of the given publications (default: all)."""
    names = publications or [p.name for p in topology.publications]
    out = {}
    for n in names:
        topology.publication(n)
        snap_dir, _ = write_snapshot(spark, topology, n, report)
        out[n] = str(snap_dir)
    return out
