"""The publisher's digests of a device's partition, read ahead of the device's ``done``.

When ``hello`` asks a device for its digests (its validation is due), the door starts reading its own of the
device's partition (``validated.publisher_digests``) on a worker thread, while the device loads its
snapshot, downloads and computes its digests; ``done`` takes them (``validated.validate_device``): where they
match the device's and nothing stands between the two, the validation passed, otherwise the publisher's rows are
read again then. A device's first sync no longer waits at its ``done`` for a read of its whole partition.

A device's upload changes the publisher: its read is dropped then, and the ``hello`` after the upload starts
another. Bounded: one reading thread per door (a read that has not started when its device's ``done`` comes is
dropped, and ``done`` reads as it always did), the reads of the last ``KEPT`` devices kept, none older than
``FRESH_FOR`` taken.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sparksync.merge.session.remote.validated import Digest

KEPT = 256             # devices whose reads are kept at once (a read is a few numbers per article)
FRESH_FOR = 600.0      # seconds a read is kept for its device's ``done``
SAME_SYNC = 30.0       # a ``hello`` this soon after the one that started a read, no upload between: the same sync

Partition = tuple[str, int | None]          # (pubid, partition id)


@dataclass(frozen=True)
class _Read:
    partition: Partition
    started: float
    future: Future


class ReadAhead:
    """The reads of the devices whose ``hello`` asked for digests, by device."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._reads: OrderedDict[str, _Read] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, device: str, partition: Partition, read: Callable[[], dict[str, Digest]]) -> None:
        """Start ``read`` of ``partition`` for ``device``, unless one of it is kept that is still under way (the
        same sync says ``hello`` again after it initialized its file: a read of a large partition started at its
        first ``hello`` is not queued behind by another) or ended less than ``SAME_SYNC`` seconds ago."""
        now = time.monotonic()
        with self._lock:
            kept = self._reads.get(device)
            if kept is not None and kept.partition == partition and now - kept.started < FRESH_FOR \
                    and (not kept.future.done() or now - kept.started < SAME_SYNC):
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="sparksync-read-ahead")
            self._reads[device] = _Read(partition, now, self._pool.submit(read))
            self._reads.move_to_end(device)
            while len(self._reads) > KEPT:
                self._reads.popitem(last=False)[1].future.cancel()
            if kept is not None:
                kept.future.cancel()

    def drop(self, device: str) -> None:
        """The device changes the publisher (its upload): what was read before is not taken."""
        with self._lock:
            kept = self._reads.pop(device, None)
        if kept is not None:
            kept.future.cancel()

    def take(self, device: str, partition: Partition) -> dict[str, Digest] | None:
        """The device's read of ``partition``, waiting for it if it is under way; None: none was started, it had not
        started yet (dropped), is of another partition or stale, or failed (the caller reads, and says why if that
        fails again). The read stays kept until it has ended: a ``done`` sent again (its first attempt's connection
        lost while it waited) waits for the same read instead of starting its own."""
        with self._lock:
            kept = self._reads.get(device)
            if kept is None or kept.partition != partition or time.monotonic() - kept.started >= FRESH_FOR \
                    or kept.future.cancel():
                self._reads.pop(device, None)
                return None
        try:
            return kept.future.result()
        except Exception:          # noqa: BLE001 -- read again by the caller, whose failure is reported
            return None
        finally:
            with self._lock:
                if self._reads.get(device) is kept:
                    del self._reads[device]

    def close(self) -> None:
        """The door stops: reads not started are dropped."""
        with self._lock:
            reads, self._reads = list(self._reads.values()), OrderedDict()
            pool, self._pool = self._pool, None
        for r in reads:
            r.future.cancel()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
