"""Trying again what may pass: a transient error (a deadlock with an application transaction, a
lock timeout, a busy SQLite file, a dropped connection) gets a few more attempts, each after a
longer pause; a terminal one is raised at once."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from .errors import SparksyncError

T = TypeVar("T")

ATTEMPTS = 4                # a first try and three more
FIRST_PAUSE = 0.2           # seconds; doubled after each failure, with jitter (0.2, 0.4, 0.8 on average)


def with_retries(work: Callable[[], T], *, attempts: int = ATTEMPTS, first_pause: float = FIRST_PAUSE,
                 on_retry: Callable[[SparksyncError, int], None] | None = None) -> T:
    """``work()``; again (up to ``attempts`` times in all) while it fails with a transient error.
    ``work`` must be safe to repeat: one transaction that rolled back when it failed."""
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except SparksyncError as e:
            if not e.transient or attempt == attempts:
                raise
            if on_retry is not None:
                on_retry(e, attempt)
            pause = first_pause * 2 ** (attempt - 1)
            time.sleep(pause * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")
