"""Which ``serve`` runs the agents: several ``serve`` processes of one publisher (door processes behind a load
balancer, on one host or several) all serve devices, and exactly one of them runs the scheduled agents and posts
the alerts to the webhook: the one holding the publisher's *service lock* (an agent lock, ``dialects/agent_locks.py``:
a locked file next to a SQLite publisher, an advisory lock of PostgreSQL). The others try to take it every
``TRY_EVERY`` seconds, so when the one running the agents stops or dies (the kernel or the database drops its lock)
another takes them over within that time.
"""

from __future__ import annotations

import threading

from sparksync.config import Topology
from sparksync.dialects import dialect_for_url
from sparksync.dialects.agent_locks import AgentLock, LockHolder
from sparksync.dialects.protocols import Locks
from sparksync.errors import SparksyncError
from sparksync.progress import Reporter, silent
from sparksync.redaction import redact

SERVICE_LOCK = "serve: agents and alerts"
TRY_EVERY = 2.0          # seconds between two tries of a serve that does not hold the service lock


class Leadership:
    """The service lock, taken (and taken again after it was lost) by a thread of its own while running."""

    def __init__(self, topology: Topology, report: Reporter = silent):
        self.topology, self.report = topology, report
        self._leading = threading.Event()
        self._elsewhere: str | None = None     # who holds the lock while another process does
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sparksync service lock", daemon=True)
        self._thread.start()

    def leading(self) -> bool:
        """This process runs the agents and the alerts."""
        return self._leading.is_set()

    def elsewhere(self) -> str | None:
        """Which process runs the agents while another one does ('pid 123 on host1'); None while this one does,
        or before the lock was tried."""
        return None if self.leading() else self._elsewhere

    def stop(self) -> None:
        """Give the lock up (after the agents stopped: the next holder never meets a run of ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)

    def _loop(self) -> None:
        url = self.topology.publisher_url
        dialect: Locks = dialect_for_url(url)
        lock: AgentLock = dialect.agent_lock(url, SERVICE_LOCK)
        said: str | None = None           # what this process said last of the lock (said once each)
        try:
            while not self._stop.is_set():
                try:
                    if lock.try_acquire(LockHolder.me("serve")):
                        self.report("serve: the agents and alerts run in this process" +
                                    (" from now on" if said is not None else ""))
                        self._leading.set()
                        self._elsewhere = None
                        self._stop.wait()
                        return
                    holder = lock.holder()
                    who = f"pid {holder.pid} on {holder.host}" if holder is not None and holder.pid else "another serve"
                    self._elsewhere = who
                    now = f"serve: the agents and alerts run in another serve ({who}); this process serves devices, " \
                          "and takes them over when that one stops"
                except SparksyncError as e:
                    now = f"serve: the service lock cannot be taken ({redact(e.message)}); trying again every {TRY_EVERY:g}s"
                if now != said:
                    self.report(now)
                said = now
                self._stop.wait(TRY_EVERY)
        finally:
            self._leading.clear()
            lock.release()
