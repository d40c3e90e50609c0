"""The snapshot of a transactional publication, consistent with the log position.

A consistent view of the publisher is opened and its position in the command stream recorded (the
*sync point*): PostgreSQL, an exported snapshot and its ``pg_current_snapshot()`` (the transactions
it sees), plus the log position once every transaction it did not see had ended; SQLite, a backup
copy and the last log sequence number in it. Each article (published columns, rows passing the row
filter) is written from that view as Parquet by Spark's tasks (``snapshot/files.py``: to a path or a URL), with a
manifest; ``initialize.py`` loads it
at the subscribers and delivery starts after the sync point.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, field

from sparksync.config import PublicationConfig, Topology
from sparksync.dialects import connect
from sparksync.dialects.model import from_table_dict
from sparksync.filters import parse_filter
from sparksync.names import TableName
from sparksync.progress import Reporter, silent
from sparksync.snapshot.files import Written, read_partitions, work_folder, write_parquet
from sparksync.snapshot.manifest import MANIFEST, new_snapshot_id, publication_dir
from sparksync.spark.reads import ReadPlan
from sparksync.transactional.capture import capture_method
from sparksync.transactional.distribution import database as dst


@dataclass
class TxArticleSnapshot:
    article_id: int
    name: str
    source_schema: str | None
    source_table: str
    table_schema: dict
    path: str
    rows: int = 0
    files: list[dict] | None = None          # [{name, bytes, sha256, rows}] (snapshot.files.Written)
    key_digest: str | None = None            # KeyDigest of the first key column


@dataclass
class TxSnapshot:
    publication: str
    publication_id: str
    snapshot_id: str
    directory: str                  # a path or a URL (storage.Folder)
    start: int                      # the subscriptions' first watermark: deliver what comes after it
    sync_point: dict
    articles: list[TxArticleSnapshot] = field(default_factory=list)


def write_snapshot(spark, topology: Topology, pub: PublicationConfig, publication: dst.Publication,
                   report: Reporter = silent) -> TxSnapshot:
    """Write the publication's snapshot as of one moment and record that moment's place in the log."""
    root = publication_dir(topology.snapshots, pub.name)
    snapshot_id = new_snapshot_id()
    sdir = root.child(snapshot_id)
    articles = [a for a in publication.articles if a.active]
    try:
        with connect(topology.publisher_url, topology.publisher.name) as pubdb:
            d = pubdb.dialect
            with work_folder(root) as work, d.consistent_reads(pubdb, work) as (url, sid, frozen):
                sync, start = capture_method(pubdb).sync_point(pubdb, frozen, report)
                snap = TxSnapshot(pub.name, publication.publication_id, snapshot_id, sdir.location, start, sync)
                for a in articles:
                    info = from_table_dict(a.table_schema)
                    name = TableName(a.source_schema, a.source_table)
                    cols = [[c.name, c.type.to_dict()] for c in info.columns]
                    select = "SELECT " + ", ".join(d.quote(c.name) for c in info.columns)
                    where = ""
                    if a.filter:
                        f = parse_filter(a.filter, [c.name for c in info.columns], a.name)
                        where = " WHERE " + f.sql_for(d.capabilities.sql, info.columns)
                    first_key = info.key_columns[0]
                    parts, total = read_partitions(frozen, url, sid, d.table_sql(name), select,
                                                   d.quote(first_key.name), cols, f"{pub.name}/{a.name}", where,
                                                   order_param=d.typed_param(first_key.type),
                                                   key=list(info.primary_key))
                    rel = f"articles/{a.article_id}_{name.slug}"
                    report(f"snapshot {pub.name}: {a.name} ({total} rows, {len(parts)} partition(s))")
                    files, digest = write_parquet(spark, ReadPlan(parts), sdir.child(rel), first_key.name).get(
                        "", Written()).seal(total, f"snapshot {pub.name}/{a.name}")
                    snap.articles.append(TxArticleSnapshot(a.article_id, a.name, a.source_schema,
                                                           a.source_table, a.table_schema, rel, total, files,
                                                           digest))
        sdir.write(MANIFEST, json.dumps(asdict(snap), default=str, indent=1).encode("utf-8"))
    except BaseException:
        with contextlib.suppress(OSError):
            sdir.delete("")
        raise
    return snap
