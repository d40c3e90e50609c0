"""A device's partition of a snapshot: what its first sync downloads, and nothing of other partitions.

The snapshot on disk holds every partition's rows (a folder per partition of each filtered article) and
the lineage of every row. A device receives a manifest that lists only its partition of each filtered
article, and a lineage file of its own: the lineage rows of the rows it receives, written once per
(snapshot, partition) under ``devices/<partition>/`` and sealed like any snapshot file (size, SHA-256,
row count, key digest), so the device verifies it as it verifies the rows.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from sparksync import storage
from sparksync.snapshot.files import write_file
from sparksync.snapshot.manifest import MANIFEST, SnapshotManifest
from sparksync.snapshot.source import Folder

DEVICES = "devices"


def device_snapshot(snap_dir: storage.Folder, manifest: SnapshotManifest,
                    partition_id: int | None) -> tuple[storage.Folder, dict]:
    """(the snapshot folder, the device's manifest). The caller serializes calls (one writer per folder); two
    doors writing the same partition's files write the same bytes, and its manifest last."""
    if not any(a.partitions is not None for a in manifest.articles):
        return snap_dir, asdict(manifest)
    pid = int(partition_id or 0)
    made = f"{DEVICES}/{pid}/{MANIFEST}"
    try:
        return snap_dir, json.loads(snap_dir.read(made))
    except FileNotFoundError:
        out = _write(snap_dir, manifest, pid)
        snap_dir.write(made, json.dumps(out, indent=2, sort_keys=True).encode("utf-8"))
        return snap_dir, out


def _write(snap_dir: storage.Folder, manifest: SnapshotManifest, pid: int) -> dict:
    """The device's manifest, once its lineage file is written."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = Folder(snap_dir)

    def table(folder: str, columns: list[str] | None = None):
        parts = []
        for path in files.parquet(folder):
            with files.open(path) as fh:
                parts.append(pq.read_table(fh, columns=columns))
        return pa.concat_tables(parts) if parts else None

    out = asdict(manifest)
    guids: list = []
    for a, art in zip(out["articles"], manifest.articles):
        path, rows, listed, key_digest = art.data(pid)
        if art.partitions is not None:
            a.update({"path": path, "rows": rows, "files": listed, "key_digest": key_digest,
                      "partitions": {str(pid): art.partitions[str(pid)]}})
        data = table(path, [art.rowguid_column])
        if data is not None:
            guids.extend(data.column(0).cast(pa.string()).to_pylist())
    rel = f"{DEVICES}/{pid}/contents"
    lineage = table(manifest.contents_path)
    written = {"rows": 0, "digest": "0:0000000000000000"}
    described: list[dict] = []
    if lineage is not None:
        kept = lineage.filter(pc.is_in(lineage.column("rowguid").cast(pa.string()),
                                       value_set=pa.array(guids, pa.string())))
        written = write_file(snap_dir, rel, "part-00000.parquet", kept.to_batches(), "rowguid")
        if written["rows"]:
            described = [{k: written[k] for k in ("name", "bytes", "sha256", "rows")}]
    out.update({"contents_path": rel, "contents_rows": written["rows"], "contents_digest": written["digest"],
                "contents_files": described})
    return out
