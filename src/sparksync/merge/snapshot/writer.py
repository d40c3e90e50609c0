"""Writing a publication's snapshot: each article's rows and the rows' lineage, as Parquet, via Spark.

1. Close the publisher's open generation and take the enumeration bound: the snapshot generation.
2. Open a consistent view of the publisher (SQLite: backup copy; PostgreSQL: exported snapshot).
3. Read every article (split by rowguid ranges when large) in Spark tasks that each write their part as
   Parquet files (``snapshot/files.py``: to a path or a URL), one folder per article, plus
   ``metadata/contents`` (lineage) from the same view.
4. Write the manifest, then switch ``CURRENT`` to the new folder and drop older snapshots.

Changes made after step 1 are in generations above the snapshot generation, so the first merge
sends them again; applying them is idempotent (lineage), so nothing is missed or applied twice.
"""

from __future__ import annotations

import contextlib
import datetime as dt

from sparksync import failpoints, locks, storage
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.model import from_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import ErrorInfo, NotInitialized, SchemaDrift
from sparksync.filters import partition_column
from sparksync.merge.partitions.scheme import PartitionScheme, scheme_of
from sparksync.merge.publish.publication import plan_publication
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import enumeration_bound, make_generation
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow
from sparksync.metadata.schema import GUID, INT, JSON
from sparksync.progress import Reporter, Timer, silent
from sparksync.snapshot.files import Written, read_partitions, work_folder, write_parquet
from sparksync.snapshot.manifest import (
    MANIFEST,
    ArticleSnapshot,
    SnapshotManifest,
    current_id,
    new_snapshot_id,
    publication_dir,
    remove_stale,
    write_current,
)
from sparksync.spark.reads import ReadPlan

PARTITION_COLUMN = "sparksync_partition"


def _read_order(d, info, rowguid_column: str) -> tuple[str, str | None]:
    """The column an article is read in the order of, and its placeholder (None: a rowguid's): a one-column primary
    key, so that a subscriber that loads the snapshot appends its rows in key order; else the rowguid."""
    if len(info.primary_key) == 1:
        (column,) = info.key_columns
        return d.quote(column.name), d.typed_param(column.type)
    return d.quote(rowguid_column), None


def _write_partitioned(spark, frozen: Replica, url: str, sid: str | None, scheme: PartitionScheme, a: ArticleRow, info,
                       pubid: str, sdir: storage.Folder, rel: str, what: str, report: Reporter) -> dict[str, dict]:
    """A filtered article: its rows of every partition of the publication, read in one pass (the filters
    evaluated for every partition at once), written by one Spark job into one folder per partition
    (``sparksync_partition=<id>``). Returns the manifest's ``partitions``."""
    d = frozen.dialect
    groups = d.metadata_table_sql("MSmerge_partition_groups")
    params = {k: partition_column("pg", k) for k in ("host_name", "login")}
    joined = scheme.with_partitions(d, a.name, "m", groups, "pg", params)
    table_sql = f"{identity.rows_sql(d, tracked_article(a))} AS m {joined.joins}"
    where, args = f" WHERE pg.pubid = {d.uuid_param()} AND m.{d.quote(a.rowguid_column)} IS NOT NULL", (pubid,)
    counts = {int(p): int(n) for p, n in frozen.query(
        f"SELECT pg.partition_id, count(DISTINCT m.{d.quote(a.rowguid_column)}) FROM {table_sql}{where} "
        "GROUP BY pg.partition_id", list(args))}
    ids = [int(r[0]) for r in frozen.query(f"SELECT partition_id FROM {groups} WHERE pubid = {d.uuid_param()}",
                                           [pubid])]
    cols = [[c.name, c.type.to_dict()] for c in info.columns] + [[PARTITION_COLUMN, INT.to_dict()]]
    select = ("SELECT " + ("" if joined.unique else "DISTINCT ") + ", ".join(f"m.{d.quote(c.name)}" for c in info.columns)
              + ", pg.partition_id")
    order_col, order_param = _read_order(d, info, a.rowguid_column)
    parts, total = read_partitions(frozen, url, sid, table_sql, select, f"m.{order_col}", cols, what, where, args,
                                   order_param=order_param, key=list(info.primary_key))
    report(f"{what}: {total} row(s) in {len(ids)} partition(s)")
    written = write_parquet(spark, ReadPlan(parts), sdir.child(rel), a.rowguid_column, PARTITION_COLUMN) if total \
        else {}
    out = {}
    for pid in ids:
        sub = f"{PARTITION_COLUMN}={pid}"
        files, digest = written.get(sub, Written()).seal(counts.get(pid, 0), f"{what}, partition {pid}")
        out[str(pid)] = {"path": f"{rel}/{sub}", "rows": counts.get(pid, 0), "files": files, "key_digest": digest}
    return out


