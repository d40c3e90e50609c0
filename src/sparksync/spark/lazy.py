"""The one holder of a SparkSession made on first use, importing nothing of Spark: what a merge or distribution
agent holds when its small rounds run in its own process (``[spark] driver_round_changes``) and only a bigger
round needs Spark, and what ``sparksync serve`` shares between its workers."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any


class JvmEnded(RuntimeError):
    """The session's JVM ended before it was stopped."""


class LazySpark:
    """A SparkSession given, or made by ``spark`` (a function) when first asked, under a lock: two threads asking
    at once get the same session. A start that fails (a cluster whose master cannot be reached, or that gives no
    executor within ``[spark] executor_wait_s``) is the error of the one that asked, and the answer of every one
    that was waiting for it then (they do not wait for the cluster again, one after another); the next to ask
    tries again. ``spark`` None: no Spark here (a run that needs it is an error)."""

    def __init__(self, spark: Any):
        self._session = None if spark is None or callable(spark) else spark
        self._factory = spark if callable(spark) else None
        self._lock = threading.Lock()
        self._failed: tuple[float, Exception] | None = None     # when the last start failed, and why
        self._starting: threading.Thread | None = None

    def get(self) -> Any:
        asked = time.monotonic()
        with self._lock:
            if self._session is None:
                if self._factory is None:
                    raise RuntimeError("this process was started without Spark")
                if self._failed is not None and self._failed[0] >= asked:
                    raise self._failed[1]
                try:
                    self._session = self._factory()
                except Exception as e:
                    self._failed = (time.monotonic(), e)
                    raise
                self._failed = None
            return self._session

    def ready(self) -> Any:
        """The session if it is up, else None at once, having started it in a thread of its own (a device's
        request never waits for a JVM: a round that asks meanwhile runs in this process). A start that failed
        is tried again by the next ``ready`` after it."""
        if self._session is not None or self._factory is None:
            return self._session
        if not self._lock.acquire(blocking=False):       # being started (by a thread of ours, or an agent's get)
            return None
        try:
            if self._session is not None:
                return self._session
            if self._starting is None or not self._starting.is_alive():
                self._starting = threading.Thread(target=self._start_quietly, name="sparksync spark start", daemon=True)
                self._starting.start()
            return None
        finally:
            self._lock.release()

    def _start_quietly(self) -> None:
        with contextlib.suppress(Exception):    # kept in _failed; the rounds go on in this process
            self.get()

    def wait_started(self, timeout: float) -> Any:
        """The session once a start in flight ended (None: none came within ``timeout``, or it failed)."""
        starting = self._starting
        if starting is not None:
            starting.join(timeout)
        return self._session

    def stop(self) -> None:
        """Stop the session this holder made (one it was given is its owner's to stop). A JVM that has ended
        already (its whole process group was signalled) is not sent the stop: ``JvmEnded``, and nothing logged
        by py4j's retries against a closed socket."""
        with self._lock:
            if self._session is not None and self._factory is not None:
                session, self._session = self._session, None
                proc = getattr(getattr(session.sparkContext, "_gateway", None), "proc", None)
                if proc is not None and proc.poll() is not None:
                    raise JvmEnded(f"Spark's JVM had ended (exit status {proc.returncode})")
                with _py4j_quiet():
                    session.stop()


class _FromPy4j(logging.Filter):
    """Drops what py4j itself logs on the root logger (``logging.exception`` when the JVM's socket is gone)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


@contextlib.contextmanager
def _py4j_quiet() -> Iterator[None]:
    """While a session is stopped: a JVM that ends meanwhile (signalled with the process that stops it) makes py4j
    log a traceback on the root logger; the stop's caller says it in one line instead."""
    quiet = _FromPy4j()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)
