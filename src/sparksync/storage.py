"""A folder that several hosts reach, by path or URL: where snapshots are written (``[publisher] snapshot_dir``) and
where ``serve`` keeps the partition feed (``[server] feed_dir``), so that Spark's executors on other hosts, and door
processes, read and write them.

A ``Folder`` is a local path (or ``file://``), or a URL one of pyarrow's file systems understands: ``s3://bucket/path``
(an S3 or S3-compatible object store; options as the URL's query: ``endpoint_override=host:port``, ``scheme=http``,
``region=...``; credentials from the environment, as AWS tools take them: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``), ``hdfs://namenode:port/path``, ``gs://bucket/path``. Every read and write goes through
the file system: nothing assumes a local path. A file is written whole: a reader sees the old one or the new one
(a local file is renamed over the old; an object store's put is atomic).

A folder travels to a Spark task as its location (it is pickled as that text), and opens its file system there.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sparksync.errors import ConfigurationError


def is_url(location: str) -> bool:
    return "://" in location


class Folder:
    """One folder; ``name`` arguments are paths relative to it (``a/b/c``)."""

    def __init__(self, location: str | Path):
        self.location = str(location)
        self._fs: Any = None
        self._root = ""

    def __reduce__(self) -> tuple:
        return (Folder, (self.location,))

    def __repr__(self) -> str:
        return f"Folder({self.location!r})"

    @property
    def name(self) -> str:
        """The folder's own name (the last part of its path)."""
        return self.describe().rstrip("/").rsplit("/", 1)[-1]

    @property
    def local(self) -> bool:
        return not is_url(self.location) or self.location.startswith("file://")

    def _open(self) -> tuple[Any, str]:
        if self._fs is None:
            import pyarrow.fs as pafs

            if not is_url(self.location):
                self._fs, self._root = pafs.LocalFileSystem(), str(Path(self.location).resolve())
            else:
                try:
                    self._fs, self._root = pafs.FileSystem.from_uri(self.location)
                except (ValueError, OSError) as e:     # an unknown scheme, a bucket name that cannot be
                    raise ConfigurationError(f"{self.describe()}: {e}", obj=self.describe()) from None
        return self._fs, self._root

    def describe(self) -> str:
        """The location without its query (options) nor any user information."""
        if not is_url(self.location):
            return self.location
        u = urlsplit(self.location)
        return urlunsplit((u.scheme, u.hostname or "", u.path, "", ""))

    def _path(self, name: str) -> str:
        _, root = self._open()
        return f"{root.rstrip('/')}/{name}" if name else root

    def child(self, name: str) -> Folder:
        """The folder ``name`` inside this one (a URL keeps its options)."""
        if not is_url(self.location):
            return Folder(str(Path(self.location) / name))
        u = urlsplit(self.location)
        return Folder(urlunsplit((u.scheme, u.netloc, f"{u.path.rstrip('/')}/{name}", u.query, u.fragment)))

    def local_path(self, name: str = "") -> Path:
        """The path of ``name`` on this host (a local folder only)."""
        assert self.local, self.location
        return Path(self._path(name))

    # -- files ------------------------------------------------------------------------------------
    def write(self, name: str, data: bytes) -> None:
        """``name`` written whole (its folder made first)."""
        fs, _ = self._open()
        path = self._path(name)
        parent = path.rsplit("/", 1)[0]
        fs.create_dir(parent, recursive=True)
        if self.local:
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            return
        with fs.open_output_stream(path) as out:
            out.write(data)

    def read(self, name: str) -> bytes:
        """Raises ``FileNotFoundError`` (or another ``OSError``) when it cannot be read."""
        fs, _ = self._open()
        with fs.open_input_stream(self._path(name)) as f:
            return bytes(f.readall())

    def delete(self, name: str) -> None:
        """Remove the file or folder ``name``; nothing when it is gone already."""
        import pyarrow.fs as pafs

        fs, _ = self._open()
        path = self._path(name)
        try:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.Directory:
                fs.delete_dir(path)
            elif info.type != pafs.FileType.NotFound:
                fs.delete_file(path)
        except FileNotFoundError:
            pass

    def upload(self, name: str, source: str | Path) -> None:
        """The local file ``source`` becomes ``name``, whole (a local folder: moved; else streamed)."""
        fs, _ = self._open()
        path = self._path(name)
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        if self.local:
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            import shutil

            shutil.move(str(source), tmp)
            os.replace(tmp, path)
            return
        with open(source, "rb") as f, fs.open_output_stream(path) as out:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                out.write(chunk)

    def open(self, name: str) -> Any:
        """``name`` for reading, seekable (a Parquet reader reads its footer first); ``FileNotFoundError``."""
        fs, _ = self._open()
        return fs.open_input_file(self._path(name))

    def exists(self, name: str) -> bool:
        import pyarrow.fs as pafs

        fs, _ = self._open()
        return bool(fs.get_file_info(self._path(name)).type != pafs.FileType.NotFound)

    def size(self, name: str) -> int:
        fs, _ = self._open()
        info = fs.get_file_info(self._path(name))
        if info.size is None:
            raise FileNotFoundError(f"{self.describe()}/{name}")
        return int(info.size)

    def listing(self, name: str = "") -> tuple[list[str], list[str]]:
        """(files, folders) directly inside ``name``, each sorted by name; both empty when it does not exist."""
        import pyarrow.fs as pafs

        fs, _ = self._open()
        try:
            infos = fs.get_file_info(pafs.FileSelector(self._path(name), allow_not_found=True))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        files = sorted(i.base_name for i in infos if i.type == pafs.FileType.File)
        folders = sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)
        return files, folders

    def check_writable(self) -> None:
        """Write and remove a probe; ``OSError`` when this process cannot write here."""
        name = f".probe-{uuid.uuid4().hex}"
        self.write(name, b"")
        self.delete(name)
