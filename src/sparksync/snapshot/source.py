"""Where the files of a snapshot are read from when a subscriber is initialized: a folder (``Folder``: the
publisher's snapshot folder, or a copy), or any other ``SnapshotFiles`` (a device whose file is encrypted keeps the
files it downloads sealed: ``web/device/downloads.py``). Paths are relative to the snapshot, ``/``-separated."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO, Protocol


class SnapshotFiles(Protocol):
    """The files of one snapshot (or of a device's partition of it)."""

    def parquet(self, folder: str) -> list[str]:
        """The Parquet files of ``folder``, sorted, as paths relative to the snapshot."""
        ...

    def size(self, path: str) -> int: ...

    def open(self, path: str) -> BinaryIO:
        """The file for reading (seekable: a Parquet reader reads its footer first)."""
        ...

    def where(self, folder: str) -> str:
        """``folder`` as an error message names it."""
        ...


class Received(SnapshotFiles, Protocol):
    """A snapshot's files as a subscriber received them (a device's download), to which its manifest is added."""

    def write(self, path: str, data: bytes) -> None: ...


class Folder:
    """A snapshot in a folder of the file system."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def parquet(self, folder: str) -> list[str]:
        d = self.root / folder
        return [f"{folder}/{p.name}" for p in sorted(d.glob("*.parquet"))] if d.is_dir() else []

    def size(self, path: str) -> int:
        return (self.root / path).stat().st_size

    def open(self, path: str) -> BinaryIO:
        return open(self.root / path, "rb")

    def where(self, folder: str) -> str:
        return str(self.root / folder)


def name_of(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def read_text(files: SnapshotFiles, path: str) -> str:
    with files.open(path) as fh:
        return fh.read().decode("utf-8")


def sha256(files: SnapshotFiles, path: str) -> str:
    h = hashlib.sha256()
    with files.open(path) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def parquet_batches(files: SnapshotFiles, folder: str, columns: list[str], batch_size: int = 10_000):
    """The record batches of ``folder``'s Parquet files, file after file, with ``columns`` only."""
    import pyarrow.parquet as pq

    for path in files.parquet(folder):
        with files.open(path) as fh:
            yield from pq.ParquetFile(fh).iter_batches(batch_size=batch_size, columns=columns)
