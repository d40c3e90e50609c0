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
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import failpoints
from ..config import PUBLISHER_PRIORITY, SubscriptionConfig, Topology
from ..dialects import connect
from ..dialects.model import ForeignKey, TableInfo, describe_drift, from_table_dict, table_drift
from ..dialects.replica import Replica, redact_url
from ..errors import ErrorInfo, SchemaDrift, SchemaError, SnapshotError, SparksyncError
from ..merge.generations import ensure_open_generation, next_generation
from ..merge.tracking import TrackedArticle, install_tracking, remove_tracking, tracked_article
from ..metadata import store
from ..names import TableName
from .manifest import ArticleSnapshot, SnapshotManifest, verify_files

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
    login: str | None = None
    partition_id: int | None = None     # filtered publications: the subscription's partition
    # the replica ids the publisher knows: a database whose replica is not one of them belonged to a
    # subscription that was dropped, and is taken over with a fresh identity
    known_replicas: tuple[str, ...] = ()


@dataclass
class InitResult:
    subscription: str
    ok: bool
    message: str = ""
    rows: int = 0
    seconds: float = 0.0
    baseline_generation: int = 0
    snapshot_generation: int | None = None   # the snapshot it was initialized from (when not this one)
    skipped: bool = False
    error: ErrorInfo | None = None           # why it failed (ok False)

    @classmethod
    def failed(cls, subscription: str, e: BaseException, t0: float) -> InitResult:
        """A failed initialization (one subscription's: the others go on), with its error as data."""
        error = ErrorInfo.of(e)
        message = error.message if isinstance(e, SparksyncError) else error.first_line()
        return cls(subscription, False, message, seconds=time.perf_counter() - t0, error=error)


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
                           subs: list[SubscriptionConfig],
                           partitions: dict[str, int] | None = None) -> list[SubscriberInit]:
    """Record the subscriptions at the publisher (status 0) and give each database a replica nickname;
    ``partitions``: each subscription's partition (filtered publications)."""
    partitions = partitions or {}
    specs = []
    with pub.transaction():
        rows = store.select_rows(pub, "sysmergesubscriptions")
        by_label = {r["database_label"]: r for r in rows if r["role"] == SUBSCRIBER_ROLE}
        next_nick = store.next_nickname(pub)
        for s in subs:
            url = topology.resolve_url(s.database)
            label = redact_url(url)
            mine = [r for r in rows if r["pubid"] == manifest.pubid and r["name"] == s.name]
            if mine:
                r = mine[0]
                subid, rid, nick = r["subid"], r["replica_id"], r["replnickname"]
                store.update_rows(pub, "sysmergesubscriptions", {"login": s.login,
                                                                 "partition_id": partitions.get(s.name)},
                                  {"subid": subid})
            else:
                same_db = by_label.get(label)
                if same_db is not None:
                    rid, nick = same_db["replica_id"], same_db["replnickname"]
                else:
                    rid, nick = store.new_guid(), next_nick
                    next_nick += 1
                    store.note_nickname(pub, nick)
                subid = store.new_guid()
                store.insert_row(pub, "sysmergesubscriptions", {
                    "subid": subid, "pubid": manifest.pubid, "name": s.name, "replica_id": rid,
                    "replnickname": nick, "role": SUBSCRIBER_ROLE, "database_label": label,
                    "subscriber_type": s.subscriber_type_code, "subscription_type": 0,
                    "priority": s.effective_priority, "host_name": s.host_name, "sentgen": None, "recgen": None,
                    "status": 0, "last_sync_date": None, "created_at": store.utcnow(), "login": s.login,
                    "partition_id": partitions.get(s.name)})
                by_label[label] = {"replica_id": rid, "replnickname": nick}
            specs.append(SubscriberInit(
                subscription=s.name, publication=s.publication, url=url, label=s.name, subid=subid, replica_id=rid,
                replnickname=nick, priority=s.effective_priority, subscriber_type=s.subscriber_type_code,
                host_name=s.host_name, pre_creation_cmd=s.pre_creation_cmd, publisher_name=topology.publisher.name,
                snapshot_dir=str(snap_dir), login=s.login, partition_id=partitions.get(s.name)))
        known = tuple(sorted({str(r["replica_id"]) for r in store.select_rows(pub, "sysmergesubscriptions")}))
    return [replace(spec, known_replicas=known) for spec in specs]


