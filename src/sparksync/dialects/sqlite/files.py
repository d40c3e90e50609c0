"""A SQLite database is a file: one whose pages are damaged is recognized (``PRAGMA quick_check``) and
set aside with its write-ahead log, kept under a name that says why and when."""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from pathlib import Path

from sparksync.dialects.defaults import FilesDefaults
from sparksync.dialects.sqlite import cipher
from sparksync.dialects.sqlite.driver import driver_errors, sqlite_path
from sparksync.errors import EncryptionKeyError


class SQLiteFiles(FilesDefaults):
    """``Files`` on SQLite."""

    def damage(self, url: str) -> str | None:
        path = sqlite_path(url)
        if path == ":memory:" or not Path(path).is_file():
            return None
        try:
            raw = cipher.connect(path, isolation_level=None) if cipher.keyed(path) else \
                sqlite3.connect(path, isolation_level=None)
            try:
                found = [r[0] for r in raw.execute("PRAGMA quick_check(3)").fetchall()]
            finally:
                raw.close()
        except driver_errors() + (EncryptionKeyError,) as exc:
            return str(exc)
        return None if found == ["ok"] else "; ".join(found)

    def set_aside(self, url: str, why: str = "damaged") -> str:
        path = sqlite_path(url)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        target = f"{path}.{why}-{stamp}"
        n = 1
        while any(Path(target + suffix).exists() for suffix in ("", "-wal", "-shm")):   # never over one set aside
            n += 1
            target = f"{path}.{why}-{stamp}-{n}"
        for suffix in ("", "-wal", "-shm"):         # the write-ahead log belongs to the same database
            if Path(path + suffix).exists():
                os.replace(path + suffix, target + suffix)
        return target
