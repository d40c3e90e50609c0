"""Initializing subscriptions from a snapshot.

The driver registers each subscription at the publisher (replica nickname, status 0). One Spark task
per subscription then, in a single transaction at its subscriber database: installs the metadata,
applies ``pre_creation_cmd`` to existing tables, creates the tables (types mapped for the subscriber's
dialect, primary and foreign keys), bulk loads the snapshot, loads the rows' lineage into a baseline
generation, installs the tracking triggers and records the watermarks. A failure rolls the subscriber
back untouched. The driver finally marks the successful subscriptions active at the publisher.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import PUBLISHER_PRIORITY, SubscriptionConfig, Topology
from ..dialects import connect
from ..dialects.base import ForeignKey, Replica, TableInfo, describe_drift, from_table_dict, redact_url
from ..errors import SchemaDrift, SchemaError, SparksyncError
from ..merge.generations import ensure_open_generation
from ..merge.tracking import TrackedArticle, install_tracking
from ..metadata import store
from ..names import TableName
from .manifest import ArticleSnapshot, SnapshotManifest

SUBSCRIBER_ROLE = "subscriber"


@dataclass
class SubscriberInit:
    """Everything one initialization task needs (picklable)."""

    subscription: str
    publication: str
    url: str
    label: str
    subid: str
    replica_id: str
    replnickname: int
    priority: float
    subscriber_type: int
    host_name: str | None
    pre_creation_cmd: str
    publisher_name: str
    snapshot_dir: str


@dataclass
class InitResult:
    subscription: str
    ok: bool
    message: str = ""
    rows: int = 0
    seconds: float = 0.0
    baseline_generation: int = 0
    skipped: bool = False


def destination_name(replica: Replica, article: ArticleSnapshot) -> TableName:
    """Where an article lives at a subscriber (``Dialect.destination_table``)."""
    return replica.dialect.destination_table(TableName(article.schema, article.table))


def check_distinct_tables(label: str, names: dict[str, TableName]) -> None:
    """Refuse two articles (article name -> destination table) that would be one table here."""
    seen: dict[str, str] = {}
    for article, table in names.items():
        k = str(table).lower()
        if k in seen:
            raise SchemaError(f"{label}: articles {seen[k]} and {article} would both be table {table}")
        seen[k] = article


def destination_info(replica: Replica, article: ArticleSnapshot, names: dict[str, TableName]) -> TableInfo:
    """The article's table as it is created at the subscriber: FKs only to other articles, renamed."""
    info = from_table_dict(article.table_schema)
    fks = []
    for fk in info.foreign_keys:
        target = names.get(str(fk.ref_table))
        if target is not None:
            fks.append(ForeignKey(fk.columns, target, fk.ref_columns, fk.name))
    return replace(info, name=names[article.name], foreign_keys=tuple(fks))


def register_subscriptions(pub: Replica, topology: Topology, manifest: SnapshotManifest, snap_dir: Path,
                           subs: list[SubscriptionConfig]) -> list[SubscriberInit]:
    """Record the subscriptions at the publisher (status 0) and give each database a replica nickname."""
    specs = []
    with pub.transaction():
        rows = store.select_rows(pub, "sysmergesubscriptions")
        by_label = {r["database_label"]: r for r in rows if r["role"] == SUBSCRIBER_ROLE}
        next_nick = max([r["replnickname"] for r in rows] + [1]) + 1
        for s in subs:
            url = topology.resolve_url(s.database)
            label = redact_url(url)
            mine = [r for r in rows if r["pubid"] == manifest.pubid and r["name"] == s.name]
            if mine:
                r = mine[0]
                subid, rid, nick = r["subid"], r["replica_id"], r["replnickname"]
            else:
                same_db = by_label.get(label)
                if same_db is not None:
                    rid, nick = same_db["replica_id"], same_db["replnickname"]
                else:
                    rid, nick = store.new_guid(), next_nick
                    next_nick += 1
                subid = store.new_guid()
                store.insert_row(pub, "sysmergesubscriptions", {
                    "subid": subid, "pubid": manifest.pubid, "name": s.name, "replica_id": rid,
                    "replnickname": nick, "role": SUBSCRIBER_ROLE, "database_label": label,
                    "subscriber_type": s.subscriber_type_code, "subscription_type": 0,
                    "priority": s.effective_priority, "host_name": s.host_name, "sentgen": None, "recgen": None,
                    "status": 0, "last_sync_date": None, "created_at": store.utcnow()})
                by_label[label] = {"replica_id": rid, "replnickname": nick}
            specs.append(SubscriberInit(
                subscription=s.name, publication=s.publication, url=url, label=s.name, subid=subid, replica_id=rid,
                replnickname=nick, priority=s.effective_priority, subscriber_type=s.subscriber_type_code,
                host_name=s.host_name, pre_creation_cmd=s.pre_creation_cmd, publisher_name=topology.publisher.name,
                snapshot_dir=str(snap_dir)))
    return specs


