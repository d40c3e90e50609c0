"""``setup``: publish, track, snapshot and initialize subscribers, idempotently.

Everything is validated before anything changes: the publisher's articles (existence, primary key,
names, types, drift) and every subscriber database's reachability. Then the publisher is published in
one transaction, a snapshot is written where none exists (or the articles changed), and
subscriptions that are not initialized yet are initialized in parallel Spark tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparksync import failpoints, locks
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, SchemaDrift, SparksyncError
from sparksync.fleet.registry import rows as fleet_rows
from sparksync.merge.apply.handling import check_handlers
from sparksync.merge.conflicts.resolvers import check_resolvers
from sparksync.merge.maintenance.integrity import check_identity, repair_tracking, upgrade_tracking
from sparksync.merge.partitions.evaluation import Partition, ensure_partitions, partition_values
from sparksync.merge.partitions.evaluation import partitions as existing_partitions
from sparksync.merge.publish.publication import apply_publication, plan_publication, remove_articles, scheme_of_plan
from sparksync.merge.snapshot.initialize import (
    ArticleDelivery,
    check_subscriber_tables,
    deliver_articles,
    drop_registration,
    finish_registrations,
    initialize_subscriber,
    register_subscriptions,
)
from sparksync.merge.snapshot.writer import write_snapshot
from sparksync.merge.tracking import capture
from sparksync.merge.tracking.articles import published_articles
from sparksync.metadata import store
from sparksync.metadata.records import (
    ArticleRow,
    DistSubscriptionRow,
    PartitionOptions,
    PublicationRow,
    Role,
    SubscriptionRow,
)
from sparksync.progress import Reporter, silent
from sparksync.snapshot.load import InitResult, initialize_in_parallel
from sparksync.snapshot.manifest import current_snapshot
from sparksync.transactional.delivery.subscriber import article_targets
from sparksync.transactional.distribution import database as dst
from sparksync.transactional.publish.initialize import initialize_subscriptions as init_tx
from sparksync.transactional.publish.initialize import install_procedures
from sparksync.transactional.publish.publication import apply_transactional, plan_transactional


@dataclass
class SetupSummary:
    published: dict[str, list[str]] = field(default_factory=dict)      # publication -> new articles
    snapshots: dict[str, str] = field(default_factory=dict)             # publication -> snapshot folder
    initialized: list[InitResult] = field(default_factory=list)
    caught_up: dict[str, int] = field(default_factory=dict)            # reinit: subscription -> changes since the snapshot

    @property
    def failures(self) -> list[InitResult]:
        return [r for r in self.initialized if not r.ok]


class SetupFailed(SparksyncError):
    code = "setup_failed"


def _check_subscribers_reachable(topology: Topology) -> None:
    problems = []
    for s in topology.direct_subscriptions:
        try:
            connect(topology.subscriber_url(s), s.name).close()
        except SparksyncError as e:
            problems.append(f"subscription {s.name}: {e.message}")
    if problems:
        raise ConfigurationError("cannot reach every subscriber database; nothing was changed", problems)


def check_snapshot_dir(topology: Topology) -> None:
    """Snapshots will be written under ``publisher.snapshot_dir`` (a path or a URL): it must be a folder this
    process can write, found out before anything is published (not after Spark started)."""
    root = topology.snapshots
    try:
        root.check_writable()
    except (OSError, ConfigurationError) as e:      # a folder it cannot write, a URL no file system takes
        why = e.message if isinstance(e, ConfigurationError) else (e.strerror or e)
        raise ConfigurationError(f"publisher.snapshot_dir: cannot write snapshots to {root.describe()} "
                                 f"({why}); nothing was changed", obj=root.describe()) from None


def _check_initialized_subscribers(pub, topology: Topology) -> None:
    """Initialized subscribers must still have the articles' tables as published (schema drift)."""
    if store.metadata_version(pub) is None:
        return
    problems = []
    for p in topology.publications_of_kind("merge"):
        prow = store.select_one(pub, PublicationRow, {"name": p.name})
        if prow is None:
            continue
        try:
            _, manifest = current_snapshot(topology.snapshots, p.name)
        except SparksyncError:
            continue
        active = {r.name for r in store.select(pub, SubscriptionRow, {"pubid": prow.pubid})
                  if r.active and r.role is Role.SUBSCRIBER}
        for s in topology.subscriptions_of(p.name):
            if s.name not in active:
                continue
            with connect(topology.subscriber_url(s), s.name) as sub:
                try:
                    # the articles it holds (one added to the publication is delivered by this setup)
                    check_subscriber_tables(sub, manifest, {r.artid: r.table_schema for r in store.select(
                        sub, ArticleRow, {"pubid": manifest.pubid})})
                except SparksyncError as e:
                    problems.append(f"subscription {s.name}: {e.message} (a lost or replaced database: "
                                    f"'sparksync reinit --subscription {s.name}' re-creates it)")
    if problems:
        raise SchemaDrift("subscriber schema drift; nothing was changed:\n" + "\n".join(f"  - {x}" for x in problems))


