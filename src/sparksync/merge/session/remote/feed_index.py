"""The partition feed's index, shared by every ``serve`` of one publisher: where the feed of a publication starts,
its head, and its segments (``feed.py``), one JSON file per publication under ``[server] feed_dir``.

Layout (``feed_dir`` a path or a URL: ``storage.Folder``): ``<feed_dir>/pub-<hash of the publication's
name>/index.json`` beside ``<epoch>/<lo>-<hi>/p<partition>.ssw``
(an epoch: the feed since it last started; a start makes a new one and removes the others). The index is written
whole (``Folder.write``), only by the door holding the publication's feed round lock
(``locks.FEED``); every door reads it again at each of its rounds (``Feed.index``), so a segment one door wrote is
served by all of them, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field

from sparksync.merge.session.changes import ALL_PARTITIONS
from sparksync.storage import Folder

INDEX = "index.json"


@dataclass(frozen=True)
class Segment:
    """Generations (lo, hi] of one publication, written for ``partitions`` (``ALL_PARTITIONS`` alone: an
    unfiltered publication); ``files``: partition -> its frame, relative to the publication's folder (a partition
    without rows has none; the unfiltered articles' rows, every device's, are ``ALL_PARTITIONS``'s)."""

    lo: int
    hi: int
    partitions: frozenset[int]
    files: dict[int, str]
    rows: int
    bytes: int
    counts: dict[int, int] = field(default_factory=dict)       # partition -> the rows of its frame
    sources: dict[int, int] = field(default_factory=dict)      # replica nickname -> changes it sent in these generations

    def files_of(self, partition_id: int) -> list[str]:
        return [self.files[p] for p in self._of(partition_id)]

    def rows_of(self, partition_id: int) -> int:
        return sum(self.counts.get(p, 0) for p in self._of(partition_id))

    def _of(self, partition_id: int) -> list[int]:
        return [p for p in dict.fromkeys((ALL_PARTITIONS, partition_id)) if p in self.files]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["partitions"] = sorted(self.partitions)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Segment:
        return cls(int(d["lo"]), int(d["hi"]), frozenset(int(p) for p in d["partitions"]),
                   {int(k): str(v) for k, v in d["files"].items()}, int(d["rows"]), int(d["bytes"]),
                   {int(k): int(v) for k, v in d.get("counts", {}).items()},
                   {int(k): int(v) for k, v in d.get("sources", {}).items()})


@dataclass
class Index:
    """A publication's feed: ``shape`` (what its rows depend on besides their generations), ``head`` (where every
    download ends) and ``head_guid`` (the publisher's generation ``head``: a publisher restored from an older copy
    has another, and the feed starts again), ``epoch`` (its segments' folder)."""

    publication: str
    epoch: str
    shape: str
    head: int
    head_guid: str | None
    segments: list[Segment] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"publication": self.publication, "epoch": self.epoch, "shape": self.shape,
                           "head": self.head, "head_guid": self.head_guid,
                           "segments": [s.to_dict() for s in self.segments]})

    @classmethod
    def from_json(cls, text: str) -> Index:
        d = json.loads(text)
        return cls(str(d["publication"]), str(d["epoch"]), str(d["shape"]), int(d["head"]),
                   d.get("head_guid"), [Segment.from_dict(s) for s in d["segments"]])

    @classmethod
    def new(cls, publication: str, shape: str, head: int, head_guid: str | None) -> Index:
        return cls(publication, uuid.uuid4().hex, shape, head, head_guid)


def folder_of(root: Folder, publication: str) -> Folder:
    """The publication's folder (named by a hash: a publication's name may hold any character)."""
    return root.child(f"pub-{hashlib.sha256(publication.encode()).hexdigest()[:24]}")


def load(root: Folder, publication: str) -> Index | None:
    """The publication's index (None: no feed, or an index this release cannot read: the feed starts again)."""
    try:
        index = Index.from_json(folder_of(root, publication).read(INDEX).decode("utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return index if index.publication == publication else None


def save(root: Folder, index: Index) -> None:
    """Write the index whole: a reader sees the old one or the new one, never a part."""
    folder_of(root, index.publication).write(INDEX, index.to_json().encode("utf-8"))
