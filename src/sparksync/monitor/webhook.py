"""The alerts' webhook: each event POSTed once as JSON (``alerts.Event.to_dict``) from a thread of its own,
so a slow or dead receiver never holds an agent or the monitor. A failed POST (a connection error, a
timeout, a 5xx or 429) is tried again after 1, 2, 4 ... seconds (at most 60) up to ``webhook_retries``
times; a 4xx other than 429 is the receiver refusing it and is not retried. Events keep their order."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx

from sparksync.config import AlertsConfig
from sparksync.monitor.alerts import Event
from sparksync.progress import Reporter, silent
from sparksync.redaction import redact

MAX_BACKOFF = 60.0


@dataclass
class Webhook:
    config: AlertsConfig
    report: Reporter = silent
    sent: int = 0
    failed: int = 0
    _queue: queue.Queue = field(default_factory=queue.Queue)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        if self.config.webhook is None:
            return
        self._thread = threading.Thread(target=self._loop, name="sparksync webhook", daemon=True)
        self._thread.start()

    def post(self, events: list[Event]) -> None:
        if self.config.webhook is not None:
            for e in events:
                self._queue.put(e.to_dict())

    def stop(self, grace: float = 5.0) -> None:
        """Deliver what is queued for up to ``grace`` seconds, then give up the rest."""
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(grace)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _loop(self) -> None:
        with httpx.Client(timeout=self.config.webhook_timeout_s, follow_redirects=False) as client:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                self._deliver(client, item)

    def _deliver(self, client: httpx.Client, body: dict[str, Any]) -> None:
        url = self.config.webhook
        assert url is not None
        why = ""
        for attempt in range(self.config.webhook_retries + 1):
            if attempt and self._stop.wait(min(2.0 ** (attempt - 1), MAX_BACKOFF)):
                break
            try:
                r = client.post(url, json=body, headers={"User-Agent": "sparksync-alerts"})
            except httpx.HTTPError as e:
                why = type(e).__name__
                continue
            if r.status_code < 300:
                self.sent += 1
                return
            why = f"HTTP {r.status_code}"
            if r.status_code < 500 and r.status_code != 429:
                break
        self.failed += 1
        self.report(redact(f"alerts: the webhook did not take the {body['status']} {body['alert']} alert of "
                           f"{body['publication']} ({why}); it is on the monitor's page"))