def _upgrade_subscribers(topology: Topology, report: Reporter, pub: Replica) -> None:
    """Bring subscribers initialized by an older sparksync to this metadata version (``pub``: the publisher, whose
    articles say which rowguid columns publishing added). The metadata and the change tracking are upgraded in one
    transaction: a setup killed in between leaves the earlier release's state whole, and the next one upgrades it
    (metadata upgraded alone would not be upgraded again)."""
    for s in topology.direct_subscriptions:
        with connect(topology.subscriber_url(s), s.name) as sub:
            with sub.transaction():
                if not store.upgrade_metadata(sub):
                    continue
                added = {r.artid for r in store.select(pub, ArticleRow) if r.rowguid_added} \
                    if store.metadata_version(pub) is not None else set()
                upgraded = upgrade_tracking(sub, added)
            report(f"subscription {s.name}: replication metadata upgraded")
            for what in upgraded:
                report(f"subscription {s.name}: change tracking upgraded: {what}")


def _check_shared_tables(topology: Topology, plans) -> None:
    """A table in several merge publications shares its change tracking (seed 000: the metadata
    tables belong to the database): the publications must agree on how it is tracked, and one
    subscriber database cannot receive it from two of them (each would create it)."""
    seen: dict[str, tuple[str, bool, str]] = {}
    problems = []
    for plan in plans:
        for a in plan.articles:
            mine = (plan.config.name, a.column_tracking, a.rowguid_column)
            other = seen.setdefault(a.key, mine)
            if other[1:] != mine[1:]:
                problems.append(f"table {a.key} is in publications {other[0]} and {mine[0]} with different "
                                "column_tracking or rowguid_column; a table has one change tracking")
    tables = {plan.config.name: {a.key for a in plan.articles} for plan in plans}
    by_db: dict[str, list] = {}
    for sub in topology.direct_subscriptions:
        if sub.publication in tables:
            by_db.setdefault(topology.subscriber_url(sub), []).append(sub)
    for subs in by_db.values():
        for i, a in enumerate(subs):
            for b in subs[i + 1:]:
                shared = sorted(tables[a.publication] & tables[b.publication])
                if shared and a.publication != b.publication:
                    problems.append(f"subscriptions {a.name} and {b.name} share a database but their publications "
                                    f"{a.publication} and {b.publication} both publish {', '.join(shared)}")
    if problems:
        raise ConfigurationError("merge publications disagree about a shared table; nothing was changed", problems)


