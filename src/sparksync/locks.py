"""Which commands may run together: the lock policy (docs/operations.md, "Locks").

Every command that writes replication state takes its publications' agent locks before it changes
anything and holds them until it is done. A merge publication has one lock, kept at the publisher;
a transactional publication has two, kept at the distributor: the log reader's and the distribution
agent's, so that those two agents run side by side. ``POLICY`` says which command takes which;
commands that only read (``status``, ``validate`` without ``--repair``, ``conflicts`` listing) take none.

A command that finds a lock held **waits** for it, saying once whom it waits for (the holder's
command, process id, host and since when), up to the lock timeout (``--lock-timeout``, default
``DEFAULT_WAIT`` seconds; 0: refuse at once); then it stops with :class:`LockBusy`, which names the
holder, having changed nothing. Locks are taken in one global order (database, then name), so two
commands never wait for each other; a command that already holds a lock (``reinit`` running
``setup``, ``setup`` writing a snapshot) takes it again at no cost (per thread). A lock is released
when its command ends, however it ends: an exception, an exit, or kill -9 (the database or the
kernel drops it with the connection or the process).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sparksync import failpoints
from sparksync.config import Topology
from sparksync.dialects import dialect_for_url
from sparksync.dialects.agent_locks import AgentLock, LockHolder
from sparksync.dialects.protocols import Locks
from sparksync.errors import SparksyncError, Terminal
from sparksync.progress import Reporter, silent

DEFAULT_WAIT = 60.0           # seconds a command waits for a held lock
POLL = 0.1                    # seconds between two tries

MERGE, LOGREADER, DISTRIBUTE = "merge agent", "log reader", "distribution agent"
FEED = "feed round"           # a web door's round of a publication (web/server/door.py): one door at a time

# command -> (the locks it takes for a merge publication, for a transactional publication)
POLICY: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "merge": ((MERGE,), ()),
    "snapshot": ((MERGE,), ()),
    "setup": ((MERGE,), (LOGREADER, DISTRIBUTE)),
    "reinit": ((MERGE,), (LOGREADER, DISTRIBUTE)),
    "cleanup": ((MERGE,), ()),
    "validate --repair": ((MERGE,), ()),
    "schema-change": ((MERGE,), (LOGREADER,)),
    "conflicts --resolve": ((MERGE,), ()),
    "logreader": ((), (LOGREADER,)),
    "distribute": ((), (DISTRIBUTE,)),
    "serve round": ((FEED,), ()),
}


class LockBusy(Terminal, SparksyncError):
    """A lock the command needs stayed held by another command for the whole lock timeout."""

    code = "busy"

    def __init__(self, message: str, holder: LockHolder | None = None, *, obj: str | None = None):
        super().__init__(message, obj=obj)
        self.holder = holder


@dataclass(frozen=True, order=True)
class Resource:
    """One agent lock: the database it lives in, its name, and the publication it guards."""

    url: str
    key: str
    publication: str
    lock: str           # MERGE | LOGREADER | DISTRIBUTE | FEED

    def describe(self) -> str:
        return f"publication {self.publication} ({self.lock} lock)"


def resources(topology: Topology, command: str, publications: Iterable[str]) -> list[Resource]:
    """The locks ``command`` takes for ``publications``, in the order they are taken."""
    merge_locks, tx_locks = POLICY[command]
    out = set()
    for name in publications:
        kind = topology.publication(name).kind
        url = topology.publisher_url if kind == "merge" else topology.distributor_url
        for lock in merge_locks if kind == "merge" else tx_locks:
            out.add(Resource(url, f"{lock}: {name}", name, lock))
    return sorted(out)


# The CLI (and the service) set how long to wait and where to say so; a library caller may too.
_WAIT: contextvars.ContextVar[float] = contextvars.ContextVar("sparksync_lock_wait", default=DEFAULT_WAIT)
_REPORT: contextvars.ContextVar[Reporter] = contextvars.ContextVar("sparksync_lock_report", default=silent)


@contextlib.contextmanager
def waiting(wait: float | None = None, report: Reporter | None = None) -> Iterator[None]:
    """Inside: commands wait up to ``wait`` seconds for a held lock, and say so through ``report``."""
    wait_token = _WAIT.set(max(0.0, float(wait))) if wait is not None else None
    report_token = _REPORT.set(report) if report is not None else None
    try:
        yield
    finally:
        if report_token is not None:
            _REPORT.reset(report_token)
        if wait_token is not None:
            _WAIT.reset(wait_token)


class _Held(threading.local):
    def __init__(self) -> None:
        self.locks: dict[tuple[str, str], tuple[int, AgentLock]] = {}


_held = _Held()


@contextlib.contextmanager
def hold(topology: Topology, command: str, publications: Iterable[str], report: Reporter | None = None,
         wait: float | None = None) -> Iterator[list[Resource]]:
    """Hold the locks ``POLICY`` gives ``command`` for ``publications`` while inside."""
    res = resources(topology, command, publications)
    wait = _WAIT.get() if wait is None else wait
    deadline = time.monotonic() + wait
    say = _both(report, _REPORT.get())
    with contextlib.ExitStack() as stack:
        fresh = [r for r in res if not held(r)]
        for r in res:
            stack.enter_context(_one(r, command, wait, deadline, say))
        if fresh:
            failpoints.hit("locks.held", command)
        yield res


def _both(a: Reporter | None, b: Reporter) -> Reporter:
    """Say it through the command's reporter and the one ``waiting`` set, once each."""
    targets = [r for r in dict.fromkeys((a, b)) if r is not None and r is not silent]

    def say(message: str) -> None:
        for r in targets:
            r(message)

    return say


def held(resource: Resource) -> bool:
    """Whether this thread holds ``resource``."""
    return (resource.url, resource.key) in _held.locks


@contextlib.contextmanager
def _one(r: Resource, command: str, wait: float, deadline: float, report: Reporter) -> Iterator[None]:
    slot = (r.url, r.key)
    if slot in _held.locks:                       # this thread holds it already: take it again
        n, lock = _held.locks[slot]
        _held.locks[slot] = (n + 1, lock)
        try:
            yield
        finally:
            n, lock = _held.locks[slot]
            _held.locks[slot] = (n - 1, lock)
        return
    dialect: Locks = dialect_for_url(r.url)
    lock = dialect.agent_lock(r.url, r.key)
    try:
        _acquire(lock, r, command, wait, deadline, report)
    except BaseException:
        lock.release()
        raise
    _held.locks[slot] = (1, lock)
    try:
        yield
    finally:
        del _held.locks[slot]
        lock.release()


def _acquire(lock: AgentLock, r: Resource, command: str, wait: float, deadline: float, report: Reporter) -> None:
    me = LockHolder.me(command)
    said: object = False
    while not lock.try_acquire(me):
        holder = lock.holder()
        who = holder.describe() if holder else "another command"
        whom = (holder.command, holder.pid) if holder else None
        if time.monotonic() >= deadline:
            waited = f"after waiting {wait:g} s" if wait else "--lock-timeout 0: not waiting"
            raise LockBusy(f"{command}: {r.describe()} is held by {who}; nothing was done ({waited}; "
                           "--lock-timeout SECONDS waits longer)", holder, obj=r.publication)
        if said != whom:
            report(f"{command}: waiting for {r.describe()}, held by {who} (up to {wait:g} s)")
            said = whom
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
    if said is not False:
        report(f"{command}: {r.describe()} taken")