def check_subscriber_tables(replica: Replica, manifest: SnapshotManifest) -> None:
    """An initialized subscriber's tables must still match the articles (schema drift check)."""
    problems = []
    for a in manifest.articles:
        name = destination_name(replica, a)
        info = replica.reflect(name)
        if info is None:
            problems.append(f"table {name} is missing")
            continue
        expected = from_table_dict(a.table_schema)
        missing = [c.name for c in expected.columns if info.column(c.name) is None]
        extra = [c.name for c in info.columns if expected.column(c.name) is None]
        wrong = [c.name for c in expected.columns
                 if info.column(c.name) is not None and not info.column(c.name).type.compatible_with(c.type)]
        for what, cols in (("missing column", missing), ("unexpected column", extra), ("changed type of column", wrong)):
            problems += [f"table {name}: {what} {c}" for c in cols]
    if problems:
        raise SchemaDrift(f"{replica.label}: subscriber tables drifted from publication {manifest.publication}: "
                          + "; ".join(problems), obj=replica.label)


def pre_create(replica: Replica, tables: list[tuple[str, TableName, TableInfo]], cmd: str) -> set[str]:
    """Apply ``pre_creation_cmd`` to the tables that already exist at a subscriber: ``tables`` is
    (article, destination table, expected table) in dependency order. Returns the articles whose table
    is kept (``delete``: emptied, ``none``: as is; it must have the article's columns)."""
    d = replica.dialect
    keep: set[str] = set()
    for article, name, expected in reversed(tables):  # children before parents
        info = replica.reflect(name)
        if info is None:
            continue
        for trg in d.list_merge_triggers(replica, name):
            artid = trg.split("_", 2)[2]
            d.drop_merge_triggers(replica, name, artid)
        if cmd == "drop":
            replica.execute(f"DROP TABLE {d.table_sql(name)}")
        else:
            drift = describe_drift(expected, info)
            if drift:
                raise SchemaError(f"{replica.label}: existing table {name} does not match article {article} "
                                  f"({'; '.join(drift)}); use pre_creation_cmd = \"drop\"", obj=str(name))
            if cmd == "delete":
                replica.execute(f"DELETE FROM {d.table_sql(name)}")
            keep.add(article)
    return keep


def load_parquet(replica: Replica, folder: Path, name: TableName, info: TableInfo) -> int:
    """Bulk load one article's snapshot (a folder of Parquet files) into its table."""
    import pyarrow.dataset as ds

    files = sorted(p for p in folder.glob("*.parquet")) if folder.is_dir() else []
    if not files:
        return 0
    cols = [c.name for c in info.columns]
    dataset = ds.dataset([str(f) for f in files], format="parquet")

    def rows():
        for batch in dataset.to_batches(columns=cols, batch_size=10_000):
            yield from zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns)))

    return replica.dialect.bulk_load(replica, name, cols, [c.type for c in info.columns], rows())


def _load_lineage(replica: Replica, snap_dir: Path, manifest: SnapshotManifest, generation: int) -> int:
    import pyarrow.dataset as ds

    folder = snap_dir / manifest.contents_path
    files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
    if not files:
        return 0
    n = 0
    dataset = ds.dataset([str(f) for f in files], format="parquet")
    import json

    for batch in dataset.to_batches(columns=["tablenick", "rowguid", "lineage", "colv"], batch_size=10_000):
        t, g, lin, colv = (batch.column(i).to_pylist() for i in range(4))
        rows = [(a, b, generation, json.loads(c), json.loads(e) if e is not None else None)
                for a, b, c, e in zip(t, g, lin, colv)]
        store.insert_rows(replica, "MSmerge_contents", ("tablenick", "rowguid", "generation", "lineage", "colv"), rows)
        n += len(rows)
    return n


