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

from sparksync import failpoints, storage
from sparksync.config import SubscriptionConfig, Topology
from sparksync.dialects import connect
from sparksync.dialects.model import ForeignKey, TableInfo, from_table_dict, table_drift
from sparksync.dialects.replica import Replica, redact_url
from sparksync.errors import SchemaDrift, SchemaError
from sparksync.merge.conflicts.model import ConflictType
from sparksync.merge.tracking import capture, identity, pending
from sparksync.merge.tracking.articles import install_tracking, remove_tracking
from sparksync.merge.tracking.generations import next_generation
from sparksync.merge.tracking.open_generation import ensure_open_generation
from sparksync.merge.tracking.tracked import TrackedArticle, ids_table, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import (
    ArticleRow,
    ArticleStatus,
    FailedChangeRow,
    GenerationRow,
    GenStatus,
    PublicationKind,
    PublicationRow,
    Role,
    SubscriptionRow,
    SubscriptionStatus,
)
from sparksync.metadata.schema import MERGE, WEB
from sparksync.names import TableName
from sparksync.snapshot.load import InitResult, Loaded, check_distinct_tables, load_parquet, pre_create
from sparksync.snapshot.manifest import MANIFEST, ArticleSnapshot, KeyDigest, SnapshotManifest, verify_files
from sparksync.snapshot.source import Folder, SnapshotFiles, parquet_batches, read_text


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
    change_capture: str = "triggers"    # PostgreSQL: the subscriber's changes read from its log or by triggers


def destination_name(replica: Replica, article: ArticleSnapshot) -> TableName:
    """Where an article lives at a subscriber (``Naming.destination_table``)."""
    return replica.dialect.destination_table(TableName(article.schema, article.table))


def destination_info(replica: Replica, article: ArticleSnapshot, names: dict[str, TableName]) -> TableInfo:
    """The article's table as it is created at the subscriber: FKs only to other articles, renamed."""
    info = from_table_dict(article.table_schema)
    fks = []
    for fk in info.foreign_keys:
        target = names.get(str(fk.ref_table))
        if target is not None:
            fks.append(ForeignKey(fk.columns, target, fk.ref_columns, fk.name))
    return replace(info, name=names[article.name], foreign_keys=tuple(fks))


def register_subscriptions(pub: Replica, topology: Topology, manifest: SnapshotManifest, snap_dir: storage.Folder,
                           subs: list[SubscriptionConfig],
                           partitions: dict[str, int] | None = None) -> list[SubscriberInit]:
    """Record the subscriptions at the publisher (status 0) and give each database a replica nickname;
    ``partitions``: each subscription's partition (filtered publications)."""
    partitions = partitions or {}
    specs = []
    with pub.transaction():
        rows = store.select(pub, SubscriptionRow)
        # the replica (id, nickname) of each subscriber database
        by_label = {r.database_label: (r.replica_id, r.replnickname) for r in rows if r.role is Role.SUBSCRIBER}
        next_nick = store.next_nickname(pub)
        for s in subs:
            url = topology.subscriber_url(s) if s.transport == "direct" else ""
            label = redact_url(url) if url else f"web:{s.name}"      # a device's database is not known here
            mine = [r for r in rows if r.pubid == manifest.pubid and r.name == s.name]
            if mine:
                r = mine[0]
                subid, rid, nick = r.subid, r.replica_id, r.replnickname
                store.update(pub, SubscriptionRow, {"login": s.login, "partition_id": partitions.get(s.name)},
                             {"subid": subid})
            else:
                same_db = by_label.get(label)
                if same_db is not None:
                    rid, nick = same_db
                else:
                    rid, nick = store.new_guid(), next_nick
                    next_nick += 1
                    store.note_nickname(pub, nick)
                subid = store.new_guid()
                store.insert(pub, SubscriptionRow.for_subscriber(
                    subid=subid, pubid=manifest.pubid, name=s.name, replica_id=rid, replnickname=nick,
                    database_label=label, subscriber_type=s.subscriber_type_code, priority=s.effective_priority,
                    host_name=s.host_name, login=s.login, partition_id=partitions.get(s.name),
                    status=SubscriptionStatus.CREATED, created_at=store.utcnow()))
                by_label[label] = (rid, nick)
            specs.append(SubscriberInit(
                subscription=s.name, publication=s.publication, url=url, label=s.name, subid=subid, replica_id=rid,
                replnickname=nick, priority=s.effective_priority, subscriber_type=s.subscriber_type_code,
                host_name=s.host_name, pre_creation_cmd=s.pre_creation_cmd, publisher_name=topology.publisher.name,
                snapshot_dir=snap_dir.location, login=s.login, partition_id=partitions.get(s.name),
                change_capture=s.change_capture))
        known = tuple(sorted({r.replica_id for r in store.select(pub, SubscriptionRow)}))
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
        if keyed_here(replica, a, name):     # its rowguid is kept beside it
            info = identity.with_rowguid(info, a.rowguid_column, expected)
        problems += [f"table {name}: {p}" for p in table_drift(expected, info)]
    if problems:
        raise SchemaDrift(f"{replica.label}: subscriber tables drifted from publication {manifest.publication}: "
                          + "; ".join(problems), obj=replica.label)


