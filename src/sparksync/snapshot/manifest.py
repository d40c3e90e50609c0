"""The snapshot manifest: what a snapshot folder holds and the generation it corresponds to.

Layout (``snapshot_dir`` from the config)::

    <snapshot_dir>/<publication>/CURRENT              name of the complete snapshot to use
    <snapshot_dir>/<publication>/<snapshot id>/
        manifest.json                                this file: articles, schema, generation
        articles/<nickname>_<table>/part-*.parquet    one folder per article (written by Spark)
        metadata/contents/part-*.parquet              lineage of every published row (MSmerge_contents)
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import SnapshotError

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

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "SnapshotManifest":
        arts = [ArticleSnapshot(**a) for a in d.pop("articles")]
        return cls(articles=arts, **d)


def publication_dir(root: Path, publication: str) -> Path:
    return root / publication


def write_current(root: Path, publication: str, snapshot_id: str) -> None:
    d = publication_dir(root, publication)
    tmp = d / f".{CURRENT}.tmp"
    tmp.write_text(snapshot_id + "\n", encoding="utf-8")
    os.replace(tmp, d / CURRENT)


def current_snapshot(root: Path, publication: str) -> tuple[Path, SnapshotManifest]:
    """The complete snapshot of ``publication``, or SnapshotError if there is none."""
    d = publication_dir(root, publication)
    cur = d / CURRENT
    if not cur.is_file():
        raise SnapshotError(f"publication {publication}: no snapshot in {d}; run 'sparksync snapshot'",
                            obj=publication)
    snap_dir = d / cur.read_text(encoding="utf-8").strip()
    path = snap_dir / MANIFEST
    if not path.is_file():
        raise SnapshotError(f"publication {publication}: snapshot {snap_dir} is incomplete (no {MANIFEST})",
                            obj=publication)
    return snap_dir, SnapshotManifest.from_dict(json.loads(path.read_text(encoding="utf-8")))
