"""SQLite's agent lock: an exclusive ``flock`` on a file next to the database, which says who holds it
(JSON: command, pid, host, since). The kernel drops the lock when the process dies. An in-memory
database's lock is one of its process.

``SQLiteLocks`` is the dialect's ``Locks``: it makes one."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
from typing import IO

from sparksync.dialects.agent_locks import AgentLock, LockHolder
from sparksync.dialects.sqlite.driver import sqlite_path
from sparksync.errors import ConnectionFailed


def lock_path(database: str, key: str) -> str:
    return f"{database}.{hashlib.sha1(key.encode()).hexdigest()[:12]}.lock"


class FileLock:
    def __init__(self, database: str, key: str):
        self.path = lock_path(database, key)
        self._fh: IO[str] | None = None

    def try_acquire(self, holder: LockHolder) -> bool:
        assert self._fh is None, "already held"
        while True:
            try:
                fh = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release
            except OSError as e:      # no such folder, no right to write there: said, not a traceback
                raise ConnectionFailed(f"cannot take the agent lock {self.path}: {e.strerror}", obj=self.path) from None
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.close()
                return False
            try:        # the holder before us removed the file after we opened it: lock the new one
                same = os.fstat(fh.fileno()).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            fh.close()
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps(holder.to_dict()))
        fh.flush()
        self._fh = fh
        return True

    def holder(self) -> LockHolder | None:
        try:
            fh = open(self.path, encoding="utf-8")  # noqa: SIM115
        except FileNotFoundError:
            return None
        with fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:       # held: say by whom (empty for the instant before its holder writes)
                try:
                    return LockHolder.from_dict(json.loads(fh.read() or "{}"))
                except (ValueError, KeyError, TypeError):
                    return LockHolder()
            fcntl.flock(fh, fcntl.LOCK_UN)
            return None

    def release(self) -> None:
        fh, self._fh = self._fh, None
        if fh is None:
            return
        with contextlib.suppress(OSError):
            os.remove(self.path)      # before unlocking: a waiter that opened it sees it is gone
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


class ProcessLock:
    """An in-memory database lives in one process: its lock is one of that process."""

    _held: dict[str, LockHolder] = {}
    _mutex = threading.Lock()

    def __init__(self, key: str):
        self.key = key
        self._mine = False

    def try_acquire(self, holder: LockHolder) -> bool:
        with self._mutex:
            if self.key in self._held:
                return False
            self._held[self.key] = holder
            self._mine = True
            return True

    def holder(self) -> LockHolder | None:
        return self._held.get(self.key)

    def release(self) -> None:
        if self._mine:
            with self._mutex:
                self._held.pop(self.key, None)
            self._mine = False


class SQLiteLocks:
    """``Locks`` on SQLite: a locked file next to the database (in memory: a lock of this process)."""

    def agent_lock(self, url: str, key: str) -> AgentLock:
        path = sqlite_path(url)
        return ProcessLock(key) if path == ":memory:" else FileLock(path, key)