def verify_snapshot(files: SnapshotFiles, manifest: SnapshotManifest, partition_id: int | None = None) -> None:
    """Before anything is initialized from it: every data file the manifest lists (for a filtered
    article: of the subscriber's partition) is there, unchanged, and no other (a damaged snapshot must
    never initialize a subscriber silently wrong)."""
    where = f"snapshot {manifest.snapshot_id} of publication {manifest.publication}"
    for a in manifest.articles:
        path, _, expected, _ = a.data(partition_id)
        verify_files(files, path, expected, f"{where}, article {a.name}"
                     + (f", partition {partition_id}" if a.partitions is not None else ""))
    verify_files(files, manifest.contents_path, manifest.contents_files, f"{where}, lineage (MSmerge_contents)")


def _load_lineage(replica: Replica, files: SnapshotFiles, manifest: SnapshotManifest, generation: int,
                  skip: set[str], only: set[int] | None = None) -> int:
    """The rows' lineage (``MSmerge_contents``), checked against the manifest like the rows are (all of
    it is read); the lineage of rows that were refused here (``skip``: rowguids), and of articles not in
    ``only`` (nicknames; None: every article), is left out."""
    import json

    n, read, digest = 0, 0, KeyDigest()
    for batch in parquet_batches(files, manifest.contents_path, ["tablenick", "rowguid", "lineage", "colv"]):
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
    art = TrackedArticle(a.artid, table, a.nickname, a.rowguid_column, a.column_tracking,
                         from_table_dict(a.table_schema), keyed_here(sub, a, table))
    cur = sub.execute(f"DELETE FROM {contents} WHERE tablenick = {int(a.nickname)} AND NOT EXISTS (SELECT 1 FROM "
                      f"{identity.guids_sql(d, art)} t WHERE t.{d.quote(a.rowguid_column)} = {contents}.rowguid)")
    return max(getattr(cur, "rowcount", 0), 0)


def _record_refused(sub: Replica, refused: dict[int, list[dict]], publisher_nick: int) -> None:
    """Rows of the snapshot this subscriber cannot hold become failed changes from the publisher:
    listed (``conflicts --failed``, ``status``), tried again when they change at the publisher."""
    now = store.utcnow()
    for nick, rows in refused.items():
        for r in rows:
            store.insert(sub, FailedChangeRow(
                tablenick=nick, rowguid=str(r["keyvalue"]), source_nickname=publisher_nick,
                conflict_type=ConflictType.DOWNLOAD_INSERT_FAILED, reason=f"initialization: {r['reason']}",
                attempts=1, first_time=now, last_time=now, row_key=r["key"], column_name=r["column"], value=r["value"]))


def initialize_subscriber(spec: SubscriberInit, files: SnapshotFiles | None = None) -> InitResult:
    """Initialize one subscription from the snapshot in ``files`` (None: the folder ``spec.snapshot_dir``). Never
    raises: a failure comes back as ``ok=False`` with a message."""
    t0 = time.perf_counter()
    try:
        import json

        files = files if files is not None else Folder(spec.snapshot_dir)
        manifest = SnapshotManifest.from_dict(json.loads(read_text(files, MANIFEST)))
        with connect(spec.url, spec.label) as sub:
            if store.metadata_version(sub) is not None:
                done = _already_initialized(sub, spec, manifest)
                if done is not None:
                    done.seconds = time.perf_counter() - t0
                    return done
            verify_snapshot(files, manifest, spec.partition_id)
            rows, baseline, refused = _initialize(sub, spec, files, manifest)
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
    if ident is not None and ident.role is Role.PUBLISHER:
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
    mine = store.select_one(sub, SubscriptionRow, {"pubid": manifest.pubid, "name": spec.subscription,
                                                   "role": Role.SUBSCRIBER})
    if mine is None:
        if store.select(sub, PublicationRow, {"pubid": manifest.pubid}):
            raise SchemaError(f"subscription {spec.subscription}: its database holds publication "
                              f"{manifest.publication} for another subscription", obj=spec.subscription)
        return None
    check_subscriber_tables(sub, manifest)
    publisher = store.select_one(sub, SubscriptionRow, {"pubid": manifest.pubid, "role": Role.PUBLISHER})
    if mine.subid != str(spec.subid) or publisher is None:
        raise SchemaError(f"subscription {spec.subscription}: its database was initialized for an earlier "
                          "registration of this subscription; reinitialize it (drop its tables and metadata)",
                          obj=spec.subscription)
    # Committed at the subscriber: the publisher's side is finished with the watermarks it recorded.
    return InitResult(spec.subscription, True, "already initialized", skipped=True,
                      baseline_generation=publisher.sentgen or 0, snapshot_generation=publisher.recgen)