def _repair_tracking(pub, topology: Topology, report: Reporter) -> None:
    """Re-create tracking triggers dropped, disabled or edited behind sparksync's back, at the
    publisher and at initialized subscribers, and say loudly that what changed meanwhile was not
    recorded (those rows differ until they change again, or the subscription is reinitialized)."""
    if store.metadata_version(pub) is None:
        return
    for p in topology.publications_of_kind("merge"):
        prow = store.select_one(pub, PublicationRow, {"name": p.name})
        if prow is None:
            continue
        pubid = prow.pubid
        for what in repair_tracking(pub, pubid):
            report(f"publication {p.name}: WARNING: tracking of {what} at the publisher was re-created; changes "
                   "made there while it was broken were not recorded")
        active = {r.name: r for r in store.select(pub, SubscriptionRow, {"pubid": pubid})
                  if r.active and r.role is Role.SUBSCRIBER}
        for s in topology.subscriptions_of(p.name):
            if s.name not in active:
                continue
            with connect(topology.subscriber_url(s), s.name) as sub:
                check_identity(sub, s.name, active[s.name])
                for what in repair_tracking(sub, pubid):
                    report(f"subscription {s.name}: WARNING: tracking of {what} was re-created; changes made there "
                           "while it was broken were not recorded")


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
        with locks.hold(topology, "setup", [p.name for p in topology.publications], report), \
                connect(topology.publisher_url, topology.publisher.name) as pub:
            for p in merge_pubs:
                check_resolvers(topology, p)
                check_handlers(topology, p)
            plans = [plan_publication(pub, p) for p in merge_pubs]   # raises before any change
            tx_plans = [plan_transactional(pub, dist, p) for p in tx_pubs]
            _check_subscribers_reachable(topology)
            check_snapshot_dir(topology)
            _check_initialized_subscribers(pub, topology)
            _check_shared_tables(topology, plans)
            values = _partition_values(topology, plans)
            results = []
            partitions: dict[str, dict[str, int]] = {}
            before = store.metadata_version(pub)
            mode = capture.prepare(pub, topology.publisher.change_capture) if plans else "triggers"
            upgraded: list[str] = []
            if plans or before is not None:
                with pub.transaction():
                    store.install_metadata(pub)
                    capture.settle(pub, mode)
                    for i, p in enumerate(merge_pubs):
                        # planned again on the database as the publications before it left it: a table
                        # in two publications is published once (one rowguid, one set of triggers)
                        plans[i] = plan_publication(pub, p) if i else plans[i]
                        results.append(apply_publication(pub, topology, plans[i]))
                        if p.name in values:
                            partitions[p.name] = _make_partitions(pub, results[-1]["pubid"], plans[i],
                                                                  values[p.name], report)
                    if before is not None and before < store.MERGE.version:
                        # in the metadata's transaction: a setup killed before it commits leaves the earlier
                        # release's state whole, and the next one upgrades it
                        upgraded = upgrade_tracking(pub)
            for what in upgraded:
                report(f"publisher {topology.publisher.name}: change tracking upgraded: {what}")
            _upgrade_subscribers(topology, report, pub)
            _repair_tracking(pub, topology, report)
            state = {"spark": None}

            def spark():
                state["spark"] = state["spark"] or spark_factory()
                return state["spark"]

            _setup_merge(topology, pub, plans, results, spark, summary, report, partitions)
            if any(a.rowguid_action == "add" for plan in plans for a in plan.articles):
                # merge publishing added rowguid columns: plan again on the tables as they are now
                tx_plans = [plan_transactional(pub, dist, p) for p in tx_pubs]
            _setup_transactional(topology, pub, dist, tx_plans, spark, summary, report)
    finally:
        if dist is not None:
            dist.close()
    if summary.failures:
        raise SetupFailed("setup finished with failed subscriptions:\n" + "\n".join(
            f"  - {r.subscription}: {r.message}" for r in summary.failures))
    return summary


