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
from .transactional.publish import plan_transactional
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
    for p in topology.publications_of_kind("merge"):
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
                report(f"subscription {s.name}: replication metadata upgraded")


def _connect_distributor(topology: Topology):
    try:
        return connect(topology.distributor_url, "distributor")
    except SparksyncError as e:
        raise ConfigurationError(f"distributor: {e.message}; nothing was changed", obj="distributor") from None


def setup(topology: Topology, spark_factory, report: Reporter = silent) -> SetupSummary:
    """Bring the topology to its configured state. ``spark_factory()`` is called only if Spark is needed."""
    summary = SetupSummary()
    merge_pubs = topology.publications_of_kind("merge")
    tx_pubs = topology.publications_of_kind("transactional")
    dist = _connect_distributor(topology) if tx_pubs else None
    try:
        with connect(topology.publisher_url, topology.publisher.name) as pub:
            plans = [plan_publication(pub, p) for p in merge_pubs]   # raises before any change
            tx_plans = [plan_transactional(pub, dist, p) for p in tx_pubs]
            _check_subscribers_reachable(topology)
            _check_initialized_subscribers(pub, topology)
            if plans or store.metadata_version(pub) is not None:
                with pub.transaction():
                    store.install_metadata(pub)
                    results = [apply_publication(pub, topology, plan) for plan in plans]
            else:
                results = []
            _upgrade_subscribers(topology, report)
            state = {"spark": None}

            def spark():
                state["spark"] = state["spark"] or spark_factory()
                return state["spark"]

            _setup_merge(topology, pub, plans, results, spark, summary, report)
            if plans:   # merge publishing may have added rowguid columns: plan again on the tables as they are
                tx_plans = [plan_transactional(pub, dist, p) for p in tx_pubs]
            _setup_transactional(topology, pub, dist, tx_plans, spark, summary, report)
    finally:
        if dist is not None:
            dist.close()
    if summary.failures:
        raise SetupFailed("setup finished with failed subscriptions:\n" + "\n".join(
            f"  - {r.subscription}: {r.message}" for r in summary.failures))
    return summary


def _setup_merge(topology: Topology, pub, plans, results, spark, summary: SetupSummary, report: Reporter) -> None:
    for plan, res in zip(plans, results):
        summary.published[plan.config.name] = res["created_articles"]
        report(f"publication {plan.config.name}: {len(plan.articles)} article(s) tracked at "
               f"{topology.publisher.name}" + (f", new: {', '.join(res['created_articles'])}" if res["created_articles"] else ""))
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
            snap_dir, manifest = write_snapshot(spark(), topology, name, report)
            summary.snapshots[name] = str(snap_dir)
        subs = topology.subscriptions_of(name)
        rows = {r["name"]: r for r in store.select_rows(pub, "sysmergesubscriptions", {"pubid": manifest.pubid})}
        pending = [s for s in subs if rows.get(s.name, {}).get("status") != 1]
        if not pending:
            continue
        specs = register_subscriptions(pub, topology, manifest, snap_dir, pending)
        report(f"publication {name}: initializing {len(specs)} subscription(s) from snapshot {manifest.snapshot_id}")
        init = initialize_subscriptions(spark(), specs)
        finish_registrations(pub, manifest, specs, init)
        _report_init(init, report)
        summary.initialized.extend(init)


def _report_init(init, report: Reporter) -> None:
    for r in init:
        report(f"subscription {r.subscription}: " + (f"{r.message}, {r.rows} rows in {r.seconds:.1f}s" if r.ok
                                                     else f"FAILED: {r.message}"))


def _setup_transactional(topology: Topology, pub, dist, plans, spark, summary: SetupSummary, report: Reporter) -> None:
    """Capture at the publisher, the publication at the distributor, new subscriptions snapshotted and
    initialized; active ones get their procedures (re)created (a changed call syntax takes effect)."""
    from .transactional import distribution as dst
    from .transactional.initialize import initialize_subscriptions as init_tx, install_procedures
    from .transactional.publish import apply_transactional
    from .transactional.subscriber import article_targets

    for plan in plans:
        name = plan.config.name
        publication = apply_transactional(pub, dist, topology, plan)
        summary.published[name] = [a.key for a in plan.articles]
        how = "logical decoding" if pub.dialect.capabilities.supports_logical_decoding else "capture triggers"
        report(f"publication {name}: {len(plan.articles)} article(s) captured at {topology.publisher.name} by {how}")
        rows = {s.subscription: s for s in dst.subscriptions(dist, publication.publication_id)}
        subs = topology.subscriptions_of(name)
        gone = sorted(set(rows) - {s.name for s in subs})
        if gone:   # no longer configured: retention must not keep commands for them
            with dist.transaction():
                for g in gone:
                    store.delete_rows(dist, "MSsubscriptions", {"publication_id": publication.publication_id,
                                                                "subscription": g})
            report(f"publication {name}: subscription(s) {', '.join(gone)} removed from the distributor")
        pending = [s for s in subs if rows.get(s.name) is None or rows[s.name].status != 1]
        for s in subs:
            if s in pending:
                continue
            url = topology.resolve_url(s.database)
            with connect(url, s.name) as sub, sub.transaction():
                install_procedures(sub, article_targets(sub.dialect, publication.articles))
        if pending:
            init = init_tx(spark(), topology, plan.config, publication, pending, report)
            _report_init(init, report)
            summary.initialized.extend(init)


def snapshot(topology: Topology, spark, publications: list[str] | None = None, report: Reporter = silent) -> dict[str, str]:
    """(Re)write the snapshot of the given publications (default: all)."""
    names = publications or [p.name for p in topology.publications]
    out = {}
    for n in names:
        if topology.publication(n).kind == "transactional":
            if publications:
                raise ConfigurationError(f"publication {n} is transactional: its snapshot is taken by 'sparksync "
                                         "setup' when a subscription is initialized (consistent with the log)", obj=n)
            continue
        snap_dir, _ = write_snapshot(spark, topology, n, report)
        out[n] = str(snap_dir)
    return out
