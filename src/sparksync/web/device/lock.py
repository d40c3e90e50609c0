"""One sync of a device file at a time, across processes: the application's background sync, a ``sparksync
sync`` from a shell and a second copy of the application take ``<file>.sync-lock`` (an advisory lock of the
kernel: released however the holder ends, kill -9 included) and wait for each other."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from sparksync.errors import DeviceBusy

POLL = 0.05


@contextlib.contextmanager
def sync_lock(url: str, wait: float) -> Iterator[None]:
    """Held while a sync of the SQLite file ``url`` runs; waits up to ``wait`` seconds for another holder, then
    ``DeviceBusy`` naming it. A PostgreSQL device database needs none here (its sync's own locks serialize it)."""
    if not url.startswith("sqlite:///"):
        yield
        return
    path = Path(url.removeprefix("sqlite:///") + ".sync-lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
                    raise DeviceBusy(f"{path.with_suffix('')}: another sync of this file is running ({holder}); "
                                     "try again when it ends", obj=str(path)) from None
                time.sleep(POLL)        # the kernel's lock has no timeout of its own
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()}".encode(), 0)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