def _partition_values(topology: Topology, plans) -> dict[str, dict[str | None, dict[str, str | None]]]:
    """For each filtered publication: the parameter values of each subscription (by name) and of each
    configured partition (key None + index), checked before anything changes."""
    out: dict[str, dict] = {}
    problems = []
    for plan in plans:
        scheme = scheme_of_plan(plan)
        if not scheme.filtered:
            if plan.config.partitions:
                problems.append(f"publication {plan.config.name}: partitions are for filtered publications "
                                "(no article has a filter)")
            continue
        mine: dict = {}
        for i, part in enumerate(plan.config.partitions):
            try:
                mine[("partition", i)] = partition_values(scheme, part.host_name, part.login,
                                                          f"publication {plan.config.name}, partitions[{i}]")
            except ConfigurationError as e:
                problems.append(e.message)
        for s in topology.subscriptions_of(plan.config.name) + topology.web_subscriptions_of(plan.config.name):
            try:
                mine[s.name] = partition_values(scheme, s.host_name, s.login, f"subscription {s.name}")
            except ConfigurationError as e:
                problems.append(e.message)
        out[plan.config.name] = mine
    if problems:
        raise ConfigurationError("filtered publications: partitions cannot be made; nothing was changed", problems)
    return out


def _make_partitions(pub, pubid: str, plan, values: dict, report: Reporter) -> dict[str, int]:
    """The publication's partitions (configured, then the subscriptions'), made where missing, inside
    the publishing transaction. Returns each subscription's partition id."""
    scheme = scheme_of_plan(plan)
    articles = published_articles(pub, pubid)
    known = {p.partition_id for p in existing_partitions(pub, pubid)}
    keys = list(values)
    registered = {r.name: r.partition_id for r in store.select(pub, SubscriptionRow, {"pubid": pubid})
                  if r.role is Role.SUBSCRIBER and r.active and r.partition_id is not None}
    by_id = {p.partition_id: p for p in existing_partitions(pub, pubid)}
    moved = [f"subscription {k}: its partition is {by_id[registered[k]].describe()}, the configuration "
             f"now says {Partition(0, v['host_name'], v['login']).describe()}"
             for k, v in values.items() if isinstance(k, str) and k in registered
             and by_id[registered[k]].params != v]
    if moved:
        raise ConfigurationError("an initialized subscription cannot change partition (host_name, login): "
                                 "reinitialize it; nothing was changed", moved)
    shared = []
    for a in plan.articles:
        if a.partition_options != PartitionOptions.NON_OVERLAPPING_SINGLE:
            continue
        # one subscription per partition, as the article sees partitions: by the parameters it reads
        used = sorted(scheme.parameters(a.key))
        groups: dict[tuple, list[str]] = {}
        for k, v in values.items():
            if isinstance(k, str):
                groups.setdefault(tuple(v[p] for p in used), []).append(k)
        shared += [f"article {a.key} (partition_options = 3, one subscription per partition): subscriptions "
                   f"{' and '.join(sorted(names))} are in one partition ("
                   + ", ".join(f"{p} = {v!r}" for p, v in zip(used, key)) + ")"
                   for key, names in groups.items() if len(names) > 1]
    if shared:
        raise ConfigurationError(f"publication {plan.config.name}: partitions shared by subscriptions; nothing was "
                                 "changed", shared)
    made = ensure_partitions(pub, pubid, scheme, articles, [values[k] for k in keys],
                             mappings=plan.config.use_partition_groups)
    fresh = [p for p in dict.fromkeys(made) if p.partition_id not in known]
    if fresh:
        report(f"publication {plan.config.name}: {len(fresh)} partition(s) made: "
               + "; ".join(f"{p.partition_id} ({p.describe()})" for p in fresh[:5]) + (" ..." if len(fresh) > 5 else ""))
    return {k: p.partition_id for k, p in zip(keys, made) if isinstance(k, str)}


