"""Snapshot and initialization of transactional subscriptions, consistent with the log position.

1. The new subscriptions are registered at the distributor with the current end of the log, so
   retention keeps every command they will need.
2. A consistent view of the publisher is opened and its position in the command stream recorded
   (the *sync point*): PostgreSQL, an exported snapshot and its ``pg_current_snapshot()`` (the
   transactions it sees), plus the log position once every transaction it did not see had ended;
   SQLite, a backup copy and the last log sequence number in it.
3. Each article (published columns, rows passing the row filter) is written as Parquet by Spark
   (steps 2 and 3: ``snapshot.py``).
4. One Spark task per subscription creates the tables, loads them, creates the procedures (on
   PostgreSQL) and records the starting position, in one transaction at the subscriber.

The distribution agent then delivers, from that position, only what the snapshot does not contain:
a transaction is skipped exactly when the snapshot saw it (its xid is visible in the snapshot, or
its log sequence number is at most the copy's), so writes that continue during the snapshot are
neither missed nor applied twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sparksync import locks, storage
from sparksync.config import PublicationConfig, SubscriptionConfig, Topology
from sparksync.dialects import connect, dialect_for_url
from sparksync.dialects.model import from_table_dict
from sparksync.dialects.replica import Replica, redact_url
from sparksync.errors import SchemaError, SnapshotError
from sparksync.metadata import store
from sparksync.metadata.records import DeliveryMarkRow, DistSubscriptionRow, DistSubscriptionStatus, SubscriptionArticleRow
from sparksync.metadata.schema import TRANSACTIONAL_SUBSCRIBER
from sparksync.names import TableName
from sparksync.ordering import dri_order
from sparksync.progress import Reporter, silent
from sparksync.redaction import redact
from sparksync.snapshot.load import InitResult, check_distinct_tables, initialize_in_parallel, load_parquet, pre_create
from sparksync.snapshot.manifest import publication_dir, remove_stale, verify_files
from sparksync.snapshot.source import Folder
from sparksync.transactional.capture import capture_method
from sparksync.transactional.delivery.calls import procedure_statements
from sparksync.transactional.delivery.subscriber import ArticleTarget, article_targets
from sparksync.transactional.distribution import database as dst
from sparksync.transactional.publish.snapshot import TxArticleSnapshot, write_snapshot
from sparksync.types import SqlType

# -- initialization ----------------------------------------------------------------------------------

@dataclass
class TxSubscriberInit:
    """Everything one initialization task needs (picklable)."""

    subscription: str
    publication: str
    publisher: str
    url: str
    label: str
    pre_creation_cmd: str
    snapshot_dir: str
    articles: list[TxArticleSnapshot]
    targets: dict[int, ArticleTarget]
    start: int


def initialize_subscriber(spec: TxSubscriberInit) -> InitResult:
    """Initialize one subscription; never raises (a failure is ``ok=False`` with the message)."""
    t0 = time.perf_counter()
    try:
        with connect(spec.url, spec.label) as sub:
            rows = _initialize(sub, spec)
        return InitResult(spec.subscription, True, "initialized", rows=rows, seconds=time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - reported per subscription, the others go on
        return InitResult.failed(spec.subscription, e, t0)


def _initialize(sub: Replica, spec: TxSubscriberInit) -> int:
    d = sub.dialect
    names = {a.name: d.destination_table(TableName(a.source_schema, a.source_table)) for a in spec.articles}
    check_distinct_tables(sub.label, names)
    by_source = {str(TableName(a.source_schema, a.source_table)): a.name for a in spec.articles}
    infos, parents = {}, {}
    for a in spec.articles:
        info = from_table_dict(a.table_schema)
        # Foreign keys are not created at a transactional subscriber (SQL Server's default too): a row
        # filter on the parent, or rows applied over several streams, would break them. The order
        # below still loads parents first, for foreign keys the user adds.
        parents[a.name] = [by_source[str(fk.ref_table)] for fk in info.foreign_keys if str(fk.ref_table) in by_source]
        infos[a.name] = info.__class__(names[a.name], info.columns, info.primary_key, (), info.unique_columns)
    by_name = {a.name: a for a in spec.articles}
    ordered = [by_name[n] for n in dri_order(list(by_name), parents)]
    total = 0
    with sub.transaction():
        store.install_table_set(sub, TRANSACTIONAL_SUBSCRIBER)
        kept = pre_create(sub, [(a.name, names[a.name], infos[a.name]) for a in ordered], spec.pre_creation_cmd)
        for a in ordered:
            if a.name not in kept:
                for stmt in d.render_create_table(infos[a.name], None):
                    sub.execute(stmt)
        for a in ordered:
            files = Folder(spec.snapshot_dir)
            what = f"snapshot {files.files.name} of publication {spec.publication}, article {a.name}"
            verify_files(files, a.path, a.files, what)
            loaded = load_parquet(sub, files, a.path, names[a.name], infos[a.name], infos[a.name].primary_key[0])
            loaded.check(a.rows, a.key_digest, what)
            if loaded.refused:
                r = loaded.refused[0]
                raise SnapshotError(f"{what}: row {r['key']}: {r['reason']} (column {r['column']}, value {r['value']}"
                                    f"{f'; and {len(loaded.refused) - 1} more row(s)' if len(loaded.refused) > 1 else ''}"
                                    "); leave such rows out with a row filter, or change them at the publisher",
                                    obj=a.name)
            total += loaded.rows
        install_procedures(sub, spec.targets)
        key = {"publication": spec.publication, "subscription": spec.subscription}
        store.delete(sub, SubscriptionArticleRow, key)
        for a in spec.articles:
            store.insert(sub, SubscriptionArticleRow(publication=spec.publication, subscription=spec.subscription,
                                                     article_id=a.article_id, table_schema=a.table_schema))
        store.delete(sub, DeliveryMarkRow, key)
        store.insert(sub, DeliveryMarkRow(
            publication=spec.publication, subscription=spec.subscription, publisher=spec.publisher,
            stream=0, streams=1, transaction_timestamp=spec.start, time=store.utcnow()))
    return total


def install_procedures(sub: Replica, targets: dict[int, ArticleTarget]) -> None:
    """Create the generated procedures (CALL/SCALL/MCALL/XCALL) and check custom ones exist."""
    d = sub.dialect
    for t in targets.values():
        for op in ("ins", "upd", "del"):
            spec = t.spec(op)
            if not spec.uses_procedure:
                continue
            if spec.generated:
                cols = [(c, _type(x)) for c, x in t.columns]
                for stmt in procedure_statements(d, spec, t.table, cols, t.key):
                    sub.execute(stmt)
                continue
            proc = spec.procedure
            assert proc is not None                # a procedure syntax always names one
            if not (d.procedure_exists(sub, proc.schema, proc.name) if proc.schema
                    else d.procedure_schema(sub, proc.name, d.resolve_name(t.table).schema)):
                where = (f"schema {proc.schema}" if proc.schema else
                         f"the subscriber's search_path or schema {d.resolve_name(t.table).schema}")
                raise SchemaError(f"{sub.label}: article {t.name}: custom procedure {proc} ({spec.syntax} for "
                                  f"{op}) does not exist in {where}; create it first", obj=t.name)


def _type(d: dict):

    return SqlType.from_dict(d)


# -- orchestration (setup) ------------------------------------------------------------------------------

def initialize_subscriptions(spark, topology: Topology, pub: PublicationConfig, publication: dst.Publication,
                             subs: list[SubscriptionConfig], report: Reporter = silent) -> list[InitResult]:
    """Register, snapshot and initialize ``subs`` (subscriptions not active yet)."""
    if not subs:
        return []
    with locks.hold(topology, "setup", [pub.name], report):
        stale = remove_stale(publication_dir(topology.snapshots, pub.name), None)
        if stale:
            report(f"publication {pub.name}: removed {len(stale)} snapshot folder(s) of an interrupted setup")
        return _initialize_all(spark, topology, pub, publication, subs, report)


def _initialize_all(spark, topology: Topology, pub: PublicationConfig, publication: dst.Publication,
                    subs: list[SubscriptionConfig], report: Reporter) -> list[InitResult]:
    with connect(topology.distributor_url, "distributor") as dist, \
            connect(topology.publisher_url, topology.publisher.name) as pubdb:
        here = capture_method(pubdb).log_position(pubdb)
        with dist.transaction():
            for s in subs:
                store.delete(dist, DistSubscriptionRow, {"publication_id": publication.publication_id,
                                                         "subscription": s.name})
                store.insert(dist, DistSubscriptionRow(
                    publication_id=publication.publication_id, subscription=s.name,
                    subscriber=redact_url(topology.subscriber_url(s)),
                    status=DistSubscriptionStatus.INITIALIZING, sync_point=None,
                    delivered_seqno=here if here is not None else (publication.logreader_seqno or 0),
                    last_delivery=None, created_at=store.utcnow(), message=None))
    report(f"publication {pub.name}: snapshot for {len(subs)} subscription(s)")
    snap = write_snapshot(spark, topology, pub, publication, report)
    start = here if here is not None else snap.start
    specs = []
    for s in subs:
        url = topology.subscriber_url(s)
        specs.append(TxSubscriberInit(
            s.name, pub.name, topology.publisher.name, url, s.name, s.pre_creation_cmd, snap.directory,
            snap.articles, article_targets(dialect_for_url(url), publication.articles), start))
    report(f"publication {pub.name}: initializing {len(specs)} subscription(s)")
    results = initialize_in_parallel(spark, specs, initialize_subscriber)
    with connect(topology.distributor_url, "distributor") as dist, dist.transaction():
        for r in results:
            key = {"publication_id": publication.publication_id, "subscription": r.subscription}
            if r.ok:
                store.update(dist, DistSubscriptionRow, {"status": DistSubscriptionStatus.ACTIVE,
                                                         "sync_point": snap.sync_point, "delivered_seqno": start,
                                                         "message": None}, key)
            else:
                store.update(dist, DistSubscriptionRow, {"status": DistSubscriptionStatus.INITIALIZING,
                                                         "message": redact(r.message)}, key)
    storage.Folder(snap.directory).delete("")
    return results