def _forget_dropped_replica(sub: Replica, ident) -> None:
    """The database was replica ``ident`` of a subscription the publisher dropped: its tracking and
    merge metadata go (in one transaction), so that it is initialized as a new replica, with a nickname
    of its own (keeping the old one would make it skip the generations the old replica had sent)."""

    with sub.transaction():
        pending.discard(sub)            # its log goes with its metadata: nothing of it is recorded
        for a in store.select(sub, ArticleRow):
            remove_tracking(sub, tracked_article(a))
            identity.drop_rowguids(sub, tracked_article(a))
        for table in MERGE.tables:
            if table.name != store.VERSION_TABLE:
                sub.execute(f"DELETE FROM {sub.meta(table.name)}")


def _initialize(sub: Replica, spec: SubscriberInit, files: SnapshotFiles,
                manifest: SnapshotManifest) -> tuple[int, int, int]:
    arts = sorted(manifest.articles, key=lambda a: a.nickname)
    names = {a.name: destination_name(sub, a) for a in arts}
    check_distinct_tables(sub.label, names)
    mode = capture.prepare(sub, spec.change_capture)
    with sub.transaction():
        store.install_metadata(sub)
        capture.settle(sub, mode)
        pending.flush(sub)
        if sub.dialect.captures_from_log(sub):
            sub.dialect.begin_agent_writes(sub)     # the snapshot's rows are not the subscriber's changes
        ident = store.set_replica_identity(sub, nickname=spec.replnickname, name=spec.subscription,
                                           role=Role.SUBSCRIBER, replica_id=spec.replica_id)
        baseline = int(sub.scalar(f"SELECT coalesce(max(generation), 0) FROM {sub.meta('MSmerge_genhistory')}") or 0) + 1
        total, refused, infos = _load_articles(sub, files, manifest, arts, names, baseline, spec.pre_creation_cmd,
                                               spec.partition_id, ident.nickname)
        ensure_open_generation(sub, ident.nickname)
        store.insert(sub, PublicationRow(
            pubid=manifest.pubid, name=manifest.publication, kind=PublicationKind.MERGE, publisher=manifest.publisher,
            generation_leveling_threshold=manifest.generation_leveling_threshold, retention=manifest.retention,
            snapshot_generation=manifest.snapshot_generation, snapshot_time=store.utcnow(),
            snapshot_dir=spec.snapshot_dir, created_at=store.utcnow(), schema_version=manifest.schema_version))
        now = store.utcnow()
        store.insert(sub, SubscriptionRow.for_subscriber(
            subid=spec.subid, pubid=manifest.pubid, name=spec.subscription, replica_id=ident.replica_id,
            replnickname=ident.nickname, database_label=sub.label, subscriber_type=spec.subscriber_type,
            priority=spec.priority, host_name=spec.host_name, login=spec.login, partition_id=spec.partition_id,
            status=SubscriptionStatus.ACTIVE, created_at=now))
        store.insert(sub, SubscriptionRow.for_publisher(
            subid=store.new_guid(), pubid=manifest.pubid, name=manifest.publisher,
            replica_id=manifest.publisher_replica_id, replnickname=manifest.publisher_nickname,
            database_label=manifest.publisher, sentgen=baseline, recgen=manifest.snapshot_generation,
            last_sync_date=now, created_at=now))
        _publish_articles(sub, manifest, arts, names, infos, ident.nickname)
        failpoints.hit("init.before_commit", spec.subscription)
    return total, baseline, refused


