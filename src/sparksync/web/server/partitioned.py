"""A device's partition of a snapshot: what its first sync downloads, and nothing of other partitions.

The snapshot on disk holds every partition's rows (a folder per partition of each filtered article) and
the lineage of every row. A device receives a manifest that lists only its partition of each filtered
article, and a lineage file of its own: the lineage rows of the rows it receives, written once per
(snapshot, partition) under ``devices/<partition>/`` and sealed like any snapshot file (size, SHA-256,
row count, key digest), so the device verifies it as it verifies the rows.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

from sparksync.snapshot.manifest import KeyDigest, SnapshotManifest, describe_files

DEVICES = "devices"


def device_snapshot(snap_dir: Path, manifest: SnapshotManifest, partition_id: int | None) -> tuple[Path, dict]:
    """(the snapshot folder, the device's manifest). The caller serializes calls (one writer per folder)."""
    if not any(a.partitions is not None for a in manifest.articles):
        return snap_dir, asdict(manifest)
    folder = snap_dir / DEVICES / str(int(partition_id or 0))
    made = folder / "manifest.json"
    if not made.exists():
        _write(snap_dir, manifest, int(partition_id or 0), folder)
    return snap_dir, json.loads(made.read_text(encoding="utf-8"))


def _write(snap_dir: Path, manifest: SnapshotManifest, pid: int, folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    out = asdict(manifest)
    guids: list = []
    for a, art in zip(out["articles"], manifest.articles):
        path, rows, files, key_digest = art.data(pid)
        if art.partitions is not None:
            a.update({"path": path, "rows": rows, "files": files, "key_digest": key_digest,
                      "partitions": {str(pid): art.partitions[str(pid)]}})
        data = sorted((snap_dir / path).glob("*.parquet"))
        if data:
            guids.append(ds.dataset([str(f) for f in data], format="parquet").to_table(
                columns=[art.rowguid_column]).column(0).cast(pa.string()))
    lineage_files = sorted((snap_dir / manifest.contents_path).glob("*.parquet"))
    rel = f"{DEVICES}/{pid}/contents"
    tmp = Path(tempfile.mkdtemp(prefix=".device-", dir=snap_dir))
    (tmp / "contents").mkdir()
    digest = KeyDigest()
    n = 0
    if lineage_files:
        lineage = ds.dataset([str(f) for f in lineage_files], format="parquet").to_table()
        mine = pa.chunked_array([c for g in guids for c in g.chunks], pa.string()) if guids else pa.array([], pa.string())
        kept = lineage.filter(pc.is_in(lineage.column("rowguid").cast(pa.string()), value_set=pa.array(
            mine.to_pylist() if isinstance(mine, pa.ChunkedArray) else mine, pa.string())))
        pq.write_table(kept, str(tmp / "contents" / "part-00000.parquet"))
        digest.add(kept.column("rowguid").to_pylist())
        n = kept.num_rows
    out.update({"contents_path": rel, "contents_rows": n, "contents_digest": digest.hexdigest(),
                "contents_files": describe_files(tmp / "contents")})
    (tmp / "manifest.json").write_text(json.dumps(out, indent=2, sort_keys=True), encoding="utf-8")
    folder.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, folder)
