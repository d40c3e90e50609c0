"""Bulk work that allocates many short-lived objects and makes no reference cycles (a device applying a download of
tens of thousands of rows): left at its thresholds, Python's cyclic garbage collector runs a full collection over
every live object again and again while that work's objects pile up (a fifth of a 50,000-row download's time on
this project's benchmark machine). Inside ``fewer_collections`` its first threshold is raised; the thresholds in
force before come back when the last such block of the process ends (blocks in several threads nest). An
application that disabled the collector (threshold 0) is left as it is.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

FIRST = 100_000        # allocations between two young collections inside a block (Python's default: 700)

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] | None = None


@contextlib.contextmanager
def fewer_collections(first: int = FIRST) -> Iterator[None]:
    """While inside, the collector's first threshold is at least ``first``."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            if 0 < _saved[0] < first:
                gc.set_threshold(first, *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