def write_snapshot(spark, topology: Topology, publication: str,
                   report: Reporter = silent) -> tuple[storage.Folder, SnapshotManifest]:
    """Write a new snapshot of ``publication`` and make it the current one."""
    pubcfg = topology.publication(publication)
    timer = Timer()
    root = topology.snapshots
    with locks.hold(topology, "snapshot", [publication], report), \
            connect(topology.publisher_url, topology.publisher.name) as pub:
        store.require_metadata(pub)
        prow = store.select_one(pub, PublicationRow, {"name": publication})
        if prow is None:
            raise NotInitialized(f"publication {publication} is not published yet; run 'sparksync setup'", obj=publication)
        started = store.utcnow()
        try:
            changed = [a for a in plan_publication(pub, pubcfg).articles if a.schema_changes]  # refuses other drift
            if changed:
                raise SchemaDrift(f"publication {publication}: the table(s) of article(s) "
                                  f"{', '.join(a.key for a in changed)} changed since they were published; run "
                                  "'sparksync setup' first (it replicates the schema change)", obj=publication)
            ident = store.replica_identity(pub)
            articles = published_articles(pub, prow.pubid)
            out = _write(spark, topology, pub, publication, prow, ident, articles, root, report, timer)
        except Exception as e:
            _history(pub, prow.pubid, started, None, e)
            raise
        _history(pub, prow.pubid, started, out[1])
        return out


def _history(pub: Replica, pubid: str, started: dt.datetime, manifest: SnapshotManifest | None,
             error: Exception | None = None) -> None:
    """One MSsnapshot_history row: the snapshot written, or why the run failed (``status`` shows it).
    A failed run's row is best effort: the error itself is what the caller sees."""
    message = ErrorInfo.of(error).recorded() if error is not None else None
    now = store.utcnow()
    row = {"run_id": store.new_guid(), "pubid": pubid, "start_time": started, "end_time": now,
           "status": "failed" if error is not None else "succeeded",
           "snapshot_id": manifest.snapshot_id if manifest else None,
           "generation": manifest.snapshot_generation if manifest else None,
           "seconds": (now - started).total_seconds(), "message": message}
    with contextlib.suppress(Exception) if error is not None else contextlib.nullcontext(), pub.transaction():
        store.insert_row(pub, "MSsnapshot_history", row)


