"""Agent locks, the database side: one named lock that one process at a time holds, kept where the
publication's state lives (the publisher for merge publications, the distributor for transactional
ones), with who holds it and since when.

Which command takes which lock, and whether it waits, is policy (``sparksync/locks.py``); this module
and its two implementations (``sqlite/agent_lock.py``: a locked file next to the database;
``postgres/agent_lock.py``: a session advisory lock on a connection of its own) only hold one.
A lock is released when its holder releases it, closes it, or dies (kill -9 included).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class LockHolder:
    """Who holds an agent lock: the command, its process id and host, and since when."""

    command: str | None = None
    pid: int | None = None
    host: str | None = None
    since: dt.datetime | None = None

    @classmethod
    def me(cls, command: str) -> LockHolder:
        return cls(command, os.getpid(), socket.gethostname(), dt.datetime.now(dt.UTC))

    def describe(self, now: dt.datetime | None = None) -> str:
        """'merge (pid 1234 on host1, since 05:34:25 UTC, 12 s ago)'; what is known of it."""
        what = [f"pid {self.pid}" + (f" on {self.host}" if self.host else "")] if self.pid else []
        if self.since is not None:
            now = now or dt.datetime.now(dt.UTC)
            age = max(0, int((now - self.since).total_seconds()))
            what.append(f"since {self.since.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC, {age} s ago")
        return f"{self.command or 'another sparksync command'}" + (f" ({', '.join(what)})" if what else "")

    def to_dict(self) -> dict:
        return {"command": self.command, "pid": self.pid, "host": self.host,
                "since": self.since.isoformat() if self.since else None}

    @classmethod
    def from_dict(cls, d: dict) -> LockHolder:
        since = d.get("since")
        return cls(d.get("command"), int(d["pid"]) if d.get("pid") is not None else None, d.get("host"),
                   dt.datetime.fromisoformat(since) if since else None)


class AgentLock(Protocol):
    """One named lock in one database (made by ``Locks.agent_lock``)."""

    def try_acquire(self, holder: LockHolder) -> bool:
        """Take the lock if it is free (never waits); True when this process now holds it."""

    def holder(self) -> LockHolder | None:
        """Who holds it (None when nobody does); fields it cannot tell are None."""

    def release(self) -> None:
        """Give it back (and everything this lock opened); safe to call when not held."""
