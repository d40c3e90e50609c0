"""Where a device keeps the snapshot files it downloads until its file is initialized from them: a temporary folder
(``InFolder``), or, for a device whose file is encrypted, sealed (``Sealed``): never on disk in the clear.

``Sealed`` is a SQLCipher database of its own in the temporary folder, encrypted under a key made for this one
download that only the process's memory ever holds: the files are written into it as they arrive (a cut download
resumed where it stopped, as a folder's is) and read back, decrypted page by page, when the file is loaded
(``snapshot.source.SnapshotFiles``). Whatever a kill leaves behind in the temporary folder cannot be read by
anyone: its key died with the process."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol

from sparksync.dialects.sqlite import cipher
from sparksync.snapshot.source import Folder, Received

CHUNK = 1 << 20                # bytes of a file per row of the sealed store


class Writer(Protocol):
    def write(self, data: bytes) -> object: ...


class DownloadTarget(Protocol):
    """One file being downloaded: how much of it is here, and where the rest goes."""

    def have(self) -> int: ...

    def open(self, append: bool) -> AbstractContextManager[Writer]: ...


class Downloads(Received, Protocol):
    def target(self, path: str) -> DownloadTarget: ...

    def close(self) -> None: ...


def downloads(url: str, folder: Path) -> Downloads:
    """Sealed when the device's file (``url``) is encrypted (its key given: ``cipher.use_key``), else the folder."""
    if url.startswith("sqlite:///") and cipher.keyed(url.removeprefix("sqlite:///")):
        return Sealed(folder)
    return InFolder(folder)


class _FileTarget:
    def __init__(self, path: Path):
        self.path = path

    def have(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    @contextmanager
    def open(self, append: bool) -> Iterator[Writer]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab" if append else "wb") as fh:
            yield fh


class InFolder(Folder):
    """The files in a folder of the device, as downloaded."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.root = Path(root)

    def target(self, path: str) -> DownloadTarget:
        return _FileTarget(self.root / path)

    def write(self, path: str, data: bytes) -> None:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        (self.root / path).write_bytes(data)

    def close(self) -> None:
        pass


class Sealed:
    """The files in a SQLCipher database under a key of this process's memory alone (module docstring)."""

    def __init__(self, folder: Path):
        module = cipher.driver()
        self.path = folder / "snapshot.sealed"
        self.db = module.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA cipher_log_level = NONE")
        self.db.execute(f"PRAGMA key = \"x'{os.urandom(32).hex()}'\"")     # a raw key: no stretching needed
        self.db.execute("PRAGMA temp_store = MEMORY")
        self.db.execute("CREATE TABLE IF NOT EXISTS chunks (path TEXT NOT NULL, start INTEGER NOT NULL, "
                        "data BLOB NOT NULL, PRIMARY KEY (path, start))")

    # -- as downloaded ----------------------------------------------------------------------------
    def target(self, path: str) -> DownloadTarget:
        return _SealedTarget(self, path)

    def write(self, path: str, data: bytes) -> None:
        with _SealedTarget(self, path).open(append=False) as w:
            w.write(data)

    def close(self) -> None:
        self.db.close()

    # -- as read (SnapshotFiles) ---------------------------------------------------------------------
    def parquet(self, folder: str) -> list[str]:
        prefix = "" if folder in ("", ".") else folder.rstrip("/") + "/"
        found = self.db.execute("SELECT DISTINCT path FROM chunks WHERE substr(path, 1, ?) = ? ORDER BY path",
                                (len(prefix), prefix)).fetchall()
        return [p for (p,) in found if p.endswith(".parquet") and "/" not in p[len(prefix):]]

    def size(self, path: str) -> int:
        return int(self.db.execute("SELECT coalesce(sum(length(data)), 0) FROM chunks WHERE path = ?",
                                   (path,)).fetchone()[0])

    def open(self, path: str) -> BinaryIO:
        return io.BufferedReader(_SealedReader(self, path), CHUNK)

    def where(self, folder: str) -> str:
        return f"the downloaded snapshot (sealed), {folder}"


class _SealedTarget:
    def __init__(self, store: Sealed, path: str):
        self.store, self.path = store, path

    def have(self) -> int:
        return self.store.size(self.path)

    @contextmanager
    def open(self, append: bool) -> Iterator[Writer]:
        db = self.store.db
        if not append:
            db.execute("DELETE FROM chunks WHERE path = ?", (self.path,))
        writer = _ChunkWriter(db, self.path, self.store.size(self.path))
        try:
            yield writer
        finally:
            writer.flush()


class _ChunkWriter:
    """Bytes appended to a sealed file, a row per ``CHUNK`` (each committed: a cut download keeps what arrived)."""

    def __init__(self, db, path: str, at: int):
        self.db, self.path, self.at = db, path, at
        self.buffer = bytearray()

    def write(self, data: bytes) -> int:
        self.buffer += data
        while len(self.buffer) >= CHUNK:
            self._put(bytes(self.buffer[:CHUNK]))
            del self.buffer[:CHUNK]
        return len(data)

    def flush(self) -> None:
        if self.buffer:
            self._put(bytes(self.buffer))
            self.buffer.clear()

    def _put(self, data: bytes) -> None:
        self.db.execute("INSERT INTO chunks (path, start, data) VALUES (?, ?, ?)", (self.path, self.at, data))
        self.at += len(data)


class _SealedReader(io.RawIOBase):
    """A sealed file read at any offset (a Parquet reader seeks to its footer first)."""

    def __init__(self, store: Sealed, path: str):
        self.db, self.path = store.db, path
        self.length = store.size(path)
        self.at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.at, io.SEEK_END: self.length}[whence]
        self.at = max(0, base + offset)
        return self.at

    def readinto(self, buffer) -> int:
        if self.at >= self.length:
            return 0
        row = self.db.execute("SELECT start, data FROM chunks WHERE path = ? AND start <= ? ORDER BY start DESC "
                              "LIMIT 1", (self.path, self.at)).fetchone()
        start, data = row
        piece = memoryview(data)[self.at - start:self.at - start + len(buffer)]
        buffer[:len(piece)] = piece
        self.at += len(piece)
        return len(piece)