def initialize_subscriber(spec: SubscriberInit) -> InitResult:
    """Initialize one subscription. Never raises: a failure comes back as ``ok=False`` with a message."""
    t0 = time.perf_counter()
    try:
        snap_dir = Path(spec.snapshot_dir)
        import json

        manifest = SnapshotManifest.from_dict(json.loads((snap_dir / "manifest.json").read_text(encoding="utf-8")))
        with connect(spec.url, spec.label) as sub:
            if store.metadata_version(sub) is not None:
                pubs = store.select_rows(sub, "sysmergepublications", {"pubid": manifest.pubid})
                if pubs:
                    check_subscriber_tables(sub, manifest)
                    return InitResult(spec.subscription, True, "already initialized", skipped=True,
                                      seconds=time.perf_counter() - t0)
            rows = _initialize(sub, spec, snap_dir, manifest)
            return InitResult(spec.subscription, True, "initialized", rows=rows[0], baseline_generation=rows[1],
                              seconds=time.perf_counter() - t0)
    except SparksyncError as e:
        return InitResult(spec.subscription, False, e.message, seconds=time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - reported per subscription, others go on
        return InitResult(spec.subscription, False, f"{type(e).__name__}: {e}", seconds=time.perf_counter() - t0)


def _initialize(sub: Replica, spec: SubscriberInit, snap_dir: Path, manifest: SnapshotManifest) -> tuple[int, int]:
    d = sub.dialect
    arts = sorted(manifest.articles, key=lambda a: a.nickname)
    names = {a.name: destination_name(sub, a) for a in arts}
    check_distinct_tables(sub.label, names)
    total = 0
    with sub.transaction():
        store.install_metadata(sub)
        ident = store.set_replica_identity(sub, nickname=spec.replnickname, name=spec.subscription,
                                           role=SUBSCRIBER_ROLE, replica_id=spec.replica_id)
        infos = {a.name: destination_info(sub, a, names) for a in arts}
        kept = pre_create(sub, [(a.name, names[a.name], infos[a.name]) for a in arts], spec.pre_creation_cmd)
        for a in arts:
            if a.name not in kept:
                for stmt in d.render_create_table(infos[a.name], a.rowguid_column):
                    sub.execute(stmt)
            else:
                sub.execute(d.render_rowguid_index(names[a.name], a.rowguid_column))
        for a in arts:
            total += load_parquet(sub, snap_dir / a.path, names[a.name], infos[a.name])
        baseline = int(sub.scalar(f"SELECT coalesce(max(generation), 0) FROM {sub.meta('MSmerge_genhistory')}") or 0) + 1
        n_lineage = _load_lineage(sub, snap_dir, manifest, baseline)
        store.insert_row(sub, "MSmerge_genhistory", {
            "generation": baseline, "guidsrc": store.new_guid(), "pubid": manifest.pubid, "genstatus": 2, "settled": 1,
            "nicknames": sorted({manifest.publisher_nickname, ident.nickname}), "changecount": n_lineage,
            "coldate": store.utcnow(), "source_nickname": manifest.publisher_nickname,
            "source_generation": manifest.snapshot_generation})
        ensure_open_generation(sub, ident.nickname)
        store.insert_row(sub, "sysmergepublications", {
            "pubid": manifest.pubid, "name": manifest.publication, "kind": "merge", "publisher": manifest.publisher,
            "generation_leveling_threshold": manifest.generation_leveling_threshold, "retention": manifest.retention,
            "snapshot_generation": manifest.snapshot_generation, "snapshot_time": store.utcnow(),
            "snapshot_dir": str(snap_dir), "created_at": store.utcnow()})
        for a in arts:
            store.insert_row(sub, "sysmergearticles", {
                "pubid": manifest.pubid, "artid": a.artid, "name": a.name, "source_schema": names[a.name].schema,
                "source_table": names[a.name].name, "nickname": a.nickname, "column_tracking": int(a.column_tracking),
                "rowguid_column": a.rowguid_column, "rowguid_added": 0, "processing_group": a.processing_group,
                "dri_related": int(a.dri_related), "related_nicknames": a.related_nicknames,
                "table_schema": {**a.table_schema, "schema": names[a.name].schema, "name": names[a.name].name},
                "status": 1})
        now = store.utcnow()
        store.insert_row(sub, "sysmergesubscriptions", {
            "subid": spec.subid, "pubid": manifest.pubid, "name": spec.subscription, "replica_id": ident.replica_id,
            "replnickname": ident.nickname, "role": SUBSCRIBER_ROLE, "database_label": sub.label,
            "subscriber_type": spec.subscriber_type, "subscription_type": 0, "priority": spec.priority,
            "host_name": spec.host_name, "sentgen": None, "recgen": None, "status": 1, "last_sync_date": None,
            "created_at": now})
        store.insert_row(sub, "sysmergesubscriptions", {
            "subid": store.new_guid(), "pubid": manifest.pubid, "name": manifest.publisher,
            "replica_id": manifest.publisher_replica_id, "replnickname": manifest.publisher_nickname,
            "role": "publisher", "database_label": manifest.publisher, "subscriber_type": 0, "subscription_type": 0,
            "priority": PUBLISHER_PRIORITY, "host_name": None, "sentgen": baseline,
            "recgen": manifest.snapshot_generation, "status": 1, "last_sync_date": now, "created_at": now})
        for a in arts:
            install_tracking(sub, TrackedArticle(a.artid, names[a.name], a.nickname, a.rowguid_column,
                                                 a.column_tracking, infos[a.name]), ident.nickname)
    return total, baseline


def finish_registrations(pub: Replica, manifest: SnapshotManifest, specs: list[SubscriberInit],
                         results: list[InitResult]) -> None:
    """Mark initialized subscriptions active at the publisher, with their first watermarks."""
    by_name = {s.subscription: s for s in specs}
    with pub.transaction():
        for r in results:
            if r.ok and not r.skipped:
                store.update_rows(pub, "sysmergesubscriptions", {
                    "status": 1, "sentgen": manifest.snapshot_generation, "recgen": r.baseline_generation,
                    "last_sync_date": store.utcnow()}, {"subid": by_name[r.subscription].subid})


def initialize_subscriptions(spark, specs: list[SubscriberInit]) -> list[InitResult]:
    """One Spark task per subscription, in parallel; results come back in the order of ``specs``."""
    if not specs:
        return []
    results = spark.sparkContext.parallelize(list(enumerate(specs)), len(specs)) \
        .map(lambda item: (item[0], initialize_subscriber(item[1]))).collect()
    return [r for _, r in sorted(results, key=lambda x: x[0])]