def _setup_merge(topology: Topology, pub, plans, results, spark, summary: SetupSummary, report: Reporter,
                 partitions: dict[str, dict[str, int]]) -> None:
    for plan, res in zip(plans, results):
        summary.published[plan.config.name] = res["created_articles"]
        report(f"publication {plan.config.name}: {len(plan.articles)} article(s) tracked at "
               f"{topology.publisher.name}"
               + (f", new: {', '.join(res['created_articles'])}" if res["created_articles"] else ""))
        for line in res.get("schema_changes", []):
            report(f"publication {plan.config.name}: schema change {line}; each subscriber's next merge replays it")
    for plan, res in zip(plans, results):
        _drop_removed_subscriptions(topology, pub, plan.config.name, res["pubid"], report)
    for plan, res in zip(plans, results):
        name = plan.config.name
        subs = topology.subscriptions_of(name)
        web = topology.web_subscriptions_of(name)
        rows = {r.name: r for r in store.select(pub, SubscriptionRow, {"pubid": res["pubid"]})}
        initialized = {name for name, r in rows.items() if r.active}
        need = bool(res["created_articles"])
        try:
            snap_dir, manifest = current_snapshot(topology.snapshots, name)
        except SparksyncError:
            need = True
        else:
            if {a.name for a in manifest.articles} != {a.key for a in plan.articles}:
                need = True
            stale = _stale_snapshot(store.select(pub, PublicationRow, {"pubid": res["pubid"]})[0], manifest)
            if not need and stale and any(s.name not in initialized for s in subs + web):
                report(f"publication {name}: snapshot {manifest.snapshot_id} (generation {manifest.snapshot_generation}) "
                       f"{stale}: writing a new one")
                need = True
        if need:
            snap_dir, manifest = write_snapshot(spark(), topology, name, report)
            summary.snapshots[name] = snap_dir.describe()
        _change_articles_of_subscribers(topology, pub, manifest, snap_dir,
                                        [s for s in subs if s.name in initialized], rows,
                                        spark, summary, report)
        pending = [s for s in subs if s.name not in initialized]
        waiting = [s for s in web if s.name not in initialized]       # devices initialize at their first sync
        if not pending and not waiting:
            continue
        parts = partitions.get(name, {})
        if any(a.partitions is not None and any(str(parts[s.name]) not in a.partitions for s in pending + waiting)
               for a in manifest.articles):
            # a subscription in a partition the current snapshot does not hold: a new snapshot holds them all
            snap_dir, manifest = write_snapshot(spark(), topology, name, report)
            summary.snapshots[name] = snap_dir.describe()
        if waiting:
            register_subscriptions(pub, topology, manifest, snap_dir, waiting, parts)
            report(f"publication {name}: web subscription(s) {', '.join(s.name for s in waiting)} registered; each "
                   "device initializes itself at its first 'sparksync sync'")
        if not pending:
            continue
        specs = register_subscriptions(pub, topology, manifest, snap_dir, pending, parts)
        report(f"publication {name}: initializing {len(specs)} subscription(s) from snapshot {manifest.snapshot_id}")
        init = initialize_in_parallel(spark(), specs, initialize_subscriber)
        failpoints.hit("setup.before_finish", name)
        finish_registrations(pub, manifest, specs, init)
        _report_init(init, report)
        summary.initialized.extend(init)


def _stale_snapshot(prow: PublicationRow, manifest) -> str | None:
    """Why the current snapshot cannot initialize a subscription any more: a metadata cleanup went past
    it (the deletes since are forgotten), or a schema change came after it."""
    cleaned = prow.cleanup_generation
    if cleaned is not None and manifest.snapshot_generation < cleaned:
        return f"is older than the metadata cleanup (generation {cleaned})"
    if manifest.schema_version < (prow.schema_version or 0):
        return f"predates schema change {prow.schema_version}"
    return None


def _drop_removed_subscriptions(topology: Topology, pub, name: str, pubid: str, report: Reporter) -> None:
    """Subscriptions registered at the publisher that the configuration no longer has are dropped
    (SQL Server's sp_dropmergesubscription): their rows at the publisher go, with the failed changes
    of theirs waiting there for a retry. Their databases are left as they are."""
    configured = {s.name for s in topology.subscriptions_of(name) + topology.web_subscriptions_of(name)}
    configured |= {d["subscription"] for d in fleet_rows(pub)}      # enrolled devices: cleanup drops those that end
    gone = [r for r in store.select(pub, SubscriptionRow, {"pubid": pubid, "role": Role.SUBSCRIBER})
            if r.name not in configured]
    if not gone:
        return
    with pub.transaction():
        for r in gone:
            drop_registration(pub, pubid, r)
    report(f"publication {name}: subscription(s) {', '.join(sorted(r.name for r in gone))} no longer configured: "
           "dropped at the publisher (their databases keep their data)")