def check_subscriber_tables(replica: Replica, manifest: SnapshotManifest, held: dict[str, dict] | None = None) -> None:
    """An initialized subscriber's tables must still match the articles (schema drift check);
    ``held``: only these articles (the ones it holds: artid -> table_schema as it has them, after the
    schema changes replayed there)."""
    problems = []
    for a in manifest.articles:
        if held is not None and str(a.artid) not in held:
            continue
        name = destination_name(replica, a)
        info = replica.reflect(name)
        if info is None:
            problems.append(f"table {name} is missing")
            continue
        expected = from_table_dict(held[str(a.artid)] if held is not None else a.table_schema)
        problems += [f"table {name}: {p}" for p in table_drift(expected, info)]
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


@dataclass
class Loaded:
    """What loading one article's snapshot did."""

    rows: int = 0                       # rows inserted
    digest: str = ""                    # KeyDigest of the key column over every row read
    refused: list[dict] = field(default_factory=list)   # rows this database cannot hold (``unstorable``)

    def check(self, expected_rows: int, expected_digest: str | None, what: str) -> None:
        """Every row of the snapshot was read (inserted or refused) and they are the rows it holds."""
        read = self.rows + len(self.refused)
        if read != expected_rows:
            raise SnapshotError(f"{what}: {read} rows were loaded but the snapshot holds {expected_rows}; "
                                "nothing was initialized", obj=what)
        if expected_digest is not None and self.digest != expected_digest:
            raise SnapshotError(f"{what}: the rows loaded are not the rows the snapshot was written with "
                                "(checksum differs); nothing was initialized", obj=what)


def load_parquet(replica: Replica, folder: Path, name: TableName, info: TableInfo,
                 key_column: str | None = None) -> Loaded:
    """Bulk load one article's snapshot (a folder of Parquet files) into its table. Rows holding a value
    this database cannot store exactly (``Dialect.unstorable``: NUL in PostgreSQL text, NaN in SQLite)
    are not loaded but returned, each with its key, column and reason."""
    import pyarrow.dataset as ds

    from ..rows import row_key, summarize_value
    from .manifest import KeyDigest

    loaded = Loaded()
    digest = KeyDigest()
    files = sorted(p for p in folder.glob("*.parquet")) if folder.is_dir() else []
    cols = [c.name for c in info.columns]
    key_at = cols.index(key_column) if key_column in cols else 0
    d = replica.dialect
    checks = [(i, c) for i, c in enumerate(info.columns) if _may_be_unstorable(d, c.type)]

    def rows():
        if not files:
            return
        dataset = ds.dataset([str(f) for f in files], format="parquet")
        for batch in dataset.to_batches(columns=cols, batch_size=10_000):
            columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
            digest.add(columns[key_at])
            suspects = _unstorable_rows(batch, checks, d) if checks else ()
            for r, values in enumerate(zip(*columns)):
                if r in suspects:
                    why = next(((c.name, reason) for (i, c) in checks
                                if (reason := d.unstorable(c.type, values[i]))), None)
                    if why is not None:
                        loaded.refused.append({"key": row_key(cols, info.primary_key, values),
                                               "keyvalue": values[key_at], "column": why[0], "reason": why[1],
                                               "value": summarize_value(values[cols.index(why[0])])})
                        continue
                yield values

    loaded.rows = d.bulk_load(replica, name, cols, [c.type for c in info.columns], rows())
    loaded.digest = digest.hexdigest()
    return loaded


