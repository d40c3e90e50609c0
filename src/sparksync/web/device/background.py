"""A device synced in the background of its application: on an interval, soon after a local write (debounced),
with backoff after a failure (a failed upload is tried again then, not at the next local write), one sync at a
time (``lock.py``: across processes too), stopped cleanly (a sync in flight finishes).

A local write is seen without reading the application's tables: a SQLite file's ``PRAGMA data_version`` (it
moves when another connection commits) is looked at every ``POLL`` seconds, and when it moved, whether the
triggers' log (``MSmerge_pending``) holds an entry, which only the application's writes put there."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from sparksync.dialects.sqlite import cipher
from sparksync.dialects.sqlite.driver import driver_errors
from sparksync.errors import SparksyncError

POLL = 0.25                 # seconds between two looks at the file for a local write


class LocalWrites:
    """Whether the application wrote to the SQLite file ``path`` since the last look (a connection of its own,
    read only)."""

    def __init__(self, path: str):
        self.path = path
        self.db: Any = None          # sqlite3's connection, or SQLCipher's (an encrypted file)
        self.version: int | None = None

    def __call__(self) -> bool:
        try:
            if self.db is None:
                if not os.path.exists(self.path):
                    return False
                self.db = cipher.connect(self.path, check_same_thread=False) if cipher.keyed(self.path) else \
                    sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            version = int(self.db.execute("PRAGMA data_version").fetchone()[0])
            if version == self.version:
                return False
            self.version = version
            return bool(self.db.execute("SELECT EXISTS (SELECT 1 FROM MSmerge_pending)").fetchone()[0])
        except driver_errors() + (SparksyncError,):   # no file yet, or no tracking yet (before the first sync)
            self.close()
            return False

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


class Background:
    """``sync`` run in a thread: first at once, then every ``interval`` seconds, ``debounce`` seconds after a
    local write (``local_writes``) or ``poke``, and after a failure twice the last wait (the first: twice the
    interval; up to ``max_backoff``) until one succeeds."""

    def __init__(self, sync: Callable[[], Any], name: str, *, interval: float, debounce: float, max_backoff: float,
                 local_writes: Callable[[], bool] | None = None, on_sync: Callable[[Any], None] | None = None,
                 on_error: Callable[[SparksyncError], None] | None = None):
        self.sync, self.name = sync, name
        self.interval, self.debounce, self.max_backoff = interval, debounce, max_backoff
        self.local_writes, self.on_sync, self.on_error = local_writes, on_sync, on_error
        self._stop, self._poked = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"device {self.name} is already syncing in the background")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"sparksync device {self.name}", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """The application wrote: sync ``debounce`` seconds from now (unless one is due sooner)."""
        self._poked.set()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._poked.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        due = time.monotonic()
        backoff = 0.0
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now < due:
                    self._poked.wait(min(POLL, due - now))
                    if self._poked.is_set() and not self._stop.is_set():
                        self._poked.clear()
                        due = min(due, time.monotonic() + self.debounce)
                    elif backoff == 0 and self.local_writes is not None and self.local_writes():
                        due = min(due, time.monotonic() + self.debounce)
                    continue
                try:
                    summary = self.sync()
                except SparksyncError as e:
                    backoff = min(max(backoff, self.interval) * 2, self.max_backoff)
                    due = time.monotonic() + backoff
                    if self.on_error is not None:
                        self.on_error(e)
                else:
                    backoff = 0.0
                    due = time.monotonic() + self.interval
                    if self.on_sync is not None:
                        self.on_sync(summary)
        finally:
            if isinstance(self.local_writes, LocalWrites):
                self.local_writes.close()
