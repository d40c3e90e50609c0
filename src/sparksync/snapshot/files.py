"""Snapshot files: an article's rows read as of a consistent view, written as Parquet by Spark, and sealed
(every row written, each file described for the manifest). Shared by both replication models."""

from __future__ import annotations

from pathlib import Path

from sparksync.dialects.replica import Replica
from sparksync.errors import SnapshotError
from sparksync.snapshot.manifest import describe_files, digest_parquet
from sparksync.spark.reads import ReadPartition, ReadPlan

SPLIT_ROWS = 250_000


def read_partitions(frozen: Replica, url: str, sid: str | None, table_sql: str, select: str, order_col: str,
                    columns: list, label: str, where: str = "", params: tuple = (),
                    order_param: str | None = None, key: list | None = None) -> tuple[list[ReadPartition], int]:
    """Read partitions of one table as of the consistent view: one, or ranges of ``order_col`` of
    about SPLIT_ROWS rows each (``order_param``: its placeholder; a UUID by default)."""
    d = frozen.dialect
    total = int(frozen.scalar(f"SELECT count(*) FROM {table_sql}{where}", params) or 0)
    base = f"{select} FROM {table_sql}"
    if total <= SPLIT_ROWS:
        return [ReadPartition(url, base + where, list(params), columns, sid, label, key=list(key or []))], total
    n = -(-total // SPLIT_ROWS)
    bounds = [frozen.scalar(f"SELECT {order_col} FROM {table_sql}{where} ORDER BY {order_col} LIMIT 1 "
                            f"OFFSET {k * SPLIT_ROWS}", params) for k in range(1, n)]
    bounds = [str(b) for b in bounds]
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
        parts.append(ReadPartition(url, base + where + conj + " AND ".join(conds), ps, columns, sid,
                                   f"{label} part {i + 1}/{n}", key=list(key or [])))
    return parts, total


def write_parquet(spark, plan: ReadPlan, path: Path) -> None:
    df = spark.read.format("sparksync").schema(plan.spark_schema()).option("plan", plan.to_json()).load()
    df.write.mode("overwrite").parquet(str(path))


def seal(folder: Path, expected_rows: int, key_column: str, what: str) -> tuple[list[dict], str]:
    """Check what Spark wrote holds every row the publisher's view had, and describe it for the
    manifest: each file's size, SHA-256 and rows, and the KeyDigest of ``key_column``."""
    files = describe_files(folder)
    written = sum(f["rows"] for f in files)
    if written != expected_rows:
        raise SnapshotError(f"{what}: {written} rows were written but the publisher's view holds {expected_rows}; "
                            "the snapshot is not used", obj=what)
    return files, digest_parquet(folder, key_column)