def _load_articles(sub: Replica, files: SnapshotFiles, manifest: SnapshotManifest, arts: list[ArticleSnapshot],
                   names: dict[str, TableName], generation: int, pre_creation_cmd: str, partition_id: int | None,
                   nickname: int) -> tuple[int, int, dict[str, TableInfo]]:
    """Inside a transaction at a subscriber: the tables of ``arts`` created (or kept, by
    ``pre_creation_cmd``) and loaded from the snapshot (checked against the manifest), their rows'
    lineage in received ``generation`` (recorded here), rows it cannot hold as failed changes.
    Returns (rows loaded, rows refused, the tables as created)."""
    d = sub.dialect
    infos = {a.name: destination_info(sub, a, names) for a in arts}
    kept = pre_create(sub, [(a.name, names[a.name], _as_here(sub, a, names[a.name], infos[a.name])) for a in arts],
                      pre_creation_cmd)
    keyed = {a.name: _tracked(a, names, infos) for a in arts if keeps_apart(sub, a)
             and (a.name not in kept or not _has_column(sub, names[a.name], a.rowguid_column))}
    for a in arts:
        if a.name not in kept:
            if a.name in keyed:         # the rowguid beside the table (merge/tracking/identity.py)
                stmts = [*d.render_create_table(keyed[a.name].table_info, None),
                         *identity.ids_ddl(d, keyed[a.name], index=False)]
            else:
                stmts = d.render_create_table(infos[a.name], a.rowguid_column, index=False)
            for stmt in stmts:
                sub.execute(stmt)
        elif a.name in keyed:
            for stmt in identity.ids_ddl(d, keyed[a.name], index=False):
                sub.execute(stmt)
        if a.name in keyed:             # rowguids of rows an earlier replica of this file held: not these
            sub.execute(f"DELETE FROM {sub.meta(keyed[a.name].ids_table)}")
    where = f"snapshot {manifest.snapshot_id} of publication {manifest.publication}"
    refused: dict[int, list[dict]] = {}
    total = 0
    for a in arts:
        path, rows, _, key_digest = a.data(partition_id)
        ids = d.metadata_table_name(keyed[a.name].ids_table) if a.name in keyed else None
        loaded = load_parquet(sub, files, path, names[a.name], infos[a.name], a.rowguid_column, ids)
        loaded.check(rows, key_digest, f"{where}, article {a.name}"
                     + (f", partition {partition_id}" if a.partitions is not None else ""))
        total += loaded.rows
        if loaded.refused:
            refused[a.nickname] = loaded.refused
        # once the rows are in: one sort
        sub.execute(identity.ids_index_ddl(d, keyed[a.name]) if a.name in keyed
                    else d.render_rowguid_index(names[a.name], a.rowguid_column))
    skip = {str(r["keyvalue"]) for rows in refused.values() for r in rows}
    n_lineage = _load_lineage(sub, files, manifest, generation, skip, {a.nickname for a in arts})
    for a in arts:
        if a.partitions is not None:    # a filtered article: only the lineage of the partition's rows
            n_lineage -= _drop_lineage_of_absent_rows(sub, names[a.name], a)
    _record_refused(sub, refused, manifest.publisher_nickname)
    store.insert(sub, GenerationRow(
        generation=generation, guidsrc=store.new_guid(), pubid=manifest.pubid, genstatus=GenStatus.RECEIVED,
        settled=1, nicknames=sorted({manifest.publisher_nickname, nickname}), changecount=n_lineage,
        coldate=store.utcnow(), source_nickname=manifest.publisher_nickname,
        source_generation=manifest.snapshot_generation))
    return total, sum(len(v) for v in refused.values()), infos


def _publish_articles(sub: Replica, manifest: SnapshotManifest, arts: list[ArticleSnapshot],
                      names: dict[str, TableName], infos: dict[str, TableInfo], nickname: int) -> None:
    """The articles recorded at a subscriber (``sysmergearticles``) and their changes tracked."""
    for a in arts:
        store.insert(sub, ArticleRow(
            pubid=manifest.pubid, artid=a.artid, name=a.name, source_schema=names[a.name].schema,
            source_table=names[a.name].name, nickname=a.nickname, column_tracking=int(a.column_tracking),
            rowguid_column=a.rowguid_column, rowguid_added=0, processing_group=a.processing_group,
            dri_related=int(a.dri_related), related_nicknames=a.related_nicknames,
            table_schema={**a.table_schema, "schema": names[a.name].schema, "name": names[a.name].name},
            status=ArticleStatus.ACTIVE, rowguid_keyed=int(keyed_here(sub, a, names[a.name]))))
        install_tracking(sub, replace(_tracked(a, names, infos), keyed=keyed_here(sub, a, names[a.name])), nickname)


