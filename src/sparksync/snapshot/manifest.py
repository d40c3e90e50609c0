"""The snapshot manifest: what a snapshot folder holds and the generation it corresponds to.

Layout (``snapshot_dir`` from the config: a path or a URL, ``storage.Folder``)::

    <snapshot_dir>/<publication>/CURRENT              name of the complete snapshot to use
    <snapshot_dir>/<publication>/<snapshot id>/
        manifest.json                                this file: articles, schema, generation
        articles/<nickname>_<table>/part-*.parquet    one folder per article (written by Spark's tasks)
        articles/<nickname>_<table>/sparksync_partition=<id>/part-*.parquet
                                                     a filtered article: one folder per partition
        metadata/contents/part-*.parquet              lineage of every published row (MSmerge_contents)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field

from sparksync import storage
from sparksync.errors import SnapshotError
from sparksync.snapshot.source import SnapshotFiles, name_of, sha256

MANIFEST = "manifest.json"
CURRENT = "CURRENT"


@dataclass
class ArticleSnapshot:
    name: str
    schema: str | None
    table: str
    artid: str
    nickname: int
    rowguid_column: str
    column_tracking: bool
    processing_group: int
    dri_related: bool
    related_nicknames: list[int]
    table_schema: dict
    path: str
    rows: int = 0
    files: list[dict] | None = None          # [{name, bytes, sha256, rows}] of the article's Parquet files
    key_digest: str | None = None            # KeyDigest of the rowguids written
    rowguid_added: bool = False              # the publisher added the rowguid column (not the application's own)
    # a filtered article (filtered merge publication): its rows per partition, each like the above:
    # partition id (text) -> {"path", "rows", "files", "key_digest"}; ``path`` then holds no data itself
    partitions: dict[str, dict] | None = None

    def data(self, partition_id: int | None) -> tuple[str, int, list[dict] | None, str | None]:
        """(path, rows, files, key digest) of what a subscriber in ``partition_id`` loads."""
        if self.partitions is None:
            return self.path, self.rows, self.files, self.key_digest
        part = self.partitions.get(str(partition_id)) if partition_id is not None else None
        if part is None:
            raise SnapshotError(f"article {self.name} is filtered and this snapshot holds no data for partition "
                                f"{partition_id}; write a new snapshot ('sparksync snapshot')", obj=self.name)
        return part["path"], int(part["rows"]), part["files"], part["key_digest"]


@dataclass
class SnapshotManifest:
    publication: str
    pubid: str
    snapshot_id: str
    created_at: str
    publisher: str
    publisher_nickname: int
    publisher_replica_id: str
    snapshot_generation: int
    generation_leveling_threshold: int
    retention: int
    articles: list[ArticleSnapshot] = field(default_factory=list)
    contents_path: str = "metadata/contents"
    contents_rows: int = 0
    contents_files: list[dict] | None = None
    contents_digest: str | None = None
    schema_version: int = 0          # the publication's last schema change (sysmergeschemachange) it reflects

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> SnapshotManifest:
        arts = [ArticleSnapshot(**a) for a in d.pop("articles")]
        return cls(articles=arts, **d)


class KeyDigest:
    """An order-independent checksum of a column's values (the rowguids of an article): the sum of
    64-bit BLAKE2 hashes of their text, with the count. Computed by the tasks that write the snapshot's
    files (as they write them); recomputed over the rows an initialization loads, so rows lost or changed on the way are
    caught before anything commits."""

    def __init__(self) -> None:
        self.total = 0
        self.count = 0

    def add(self, values) -> None:
        total = self.total
        for v in values:
            total += int.from_bytes(hashlib.blake2b(str(v).encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                                    "big")
            self.count += 1
        self.total = total % (1 << 64)

    def hexdigest(self) -> str:
        return f"{self.count}:{self.total:016x}"

    def merge(self, hexdigest: str) -> None:
        """Add the values another KeyDigest (its ``hexdigest``) summed: a digest is the same however the values
        were split between the tasks that read them."""
        count, _, total = hexdigest.partition(":")
        self.count += int(count)
        self.total = (self.total + int(total, 16)) % (1 << 64)


def verify_files(files: SnapshotFiles, folder: str, expected_files: list[dict] | None, what: str) -> None:
    """The data files of ``folder`` (in ``files``) are exactly ``expected_files`` (names, sizes, checksums), or
    SnapshotError naming ``what`` and the first difference."""
    if expected_files is None:
        raise SnapshotError(f"{what}: the manifest lists no data files (written by an older sparksync); "
                            "write a new snapshot ('sparksync snapshot')", obj=what)
    present = {name_of(p): p for p in files.parquet(folder)}
    expected = {f["name"]: f for f in expected_files}
    where = files.where(folder)
    for name in sorted(expected):
        if name not in present:
            raise SnapshotError(f"{what}: data file {name} is missing from {where}", obj=what)
    for name in sorted(present):
        if name not in expected:
            raise SnapshotError(f"{what}: unexpected data file {name} in {where}", obj=what)
    for name, f in sorted(expected.items()):
        path = present[name]
        if files.size(path) != f["bytes"] or sha256(files, path) != f["sha256"]:
            raise SnapshotError(f"{what}: data file {name} was changed after the snapshot was written "
                                "(its checksum differs)", obj=what)


def new_snapshot_id() -> str:
    """A snapshot folder's name: its UTC time, sortable, and a random suffix."""
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def remove_stale(pdir: storage.Folder, keep: str | None) -> list[str]:
    """Remove every snapshot folder of a publication but ``keep`` (and the work folder): what a killed
    snapshot or initialization left behind. The caller holds the publication's snapshot lock."""
    _, folders = pdir.listing()
    removed = [name for name in folders if name != keep]
    for name in removed:
        pdir.delete(name)
    return removed


def current_id(root: storage.Folder, publication: str) -> str | None:
    try:
        return publication_dir(root, publication).read(CURRENT).decode("utf-8").strip() or None
    except FileNotFoundError:
        return None


def publication_dir(root: storage.Folder, publication: str) -> storage.Folder:
    return root.child(publication)


def write_current(root: storage.Folder, publication: str, snapshot_id: str) -> None:
    publication_dir(root, publication).write(CURRENT, (snapshot_id + "\n").encode("utf-8"))


def current_snapshot(root: storage.Folder, publication: str) -> tuple[storage.Folder, SnapshotManifest]:
    """The complete snapshot of ``publication``, or SnapshotError if there is none."""
    d = publication_dir(root, publication)
    snapshot_id = current_id(root, publication)
    if snapshot_id is None:
        raise SnapshotError(f"publication {publication}: no snapshot in {d.describe()}; run 'sparksync snapshot'",
                            obj=publication)
    snap_dir = d.child(snapshot_id)
    try:
        text = snap_dir.read(MANIFEST)
    except FileNotFoundError:
        raise SnapshotError(f"publication {publication}: snapshot {snap_dir.describe()} is incomplete (no {MANIFEST})",
                            obj=publication) from None
    return snap_dir, SnapshotManifest.from_dict(json.loads(text))