def _write(spark, topology: Topology, pub: Replica, publication: str, prow: PublicationRow, ident,
           articles: list[ArticleRow], root: storage.Folder, report: Reporter,
           timer: Timer) -> tuple[storage.Folder, SnapshotManifest]:
    """Write the snapshot (the caller holds the publication's merge agent lock)."""
    pdir = publication_dir(root, publication)
    stale = remove_stale(pdir, current_id(root, publication))
    if stale:
        report(f"snapshot {publication}: removed {len(stale)} incomplete snapshot folder(s) of an interrupted run")
    report(f"snapshot {publication}: closing generations at {topology.publisher.name}")
    make_generation(pub, ident.nickname)
    snap_gen = enumeration_bound(pub)
    snapshot_id = new_snapshot_id()
    sdir = pdir.child(snapshot_id)
    manifest = SnapshotManifest(
        publication=publication, pubid=prow.pubid, snapshot_id=snapshot_id,
        created_at=dt.datetime.now(dt.UTC).isoformat(), publisher=topology.publisher.name,
        publisher_nickname=ident.nickname, publisher_replica_id=ident.replica_id, snapshot_generation=snap_gen,
        generation_leveling_threshold=prow.generation_leveling_threshold, retention=prow.retention,
        schema_version=prow.schema_version or 0)
    scheme = scheme_of(articles)
    try:
        with work_folder(pdir) as work, pub.dialect.consistent_reads(pub, work) as (url, sid, frozen):
            # A moment just after the flush above. What applications changed since is in its log, not in
            # its metadata: flushed at the publisher into a generation above snap_gen, delivered then (a
            # row inserted since without a rowguid, on SQLite, is left out of the snapshot for that).
            frozen.tracking_flushed = True
            d = pub.dialect
            for a in articles:
                info = from_table_dict(a.table_schema)
                cols = [[c.name, c.type.to_dict()] for c in info.columns]
                select = "SELECT " + ", ".join(d.quote(c.name) for c in info.columns)
                label = f"{publication}/{a.name}"
                rel = f"articles/{a.nickname}_{info.name.slug}"
                partitioned = None
                files: list[dict] = []
                digest: str | None = None
                if scheme.articles[a.name].filtered:
                    partitioned = _write_partitioned(spark, frozen, url, sid, scheme, a, info, prow.pubid, sdir, rel,
                                                     f"snapshot {publication}/{a.name}", report)
                    total = 0
                else:
                    order_col, order_param = _read_order(d, info, a.rowguid_column)
                    parts, total = read_partitions(frozen, url, sid, identity.rows_sql(d, tracked_article(a)), select,
                                                   order_col, cols,
                                                   label, f" WHERE {d.quote(a.rowguid_column)} IS NOT NULL",
                                                   order_param=order_param, key=list(info.primary_key))
                    report(f"snapshot {publication}: {a.name} ({total} rows, {len(parts)} partition(s))")
                    files, digest = write_parquet(spark, ReadPlan(parts), sdir.child(rel), a.rowguid_column).get(
                        "", Written()).seal(total, f"snapshot {publication}/{a.name}")
                manifest.articles.append(ArticleSnapshot(
                    name=a.name, schema=a.source_schema, table=a.source_table, artid=a.artid,
                    nickname=a.nickname, rowguid_column=a.rowguid_column,
                    column_tracking=bool(a.column_tracking), processing_group=a.processing_group,
                    dri_related=bool(a.dri_related), related_nicknames=list(a.related_nicknames or []),
                    table_schema=a.table_schema, path=rel, rows=total, files=files, key_digest=digest,
                    partitions=partitioned, rowguid_added=bool(a.rowguid_added)))
            nicks = [a.nickname for a in articles]
            cols = [["tablenick", INT.to_dict()], ["rowguid", GUID.to_dict()], ["lineage", JSON.to_dict()],
                    ["colv", JSON.to_dict()]]
            where = " WHERE tablenick IN (" + ", ".join(str(int(n)) for n in nicks) + ")"
            parts, total = read_partitions(frozen, url, sid, frozen.meta("MSmerge_contents"),
                                       "SELECT tablenick, rowguid, lineage, colv", "rowguid", cols,
                                       f"{publication}/MSmerge_contents", where)
            report(f"snapshot {publication}: lineage of {total} changed rows")
            written = write_parquet(spark, ReadPlan(parts), sdir.child(manifest.contents_path), "rowguid")
            manifest.contents_rows = total
            manifest.contents_files, manifest.contents_digest = written.get("", Written()).seal(
                total, f"snapshot {publication}/MSmerge_contents")
        failpoints.hit("snapshot.before_manifest", publication)
        sdir.write(MANIFEST, manifest.to_json().encode("utf-8"))
        write_current(root, publication, snapshot_id)
    except BaseException:
        with contextlib.suppress(OSError):
            sdir.delete("")
        raise
    with pub.transaction():
        store.update(pub, PublicationRow, {
            "snapshot_generation": snap_gen, "snapshot_time": store.utcnow(), "snapshot_dir": sdir.location},
            {"pubid": prow.pubid})
    remove_stale(pdir, snapshot_id)
    report(f"snapshot {publication}: written to {sdir.describe()} in {timer.seconds:.1f}s (generation {snap_gen})")
    return sdir, manifest