def _as_here(sub: Replica, a: ArticleSnapshot, name: TableName, info: TableInfo) -> TableInfo:
    """The table an existing one is checked against (``pre_create``): without the rowguid column where the table
    does not have it and this subscriber keeps it beside the table."""
    here = sub.reflect(name) if keeps_apart(sub, a) else None
    if here is None or here.column(a.rowguid_column) is not None:
        return info
    return replace(info, columns=tuple(c for c in info.columns if c.name != a.rowguid_column),
                   unique_columns=info.unique_columns - {a.rowguid_column})


def _has_column(sub: Replica, name: TableName, column: str) -> bool:
    info = sub.reflect(name)
    return info is not None and info.column(column) is not None


def keeps_apart(sub: Replica, a: ArticleSnapshot) -> bool:
    """Does this subscriber keep the article's rowguid beside its table (``identity.py``)? Where the database does
    and the publisher added the column (a GUID column of the application's own stays a column everywhere)."""
    return sub.dialect.capabilities.keyed_rowguids and a.rowguid_added


def keyed_here(sub: Replica, a: ArticleSnapshot, table: TableName) -> bool:
    """The article's rowguid is kept beside its table here: its identity table exists."""
    return keeps_apart(sub, a) and sub.dialect.metadata_table_exists(sub, ids_table(a.artid))


def _tracked(a: ArticleSnapshot, names: dict[str, TableName], infos: dict[str, TableInfo]) -> TrackedArticle:
    return TrackedArticle(a.artid, names[a.name], a.nickname, a.rowguid_column, a.column_tracking, infos[a.name], True)


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
        files = Folder(spec.snapshot_dir)
        manifest = SnapshotManifest.from_dict(json.loads(read_text(files, MANIFEST)))
        with connect(spec.url, spec.subscription) as sub:
            have = {r.artid for r in store.select(sub, ArticleRow, {"pubid": manifest.pubid})}
            arts = [a for a in sorted(manifest.articles, key=lambda a: a.nickname)
                    if a.name in spec.articles and str(a.artid) not in have]
            if not arts:
                return InitResult(spec.subscription, True, "articles delivered already", skipped=True,
                                  seconds=time.perf_counter() - t0)
            verify_snapshot(files, manifest, spec.partition_id)
            ident = store.replica_identity(sub)
            if ident is None:
                raise SchemaError(f"subscription {spec.subscription}: its database has no replica identity; "
                                  "reinitialize it", obj=spec.subscription)
            names = {a.name: destination_name(sub, a) for a in arts}
            with sub.transaction():
                pending.flush(sub)      # what was changed here is recorded before the new articles' metadata
                gen = next_generation(sub)
                rows, refused, infos = _load_articles(sub, files, manifest, arts, names, gen, spec.pre_creation_cmd,
                                                      spec.partition_id, ident.nickname)
                _publish_articles(sub, manifest, arts, names, infos, ident.nickname)
                key = {"pubid": manifest.pubid, "role": Role.PUBLISHER}
                publisher = store.select_one(sub, SubscriptionRow, key)
                if publisher is not None and (publisher.recgen or 0) > manifest.snapshot_generation:
                    store.update(sub, SubscriptionRow, {"recgen": manifest.snapshot_generation}, key)
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
                row = store.select_one(pub, SubscriptionRow, key)
                if row is None or row.active:
                    continue
            sent = r.snapshot_generation if r.snapshot_generation is not None else manifest.snapshot_generation
            store.update(pub, SubscriptionRow, {
                "status": SubscriptionStatus.ACTIVE, "sentgen": sent, "recgen": r.baseline_generation,
                "last_sync_date": store.utcnow()}, key)


def drop_registration(pub, pubid: str, registered: SubscriptionRow) -> None:
    """A merge subscription's rows at the publisher go (inside a transaction): its registration, and the
    failed changes of its replica waiting there when no other subscription shares that replica. Its
    nickname is never given again (its generations and lineage keep it)."""
    nick = registered.replnickname
    store.note_nickname(pub, nick)
    store.delete(pub, SubscriptionRow, {"pubid": pubid, "name": registered.name})
    if not store.select(pub, SubscriptionRow, {"replnickname": nick}):
        store.delete(pub, FailedChangeRow, {"source_nickname": nick})
    if store.table_set_version(pub, WEB) is not None:      # a web device's uploads and recoveries were of that replica
        for table in ("MSweb_uploads", "MSweb_recoveries"):
            store.delete_rows(pub, table, {"subscription": registered.name})
