"""Snapshot files: an article's rows read as of a consistent view and written as Parquet by Spark's tasks, each
task reading its part of the view and writing its files itself, through ``storage.Folder`` (a local path, an object
store, HDFS: nothing on the driver's disk); then sealed: every row written, each file described for the manifest
(size, SHA-256, rows) with the key column's ``KeyDigest``, computed by the task that wrote it. Shared by both
replication models."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from sparksync import storage
from sparksync.dialects.replica import Replica
from sparksync.errors import SnapshotError
from sparksync.snapshot.manifest import KeyDigest
from sparksync.spark.reads import ReadPartition, ReadPlan, per_task, read_partition
from sparksync.types import SqlType

SPLIT_ROWS = 250_000
WRITTEN = "folder STRING, name STRING, bytes BIGINT, sha256 STRING, rows BIGINT, digest STRING"


def read_partitions(frozen: Replica, url: str, sid: str | None, table_sql: str, select: str, order_col: str,
                    columns: list, label: str, where: str = "", params: tuple = (),
                    order_param: str | None = None, key: list | None = None) -> tuple[list[ReadPartition], int]:
    """Read partitions of one table as of the consistent view: one, or ranges of ``order_col`` of
    about SPLIT_ROWS rows each (``order_param``: its placeholder; a UUID by default), each read in the order
    of ``order_col`` (a subscriber loads the files in the order they were written: in key order its inserts
    append, where in any other order each one lands on a page of its own once the table outgrows the cache)."""
    d = frozen.dialect
    total = int(frozen.scalar(f"SELECT count(*) FROM {table_sql}{where}", params) or 0)
    base = f"{select} FROM {table_sql}"
    order_by = f"ORDER BY {order_col}"
    if total <= SPLIT_ROWS:
        whole = ReadPartition(url, f"{base}{where} {order_by}", list(params), columns, sid, label, key=list(key or []))
        return [whole], total
    n = -(-total // SPLIT_ROWS)
    # every bound in one pass over the order (not one OFFSET scan per bound: quadratic in the rows)
    bounds = [b for (b,) in frozen.query(
        f"SELECT b FROM (SELECT {order_col} AS b, row_number() OVER ({order_by}) AS rn FROM {table_sql}{where}) "
        f"AS ranked WHERE rn > 1 AND (rn - 1) % {SPLIT_ROWS} = 0 ORDER BY rn", params)][:n - 1]
    if order_param is None:
        bounds = [str(b) for b in bounds]
    n = len(bounds) + 1
    conj = " AND " if where else " WHERE "
    parts = []
    u = order_param or d.uuid_param()
    for i in range(n):
        conds, ps = [], list(params)
        if i > 0:
            conds.append(f"{order_col} >= {u}")
            ps.append(bounds[i - 1])
        if i < n - 1:
            conds.append(f"{order_col} < {u}")
            ps.append(bounds[i])
        parts.append(ReadPartition(url, f"{base}{where}{conj}{' AND '.join(conds)} {order_by}", ps, columns, sid,
                                   f"{label} part {i + 1}/{n}", key=list(key or [])))
    return parts, total


@contextlib.contextmanager
def work_folder(pdir: storage.Folder):
    """A local folder for what a consistent view of the publisher needs on disk (a SQLite publisher's backup
    copy): the publication's snapshot folder's ``.work`` when it is local, else a temporary folder; removed after."""
    if pdir.local:
        pdir.local_path(".work").mkdir(parents=True, exist_ok=True)
        path = str(pdir.local_path(".work"))
    else:
        path = tempfile.mkdtemp(prefix="sparksync-snapshot-")
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Written:
    """What the tasks wrote into one folder: its files ({name, bytes, sha256, rows}) and the KeyDigest of their
    key column."""

    files: list[dict] = field(default_factory=list)
    digest: KeyDigest = field(default_factory=KeyDigest)

    @property
    def rows(self) -> int:
        return sum(int(f["rows"]) for f in self.files)

    def seal(self, expected_rows: int, what: str) -> tuple[list[dict], str]:
        """The manifest's (files, key digest), once every row the publisher's view had was written."""
        if self.rows != expected_rows:
            raise SnapshotError(f"{what}: {self.rows} rows were written but the publisher's view holds {expected_rows}; "
                                "the snapshot is not used", obj=what)
        return sorted(self.files, key=lambda f: f["name"]), self.digest.hexdigest()


def write_parquet(spark, plan: ReadPlan, folder: storage.Folder, key_column: str,
                  split_by: str | None = None) -> dict[str, Written]:
    """Every partition of ``plan`` read and written as Parquet into ``folder`` by a Spark task of its own; with
    ``split_by``, one subfolder ``<split_by>=<value>`` per value of that column (the column itself not written).
    Returns what was written per subfolder (``""``: ``folder`` itself). Files that a failed attempt of a task left
    are removed: what remains is exactly what the returned descriptions list."""
    items = list(enumerate(plan.partitions))
    results = per_task(spark, items, lambda item: write_partition(item[0], item[1], folder, key_column, split_by),
                       WRITTEN).collect()
    out: dict[str, Written] = {}
    for r in results:
        w = out.setdefault(r["folder"], Written())
        w.files.append({"name": r["name"], "bytes": int(r["bytes"]), "sha256": r["sha256"], "rows": int(r["rows"])})
        w.digest.merge(r["digest"])
    _remove_strays(folder, out, split_by)
    return out


def write_partition(index: int, partition: ReadPartition, folder: storage.Folder, key_column: str,
                    split_by: str | None) -> Iterator:
    """One task: ``partition``'s rows read and written as Parquet files (one per subfolder); yields one Arrow
    batch of ``WRITTEN`` describing them."""
    import pyarrow as pa

    fields = [pa.field(n, SqlType.from_dict(t).to_arrow()) for n, t in partition.columns]
    batches = read_partition(partition, pa.schema(fields))
    name = f"part-{index:05d}-{uuid.uuid4().hex[:12]}.parquet"
    described: list[dict] = []
    if split_by is None:
        described.append(write_file(folder, "", name, batches, key_column))
    else:
        table = pa.Table.from_batches(list(batches), schema=pa.schema(fields))
        for value, part in _split(table, split_by):
            described.append(write_file(folder, f"{split_by}={value}", name, part.to_batches(), key_column))
    found = [d for d in described if d["rows"]]
    yield pa.RecordBatch.from_pylist(found, schema=pa.schema([
        ("folder", pa.string()), ("name", pa.string()), ("bytes", pa.int64()), ("sha256", pa.string()),
        ("rows", pa.int64()), ("digest", pa.string())]))


def _split(table, column: str):
    """(value, the rows holding it without ``column``) for each value of ``column`` in ``table``."""
    import pyarrow.compute as pc

    at = table.schema.get_field_index(column)
    values = table.column(at)
    rest = table.remove_column(at)
    for value in pc.unique(values).to_pylist():
        yield value, rest.filter(pc.equal(values, value))


def write_file(folder: storage.Folder, sub: str, name: str, batches, key_column: str) -> dict:
    """``batches`` written as the Parquet file ``sub/name`` of ``folder`` (nothing when they hold no row):
    {folder, name, bytes, sha256, rows, digest}."""
    import pyarrow.parquet as pq

    where = folder.local_path(sub) if folder.local else None
    if where is not None:
        where.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".part-", suffix=".tmp", dir=where)
    os.close(fd)
    rows, digest, writer = 0, KeyDigest(), None
    try:
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(tmp, batch.schema, compression="snappy")
            if batch.num_rows:
                writer.write_batch(batch)
                rows += batch.num_rows
                digest.add(batch.column(batch.schema.get_field_index(key_column)).to_pylist())
        if writer is not None:
            writer.close()
        out = {"folder": sub, "name": name, "bytes": os.path.getsize(tmp), "sha256": _sha256(tmp), "rows": rows,
               "digest": digest.hexdigest()}
        if rows:
            folder.upload(f"{sub}/{name}" if sub else name, tmp)
        return out
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _remove_strays(folder: storage.Folder, written: dict[str, Written], split_by: str | None) -> None:
    """Remove the data files no successful task reported (a failed attempt's, retried under another name)."""
    subs = [""] if split_by is None else [s for s in folder.listing()[1] if s.startswith(f"{split_by}=")]
    for sub in subs:
        kept = {f["name"] for f in written[sub].files} if sub in written else set()
        names, _ = folder.listing(sub)
        for n in names:
            if n not in kept:
                folder.delete(f"{sub}/{n}" if sub else n)
