"""Progress reporting for long work. The library calls a Reporter; the CLI draws it with rich.

Work that runs inside Spark tasks (applying generation batches, delivering commands) reports from
the executors over a tiny side channel: each event is one UDP datagram to a listener on the driver
(:class:`ProgressListener`). It is best effort by design (a lost datagram loses a progress line,
never data): what a session did is taken from the tasks' results, not from progress events.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol


class Reporter(Protocol):
    def __call__(self, message: str) -> None: ...


def silent(message: str) -> None:
    return None


class Timer:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start


Address = tuple[str, int]
_MAX_DATAGRAM = 60_000
_STOP = b"\x00stop"


class ProgressListener:
    """Receives progress events sent by Spark tasks with :func:`send_progress` and hands each one to
    ``on_event`` on a background thread. Use as a context manager; ``address`` goes to the tasks."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None], host: str = "127.0.0.1"):
        self.on_event = on_event
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.address: Address = (host, self.sock.getsockname()[1])
        self._thread = threading.Thread(target=self._loop, name="sparksync-progress", daemon=True)

    def _loop(self) -> None:
        while True:
            try:
                data, _ = self.sock.recvfrom(_MAX_DATAGRAM)
            except OSError:
                return
            if data == _STOP:
                return
            with contextlib.suppress(Exception):   # a malformed event or a failing callback loses one line
                self.on_event(json.loads(data))

    def __enter__(self) -> ProgressListener:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        # Datagrams are queued in order: the stop marker comes after every event already received.
        with contextlib.suppress(OSError):
            self.sock.sendto(_STOP, self.address)
        self._thread.join(timeout=2.0)
        self.sock.close()


def send_progress(address: Address | None, event: dict[str, Any]) -> None:
    """From a task: send one progress event to the driver's listener (never raises)."""
    if address is None:
        return
    with contextlib.suppress(OSError, TypeError, ValueError):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(json.dumps(event, default=str).encode()[:_MAX_DATAGRAM], tuple(address))


def driver_host(spark) -> str:
    """The address executors can reach the driver at (the listener binds there)."""
    try:
        master = spark.sparkContext.master
        if master.startswith("local"):
            return "127.0.0.1"
        return spark.conf.get("spark.driver.host")
    except Exception:  # noqa: BLE001 - no usable address: progress stays on the driver
        return "127.0.0.1"
