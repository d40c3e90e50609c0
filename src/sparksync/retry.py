"""Trying again what may pass: a transient error (a deadlock with an application transaction, a
lock timeout, a busy SQLite file, a dropped connection) gets a few more attempts, each after a
longer pause; a terminal one is raised at once. A try on a connection that was lost fails the same
way every time: the connections a try uses are opened again first when they were lost."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from sparksync.errors import SparksyncError

T = TypeVar("T")

ATTEMPTS = 4                # a first try and three more
FIRST_PAUSE = 0.2           # seconds; doubled after each failure, with jitter (0.2, 0.4, 0.8 on average)


class Connection(Protocol):
    """What a retry needs of a connection (``dialects.replica.Replica``)."""

    def revive(self) -> bool:
        """Open the connection again if it was lost (True when it was)."""
        ...


def with_retries(work: Callable[[], T], *, attempts: int = ATTEMPTS, first_pause: float = FIRST_PAUSE,
                 on_retry: Callable[[SparksyncError, int], None] | None = None,
                 connections: Sequence[Connection] = ()) -> T:
    """``work()``; again (up to ``attempts`` times in all) while it fails with a transient error.
    ``work`` must be safe to repeat: one transaction that rolled back when it failed (a commit that
    was under way when its connection was lost may have gone through: ``work`` must find that out, e.g.
    by its watermark). Before each try, every one of ``connections`` that was lost is opened again
    (a reconnection that fails is a transient failure of that try)."""
    for attempt in range(1, attempts + 1):
        try:
            for c in connections:
                c.revive()
            return work()
        except SparksyncError as e:
            if not e.transient or attempt == attempts:
                raise
            if on_retry is not None:
                on_retry(e, attempt)
            pause = first_pause * 2 ** (attempt - 1)
            time.sleep(pause * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")