def _change_articles_of_subscribers(topology: Topology, pub, manifest, snap_dir, active: list,
                                    rows: dict[str, SubscriptionRow], spark,
                                    summary: SetupSummary, report: Reporter) -> None:
    """Initialized subscriptions follow their publication's articles: an article dropped from it is
    dropped there (its triggers and metadata; the table stays); an article added is delivered from the
    snapshot, alone (``deliver_articles``, one Spark task per subscription); nothing else changes."""
    wanted = {str(a.artid) for a in manifest.articles}
    deliveries = []
    for s in active:
        with connect(topology.subscriber_url(s), s.name) as sub:
            have = store.select(sub, ArticleRow, {"pubid": manifest.pubid})
            gone = [r for r in have if r.artid not in wanted]
            if gone:
                with sub.transaction():
                    removed = remove_articles(sub, manifest.pubid, gone)
                report(f"subscription {s.name}: article(s) {', '.join(removed)} dropped (the tables stay)")
            mine = {r.artid for r in have}
            new = tuple(a.name for a in manifest.articles if str(a.artid) not in mine)
            if new:
                deliveries.append(ArticleDelivery(s.name, topology.subscriber_url(s), snap_dir.location, new,
                                                  s.pre_creation_cmd, rows[s.name].partition_id))
    if not deliveries:
        return
    with pub.transaction():        # first the publisher's record, so that it is never ahead of the subscriber's
        for d in deliveries:
            sent = rows[d.subscription].sentgen
            if sent is not None and sent > manifest.snapshot_generation:
                store.update(pub, SubscriptionRow, {"sentgen": manifest.snapshot_generation},
                             {"subid": rows[d.subscription].subid})
    report(f"publication {manifest.publication}: delivering new article(s) to {len(deliveries)} subscription(s) "
           f"from snapshot {manifest.snapshot_id}")
    results = initialize_in_parallel(spark(), deliveries, deliver_articles)
    _report_init(results, report)
    summary.initialized.extend(results)


def _report_init(init, report: Reporter) -> None:
    for r in init:
        report(f"subscription {r.subscription}: " + (f"{r.message}, {r.rows} rows in {r.seconds:.1f}s" if r.ok
                                                     else f"FAILED: {r.message}"))


def _setup_transactional(topology: Topology, pub, dist, plans, spark, summary: SetupSummary, report: Reporter) -> None:
    """Capture at the publisher, the publication at the distributor, new subscriptions snapshotted and
    initialized; active ones get their procedures (re)created (a changed call syntax takes effect)."""

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
                    store.delete(dist, DistSubscriptionRow, {"publication_id": publication.publication_id,
                                                             "subscription": g})
            report(f"publication {name}: subscription(s) {', '.join(gone)} removed from the distributor")
        pending = [s for s in subs if rows.get(s.name) is None or not rows[s.name].active]
        for s in subs:
            if s in pending:
                continue
            url = topology.subscriber_url(s)
            with connect(url, s.name) as sub, sub.transaction():
                install_procedures(sub, article_targets(sub.dialect, publication.articles))
        if pending:
            init = init_tx(spark(), topology, plan.config, publication, pending, report)
            _report_init(init, report)
            summary.initialized.extend(init)


def snapshot(topology: Topology, spark, publications: list[str] | None = None, report: Reporter = silent) -> dict[str, str]:
    """(Re)write the snapshot of the given publications (default: all)."""
    names = publications or [p.name for p in topology.publications]
    check_snapshot_dir(topology)
    out = {}
    for n in names:
        if topology.publication(n).kind == "transactional":
            if publications:
                raise ConfigurationError(f"publication {n} is transactional: its snapshot is taken by 'sparksync "
                                         "setup' when a subscription is initialized (consistent with the log)", obj=n)
            continue
        snap_dir, _ = write_snapshot(spark, topology, n, report)
        out[n] = snap_dir.describe()
    return out