def _may_be_unstorable(d, t) -> bool:
    from ..types import Kind

    return ((not d.capabilities.text_holds_nul and t.kind in (Kind.TEXT, Kind.JSON))
            or (not d.capabilities.float_holds_nan and t.kind in (Kind.REAL, Kind.DOUBLE)))


def _unstorable_rows(batch, checks, d) -> set[int]:
    """Positions of the rows of an Arrow batch that may hold an unstorable value (vectorized scan)."""
    import pyarrow.compute as pc

    from ..types import Kind

    mask = None
    for i, c in checks:
        col = batch.column(i)
        if c.type.kind in (Kind.REAL, Kind.DOUBLE):
            m = pc.is_nan(col)
        else:
            m = pc.match_substring(col, "\x00")
            if c.type.kind is Kind.JSON:
                m = pc.or_(m, pc.match_substring(col, "\\u0000"))
        m = pc.fill_null(m, False)
        mask = m if mask is None else pc.or_(mask, m)
    if mask is None or not pc.any(mask).as_py():
        return set()
    return {i for i, v in enumerate(mask.to_pylist()) if v}


def verify_snapshot(snap_dir: Path, manifest: SnapshotManifest, partition_id: int | None = None) -> None:
    """Before anything is initialized from it: every data file the manifest lists (for a filtered
    article: of the subscriber's partition) is there, unchanged, and no other (a damaged snapshot must
    never initialize a subscriber silently wrong)."""
    where = f"snapshot {manifest.snapshot_id} of publication {manifest.publication}"
    for a in manifest.articles:
        path, _, files, _ = a.data(partition_id)
        verify_files(snap_dir / path, files, f"{where}, article {a.name}"
                     + (f", partition {partition_id}" if a.partitions is not None else ""))
    verify_files(snap_dir / manifest.contents_path, manifest.contents_files, f"{where}, lineage (MSmerge_contents)")


def _load_lineage(replica: Replica, snap_dir: Path, manifest: SnapshotManifest, generation: int,
                  skip: set[str], only: set[int] | None = None) -> int:
    """The rows' lineage (``MSmerge_contents``), checked against the manifest like the rows are (all of
    it is read); the lineage of rows that were refused here (``skip``: rowguids), and of articles not in
    ``only`` (nicknames; None: every article), is left out."""
    import json

    import pyarrow.dataset as ds

    from .manifest import KeyDigest

    folder = snap_dir / manifest.contents_path
    files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
    n, read, digest = 0, 0, KeyDigest()
    if files:
        dataset = ds.dataset([str(f) for f in files], format="parquet")
        for batch in dataset.to_batches(columns=["tablenick", "rowguid", "lineage", "colv"], batch_size=10_000):
            t, g, lin, colv = (batch.column(i).to_pylist() for i in range(4))
            digest.add(g)
            read += len(g)
            rows = [(a, b, generation, json.loads(c), json.loads(e) if e is not None else None)
                    for a, b, c, e in zip(t, g, lin, colv) if str(b) not in skip and (only is None or a in only)]
            store.insert_rows(replica, "MSmerge_contents", ("tablenick", "rowguid", "generation", "lineage", "colv"),
                              rows)
            n += len(rows)
    what = f"snapshot {manifest.snapshot_id} of publication {manifest.publication}, lineage (MSmerge_contents)"
    Loaded(read, digest.hexdigest()).check(manifest.contents_rows, manifest.contents_digest, what)
    return n


def _drop_lineage_of_absent_rows(sub: Replica, table: TableName, a: ArticleSnapshot) -> int:
    """The snapshot's lineage covers every row of the article; a subscriber in one partition keeps
    the lineage of the rows it holds. Returns how many were dropped."""
    d = sub.dialect
    contents = sub.meta("MSmerge_contents")
    cur = sub.execute(f"DELETE FROM {contents} WHERE tablenick = {int(a.nickname)} AND NOT EXISTS (SELECT 1 FROM "
                      f"{d.table_sql(table)} t WHERE t.{d.quote(a.rowguid_column)} = {contents}.rowguid)")
    return max(getattr(cur, "rowcount", 0), 0)


