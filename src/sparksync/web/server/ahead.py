"""Rounds ahead of the devices: ``serve`` runs its door's rounds (``door.Door.round``) on its own, every
``[server] round_ahead_s`` seconds (default ``AHEAD_EVERY``; 0: never), so that what HQ, an agent or a device
committed is closed, evaluated and written to the partition feed before the devices ask for it: a device's download
then only sends the feed's files.

A round with nothing to do costs one read (the publisher's tracking mark); a round that finds changes runs in this
thread, and a device's request that arrives meanwhile waits for it only for what it has left to do (a download still
sees every change committed before it asked). A round that fails (the publisher unreachable) is said once, with
why, and tried again every interval; its recovery is said once too. Several doors: each runs its rounds ahead, and
the feed round lock makes one of them compute each round.
"""

from __future__ import annotations

import threading

from sparksync.errors import SparksyncError
from sparksync.progress import Reporter, silent
from sparksync.redaction import redact
from sparksync.web.server.door import Door

AHEAD_EVERY = 0.5        # seconds between two rounds ahead (each costs one read when nothing changed)


class RoundsAhead:
    """A thread that runs ``door``'s rounds of every publication it serves devices of."""

    def __init__(self, door: Door, report: Reporter = silent, every: float = AHEAD_EVERY):
        self.door, self.report, self.every = door, report, every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.every or not self.door.served_publications():
            return
        self._thread = threading.Thread(target=self._loop, name="sparksync rounds ahead", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """No round starts any more; waits up to ``timeout`` for the one in flight."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        said: str | None = None
        while not self._stop.is_set():
            for publication in self.door.served_publications():
                if self._stop.is_set():
                    return
                try:
                    self.door.round(publication)
                    now = None
                except Exception as e:  # noqa: BLE001 - the publisher unreachable, a round that failed: said once
                    why = e.message if isinstance(e, SparksyncError) else f"{type(e).__name__}: {e}"
                    now = f"serve: a round ahead of the devices failed ({redact(why)}); trying again every " \
                          f"{self.every:g}s (devices' downloads run their own)"
                if now is not None and now != said:
                    self.report(now)
                elif now is None and said is not None:
                    self.report("serve: rounds ahead of the devices run again")
                said = now
            self._stop.wait(self.every)
