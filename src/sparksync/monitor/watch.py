"""The monitor's watch: it rolls up ``status`` and the agents' history and evaluates the alerts, keeping what
fires. With a webhook, someone must be told even when nobody looks: a thread of its own reads the state every
``[alerts] interval_s`` seconds and each fired or resolved alert goes to the webhook. Without one, the alerts
are evaluated from what the page and ``/metrics`` read anyway, when they are read (``observe``): a service
nobody looks at reads nothing more than its agents do."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any, Protocol

from sparksync.config import Topology
from sparksync.errors import ErrorInfo
from sparksync.monitor.alerts import Alert, AlertBook, Evaluator
from sparksync.monitor.rollup import cadences_of, roll_up
from sparksync.monitor.webhook import Webhook
from sparksync.progress import Reporter, silent
from sparksync.run_history import gather_history
from sparksync.spark.failures import recover
from sparksync.status import gather_status


class Agents(Protocol):
    """What the monitor reads of the service's agents' loop (``service.scheduler.Scheduler``)."""

    def alive(self) -> bool: ...

    def snapshot(self) -> list[dict[str, Any]]: ...

    def running(self) -> set[tuple[str, str | None]]: ...

    def elsewhere(self) -> str | None:
        """Which ``serve`` runs the agents while another one does ('pid 123 on host1'; ``service/leader.py``);
        None while this process does."""


class NoAgents:
    """A monitor without an agents' loop (tests, a monitor of agents run elsewhere)."""

    def alive(self) -> bool:
        return True

    def snapshot(self) -> list[dict[str, Any]]:
        return []

    def running(self) -> set[tuple[str, str | None]]:
        return set()

    def elsewhere(self) -> str | None:
        return None


class Watch:
    def __init__(self, topology: Topology, agents: Agents, report: Reporter = silent,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 leading: Callable[[], bool] = lambda: True):
        """``leading``: whether this process posts the alerts to the webhook now (one ``serve`` of several does:
        ``service/leader.py``)."""
        self.topology, self.agents, self.report, self.clock, self.leading = topology, agents, report, clock, leading
        self.evaluator = Evaluator(topology.alerts)
        self.cadences = cadences_of(topology)
        self.book = AlertBook()
        self.webhook = Webhook(topology.alerts, report)
        self.error: str | None = None           # why the last evaluation could not be made
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        if self.topology.alerts.webhook is None:
            return
        self.webhook.start()
        self._thread = threading.Thread(target=self._loop, name="sparksync alerts", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self.webhook.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.leading():
                self.evaluate()
            self._stop.wait(self.topology.alerts.interval_s)

    def evaluate(self) -> None:
        """Read the state (status, history) and evaluate the alerts on it."""
        now = self.clock()
        try:
            status = gather_status(self.topology)
            history = gather_history(self.topology)["runs"]
        except Exception as e:  # noqa: BLE001 - the watch goes on, and says it cannot see: an alert of its own
            typed = recover(e)
            error = typed.message if typed is not None else ErrorInfo.of(e).recorded()
            self._record([Alert("error", self.topology.publisher.name, None,
                                f"the monitor cannot read the replication state: {error}")], now, error)
            return
        self.observe(status, history, now)

    def observe(self, status: dict[str, Any], history: list[dict[str, Any]], now: dt.datetime | None = None,
                rollup: dict[str, dict[str, dict[str, Any]]] | None = None) -> None:
        """Evaluate the alerts on a state already read (the page's, a scrape's): the webhook told of what changed;
        ``rollup``: the state's roll-up when the caller made it already (``roll_up`` with this watch's cadences)."""
        now = now or self.clock()
        with self._lock:
            if rollup is None:
                rollup = roll_up(status, self.topology.alerts, self.agents.running(), now, self.cadences)
            alerts = self.evaluator.evaluate(status, rollup, history, now)
        self._record(alerts, now, None)

    def _record(self, alerts: list[Alert], now: dt.datetime, error: str | None) -> None:
        with self._lock:
            events = self.book.update(alerts, now)
            self.error = error
        for event in events:
            self.report(f"alert {event.status}: {event.alert.name}: {event.alert.message}")
        self.webhook.post(events)

    def active(self) -> list[dict[str, Any]]:
        with self._lock:
            return self.book.active()
