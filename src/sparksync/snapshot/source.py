"""Where the files of a snapshot are read from when a subscriber is initialized: a folder (``Folder``: the
publisher's snapshot folder, by path or URL, or a copy), or any other ``SnapshotFiles`` (a device whose file is
encrypted keeps the files it downloads sealed: ``web/device/downloads.py``). Paths are relative to the snapshot,
``/``-separated."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO, Protocol, cast

from sparksync import storage


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
    """A snapshot in a folder: a local path or a URL (``storage.Folder``: an object store, HDFS)."""

    def __init__(self, root: str | Path | storage.Folder):
        self.files = root if isinstance(root, storage.Folder) else storage.Folder(root)

    def parquet(self, folder: str) -> list[str]:
        names, _ = self.files.listing(folder)
        return [f"{folder}/{n}" for n in names if n.endswith(".parquet")]

    def size(self, path: str) -> int:
        return self.files.size(path)

    def open(self, path: str) -> BinaryIO:
        return cast(BinaryIO, self.files.open(path))

    def where(self, folder: str) -> str:
        where = self.files.describe()
        return where if folder in ("", ".") else f"{where.rstrip('/')}/{folder}"


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