def _record_refused(sub: Replica, refused: dict[int, list[dict]], publisher_nick: int) -> None:
    """Rows of the snapshot this subscriber cannot hold become failed changes from the publisher:
    listed (``conflicts --failed``, ``status``), tried again when they change at the publisher."""
    now = store.utcnow()
    for nick, rows in refused.items():
        for r in rows:
            store.insert_row(sub, "MSmerge_failed_changes", {
                "tablenick": nick, "rowguid": str(r["keyvalue"]), "source_nickname": publisher_nick,
                "conflict_type": 6, "reason": f"initialization: {r['reason']}", "attempts": 1, "first_time": now,
                "last_time": now, "row_key": r["key"], "column_name": r["column"], "value": r["value"]})


def initialize_subscriber(spec: SubscriberInit) -> InitResult:
    """Initialize one subscription. Never raises: a failure comes back as ``ok=False`` with a message."""
    t0 = time.perf_counter()
    try:
        snap_dir = Path(spec.snapshot_dir)
        import json

        manifest = SnapshotManifest.from_dict(json.loads((snap_dir / "manifest.json").read_text(encoding="utf-8")))
        with connect(spec.url, spec.label) as sub:
            if store.metadata_version(sub) is not None:
                done = _already_initialized(sub, spec, manifest)
                if done is not None:
                    done.seconds = time.perf_counter() - t0
                    return done
            verify_snapshot(snap_dir, manifest, spec.partition_id)
            rows, baseline, refused = _initialize(sub, spec, snap_dir, manifest)
            message = "initialized" + (f"; {refused} row(s) it cannot hold are failed changes "
                                       "(sparksync conflicts --failed)" if refused else "")
            return InitResult(spec.subscription, True, message, rows=rows, baseline_generation=baseline,
                              seconds=time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - reported per subscription, others go on
        return InitResult.failed(spec.subscription, e, t0)


def _already_initialized(sub: Replica, spec: SubscriberInit, manifest: SnapshotManifest) -> InitResult | None:
    """A database that already holds replication metadata: the publisher itself or another replica (an
    error naming it), this very subscription initialized by an earlier ``setup`` that was stopped
    before the publisher recorded it (finished now, from what the subscriber committed), or a
    database whose earlier initialization never committed (None: initialize it)."""
    ident = store.replica_identity(sub)
    if ident is not None and ident.role == "publisher":
        raise SchemaError(f"subscription {spec.subscription}: its database is the publisher {ident.name} itself "
                          "(the same database under another address); give the subscription its own database",
                          obj=spec.subscription)
    if (ident is not None and spec.known_replicas and ident.replica_id not in spec.known_replicas
            and ident.replica_id != str(spec.replica_id)):
        _forget_dropped_replica(sub, ident)
        return None
    if ident is not None and (ident.replica_id != str(spec.replica_id) or ident.nickname != spec.replnickname):
        raise SchemaError(f"subscription {spec.subscription}: its database already belongs to replica {ident.name} "
                          f"(nickname {ident.nickname}); give the subscription its own database, or drop that "
                          "replica's metadata first", obj=spec.subscription)
    mine = store.select_rows(sub, "sysmergesubscriptions", {"pubid": manifest.pubid, "name": spec.subscription,
                                                            "role": SUBSCRIBER_ROLE})
    if not mine:
        if store.select_rows(sub, "sysmergepublications", {"pubid": manifest.pubid}):
            raise SchemaError(f"subscription {spec.subscription}: its database holds publication "
                              f"{manifest.publication} for another subscription", obj=spec.subscription)
        return None
    check_subscriber_tables(sub, manifest)
    publisher = store.select_rows(sub, "sysmergesubscriptions", {"pubid": manifest.pubid, "role": "publisher"})
    if str(mine[0]["subid"]) != str(spec.subid) or not publisher:
        raise SchemaError(f"subscription {spec.subscription}: its database was initialized for an earlier "
                          "registration of this subscription; reinitialize it (drop its tables and metadata)",
                          obj=spec.subscription)
    # Committed at the subscriber: the publisher's side is finished with the watermarks it recorded.
    return InitResult(spec.subscription, True, "already initialized", skipped=True,
                      baseline_generation=int(publisher[0]["sentgen"]),
                      snapshot_generation=int(publisher[0]["recgen"]))


def _forget_dropped_replica(sub: Replica, ident) -> None:
    """The database was replica ``ident`` of a subscription the publisher dropped: its tracking and
    merge metadata go (in one transaction), so that it is initialized as a new replica, with a nickname
    of its own (keeping the old one would make it skip the generations the old replica had sent)."""
    from ..metadata.schema import MERGE

    with sub.transaction():
        for a in store.select_rows(sub, "sysmergearticles"):
            remove_tracking(sub, tracked_article(a))
        for table in MERGE.tables:
            if table.name != store.VERSION_TABLE:
                sub.execute(f"DELETE FROM {sub.meta(table.name)}")


def _initialize(sub: Replica, spec: SubscriberInit, snap_dir: Path,
                manifest: SnapshotManifest) -> tuple[int, int, int]:
    arts = sorted(manifest.articles, key=lambda a: a.nickname)
    names = {a.name: destination_name(sub, a) for a in arts}
    check_distinct_tables(sub.label, names)
    with sub.transaction():
        store.install_metadata(sub)
        ident = store.set_replica_identity(sub, nickname=spec.replnickname, name=spec.subscription,
                                           role=SUBSCRIBER_ROLE, replica_id=spec.replica_id)
        baseline = int(sub.scalar(f"SELECT coalesce(max(generation), 0) FROM {sub.meta('MSmerge_genhistory')}") or 0) + 1
        total, refused, infos = _load_articles(sub, snap_dir, manifest, arts, names, baseline, spec.pre_creation_cmd,
                                               spec.partition_id, ident.nickname)
        ensure_open_generation(sub, ident.nickname)
        store.insert_row(sub, "sysmergepublications", {
            "pubid": manifest.pubid, "name": manifest.publication, "kind": "merge", "publisher": manifest.publisher,
            "generation_leveling_threshold": manifest.generation_leveling_threshold, "retention": manifest.retention,
            "snapshot_generation": manifest.snapshot_generation, "snapshot_time": store.utcnow(),
            "snapshot_dir": str(snap_dir), "created_at": store.utcnow(), "schema_version": manifest.schema_version})
        now = store.utcnow()
        store.insert_row(sub, "sysmergesubscriptions", {
            "subid": spec.subid, "pubid": manifest.pubid, "name": spec.subscription, "replica_id": ident.replica_id,
            "replnickname": ident.nickname, "role": SUBSCRIBER_ROLE, "database_label": sub.label,
            "subscriber_type": spec.subscriber_type, "subscription_type": 0, "priority": spec.priority,
            "host_name": spec.host_name, "sentgen": None, "recgen": None, "status": 1, "last_sync_date": None,
            "created_at": now, "login": spec.login, "partition_id": spec.partition_id})
        store.insert_row(sub, "sysmergesubscriptions", {
            "subid": store.new_guid(), "pubid": manifest.pubid, "name": manifest.publisher,
            "replica_id": manifest.publisher_replica_id, "replnickname": manifest.publisher_nickname,
            "role": "publisher", "database_label": manifest.publisher, "subscriber_type": 0, "subscription_type": 0,
            "priority": PUBLISHER_PRIORITY, "host_name": None, "sentgen": baseline,
            "recgen": manifest.snapshot_generation, "status": 1, "last_sync_date": now, "created_at": now})
        _publish_articles(sub, manifest, arts, names, infos, ident.nickname)
        failpoints.hit("init.before_commit", spec.subscription)
    return total, baseline, refused


def _load_articles(sub: Replica, snap_dir: Path, manifest: SnapshotManifest, arts: list[ArticleSnapshot],
                   names: dict[str, TableName], generation: int, pre_creation_cmd: str, partition_id: int | None,
                   nickname: int) -> tuple[int, int, dict[str, TableInfo]]:
    """Inside a transaction at a subscriber: the tables of ``arts`` created (or kept, by
    ``pre_creation_cmd``) and loaded from the snapshot (checked against the manifest), their rows'
    lineage in received ``generation`` (recorded here), rows it cannot hold as failed changes.
    Returns (rows loaded, rows refused, the tables as created)."""
    d = sub.dialect
    infos = {a.name: destination_info(sub, a, names) for a in arts}
    kept = pre_create(sub, [(a.name, names[a.name], infos[a.name]) for a in arts], pre_creation_cmd)
    for a in arts:
        if a.name not in kept:
            for stmt in d.render_create_table(infos[a.name], a.rowguid_column):
                sub.execute(stmt)
        else:
            sub.execute(d.render_rowguid_index(names[a.name], a.rowguid_column))
    where = f"snapshot {manifest.snapshot_id} of publication {manifest.publication}"
    refused: dict[int, list[dict]] = {}
    total = 0
    for a in arts:
        path, rows, _, key_digest = a.data(partition_id)
        loaded = load_parquet(sub, snap_dir / path, names[a.name], infos[a.name], a.rowguid_column)
        loaded.check(rows, key_digest, f"{where}, article {a.name}"
                     + (f", partition {partition_id}" if a.partitions is not None else ""))
        total += loaded.rows
        if loaded.refused:
            refused[a.nickname] = loaded.refused
    skip = {str(r["keyvalue"]) for rows in refused.values() for r in rows}
    n_lineage = _load_lineage(sub, snap_dir, manifest, generation, skip, {a.nickname for a in arts})
    for a in arts:
        if a.partitions is not None:    # a filtered article: only the lineage of the partition's rows
            n_lineage -= _drop_lineage_of_absent_rows(sub, names[a.name], a)
    _record_refused(sub, refused, manifest.publisher_nickname)
    store.insert_row(sub, "MSmerge_genhistory", {
        "generation": generation, "guidsrc": store.new_guid(), "pubid": manifest.pubid, "genstatus": 2, "settled": 1,
        "nicknames": sorted({manifest.publisher_nickname, nickname}), "changecount": n_lineage,
        "coldate": store.utcnow(), "source_nickname": manifest.publisher_nickname,
        "source_generation": manifest.snapshot_generation})
    return total, sum(len(v) for v in refused.values()), infos


def _publish_articles(sub: Replica, manifest: SnapshotManifest, arts: list[ArticleSnapshot],
                      names: dict[str, TableName], infos: dict[str, TableInfo], nickname: int) -> None:
    """The articles recorded at a subscriber (``sysmergearticles``) and their changes tracked."""
    for a in arts:
        store.insert_row(sub, "sysmergearticles", {
            "pubid": manifest.pubid, "artid": a.artid, "name": a.name, "source_schema": names[a.name].schema,
            "source_table": names[a.name].name, "nickname": a.nickname, "column_tracking": int(a.column_tracking),
            "rowguid_column": a.rowguid_column, "rowguid_added": 0, "processing_group": a.processing_group,
            "dri_related": int(a.dri_related), "related_nicknames": a.related_nicknames,
            "table_schema": {**a.table_schema, "schema": names[a.name].schema, "name": names[a.name].name},
            "status": 1})
        install_tracking(sub, TrackedArticle(a.artid, names[a.name], a.nickname, a.rowguid_column,
                                             a.column_tracking, infos[a.name]), nickname)


@dataclass
class ArticleDelivery:
    """Articles added to a publication, for one initialized subscription (picklable)."""

    subscription: str
    url: str
    snapshot_dir: str
    articles: tuple[str, ...]
    pre_creation_cmd: str
    partition_id: int | None = None


def deliver_articles(spec: ArticleDelivery) -> InitResult:
    """A Spark task: the articles of ``spec`` loaded at an initialized subscriber from the snapshot (its
    partition), with their lineage in a received generation and their tracking, in one transaction;
    the rest of the subscriber is untouched. Its watermark from the publisher goes back to the
    snapshot's generation if it was past it (the articles' changes since are sent again, and applied
    once: their lineage says so). Articles it has already are skipped (a setup stopped half-way)."""
    import json

    t0 = time.perf_counter()
    try:
        snap_dir = Path(spec.snapshot_dir)
        manifest = SnapshotManifest.from_dict(json.loads((snap_dir / "manifest.json").read_text(encoding="utf-8")))
        with connect(spec.url, spec.subscription) as sub:
            have = {str(r["artid"]) for r in store.select_rows(sub, "sysmergearticles", {"pubid": manifest.pubid})}
            arts = [a for a in sorted(manifest.articles, key=lambda a: a.nickname)
                    if a.name in spec.articles and str(a.artid) not in have]
            if not arts:
                return InitResult(spec.subscription, True, "articles delivered already", skipped=True,
                                  seconds=time.perf_counter() - t0)
            verify_snapshot(snap_dir, manifest, spec.partition_id)
            ident = store.replica_identity(sub)
            if ident is None:
                raise SchemaError(f"subscription {spec.subscription}: its database has no replica identity; "
                                  "reinitialize it", obj=spec.subscription)
            names = {a.name: destination_name(sub, a) for a in arts}
            with sub.transaction():
                gen = next_generation(sub)
                rows, refused, infos = _load_articles(sub, snap_dir, manifest, arts, names, gen, spec.pre_creation_cmd,
                                                      spec.partition_id, ident.nickname)
                _publish_articles(sub, manifest, arts, names, infos, ident.nickname)
                key = {"pubid": manifest.pubid, "role": "publisher"}
                publisher = store.select_rows(sub, "sysmergesubscriptions", key)
                if publisher and int(publisher[0]["recgen"] or 0) > manifest.snapshot_generation:
                    store.update_rows(sub, "sysmergesubscriptions", {"recgen": manifest.snapshot_generation}, key)
                failpoints.hit("deliver.before_commit", spec.subscription)
        return InitResult(spec.subscription, True, f"new article(s) {', '.join(a.name for a in arts)} delivered"
                          + (f"; {refused} row(s) it cannot hold are failed changes" if refused else ""),
                          rows=rows, seconds=time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - reported per subscription, others go on
        return InitResult.failed(spec.subscription, e, t0)


def finish_registrations(pub: Replica, manifest: SnapshotManifest, specs: list[SubscriberInit],
                         results: list[InitResult]) -> None:
    """Mark initialized subscriptions active at the publisher, with their first watermarks."""
    by_name = {s.subscription: s for s in specs}
    with pub.transaction():
        for r in results:
            if not r.ok:
                continue
            key = {"subid": by_name[r.subscription].subid}
            if r.skipped:
                # initialized by a setup stopped before this step: only a registration still at status 0
                rows = store.select_rows(pub, "sysmergesubscriptions", key)
                if not rows or rows[0]["status"] == 1:
                    continue
            sent = r.snapshot_generation if r.snapshot_generation is not None else manifest.snapshot_generation
            store.update_rows(pub, "sysmergesubscriptions", {
                "status": 1, "sentgen": sent, "recgen": r.baseline_generation,
                "last_sync_date": store.utcnow()}, key)


def initialize_subscriptions(spark, specs: list, task=None) -> list[InitResult]:
    """``task(spec)`` (default: ``initialize_subscriber``) as one Spark task per subscription, in
    parallel; results come back in the order of ``specs``."""
    if not specs:
        return []
    task = task or initialize_subscriber
    results = spark.sparkContext.parallelize(list(enumerate(specs)), len(specs)) \
        .map(lambda item: (item[0], task(item[1]))).collect()
    return [r for _, r in sorted(results, key=lambda x: x[0])]
