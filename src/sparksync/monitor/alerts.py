"""Alerts: the ``[alerts]`` thresholds checked against ``status``, the roll-up and the agents' history.

=============  ==========================================================================================
``error``      a subscription or publication whose roll-up is error (always on: it needs no threshold)
``latency``    a subscription's oldest waiting change late by ``latency_s`` or more: past the scheduled run
               that should have carried it (the roll-up's rule, ``rollup.late_of``); never an offline device
``expiry``     a subscription that has not merged for ``expiry_fraction`` of its retention (or expired)
``duration``   a merge agent's last run took longer than ``merge_duration_s``
``throughput`` an agent's last run that moved rows did so slower than ``min_rows_per_s``
``stuck``      a backlog above zero that made no progress for ``stuck_minutes``: the subscription's
               position (its watermarks, or the last transaction delivered) has not moved while changes
               waited, whatever the agents say of their runs
=============  ==========================================================================================

``AlertBook`` keeps what fires; each change (fired, resolved) is an event for the page, ``/metrics`` and
the webhook.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sparksync.config import AlertsConfig
from sparksync.metadata.history import iso
from sparksync.redaction import redact


@dataclass(frozen=True)
class Alert:
    name: str                      # error | latency | expiry | duration | throughput | stuck
    publication: str
    subscription: str | None
    message: str

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.name, self.publication, self.subscription)


@dataclass
class Progress:
    """What the stuck rule remembers of a subscription: its position, and since when it has not moved."""

    marker: Any
    since: dt.datetime


@dataclass
class Evaluator:
    config: AlertsConfig
    progress: dict[str, Progress] = field(default_factory=dict)

    def evaluate(self, status: dict[str, Any], rollup: dict[str, Any], history: list[dict[str, Any]],
                 now: dt.datetime) -> list[Alert]:
        c = self.config
        out: list[Alert] = []
        tx = status.get("transactional") or {}
        for name, r in rollup["publications"].items():
            if r["state"] == "error" and not any(s["publication"] == name and s["state"] == "error"
                                                 for s in rollup["subscriptions"].values()):
                out.append(Alert("error", name, None, f"publication {name}: {r['why']}"))
        for e in status.get("subscriptions", []) + tx.get("subscriptions", []):
            r = rollup["subscriptions"][e["name"]]
            pub, sub = e.get("publication", ""), e["name"]
            if r["state"] == "error":
                out.append(Alert("error", pub, sub, f"subscription {sub}: {r['why']}"))
            if c.latency_s is not None and r["late_s"] is not None and r["late_s"] >= c.latency_s:
                out.append(Alert("latency", pub, sub, f"subscription {sub}: its oldest waiting change is "
                                                      f"{r['late_s']:.0f}s late (it has waited {r['latency_s']:.0f}s; "
                                                      f"threshold {c.latency_s:g}s)"))
            if c.expiry_fraction is not None and r["state"] in ("expired", "expiring soon"):
                left = r["expires_in_s"]
                out.append(Alert("expiry", pub, sub, f"subscription {sub}: " + (
                    "expired" if r["state"] == "expired" or left is None or left <= 0
                    else f"expires in {left / 3600:.1f} h unless it merges")))
            stuck = self._stuck(e, now)
            if stuck is not None:
                out.append(Alert("stuck", pub, sub, f"subscription {sub}: {stuck}"))
        out += self._runs(history)
        return out

    def _stuck(self, e: dict[str, Any], now: dt.datetime) -> str | None:
        backlog = sum(int(e.get(k) or 0) for k in ("pending_download", "pending_upload", "pending_transactions"))
        if self.config.stuck_minutes is None:
            return None
        marker = tuple(e.get(k) for k in ("publisher_sentgen", "publisher_recgen", "subscriber_sentgen",
                                           "subscriber_recgen", "delivered_seqno", "subscriber_seqno"))
        seen = self.progress.get(e["name"])
        if backlog == 0 or seen is None or seen.marker != marker:
            self.progress[e["name"]] = Progress(marker, now)
            return None
        minutes = (now - seen.since).total_seconds() / 60
        if minutes < self.config.stuck_minutes:
            return None
        return (f"{backlog:,} change(s) wait and its position has not moved for {minutes:.0f} minute(s) "
                f"(threshold {self.config.stuck_minutes:g})")

    def _runs(self, history: list[dict[str, Any]]) -> list[Alert]:
        """The duration and throughput rules over each agent's last run (``history`` newest first)."""
        c = self.config
        out: list[Alert] = []
        seen: set[tuple[str, str, str | None]] = set()
        for run in history:
            key = (run["agent"], run["publication"], run.get("subscription"))
            if key in seen or run["agent"] == "snapshot agent":
                continue
            seen.add(key)
            secs, rows = run.get("seconds") or 0.0, int(run.get("rows") or 0)
            who = f"{run['agent']} {run['publication']}" + (f" ({run['subscription']})" if run.get("subscription") else "")
            if c.merge_duration_s is not None and run["agent"] == "merge agent" and secs > c.merge_duration_s:
                out.append(Alert("duration", run["publication"], run.get("subscription"),
                                 f"{who}: the last run took {secs:.1f}s (threshold {c.merge_duration_s:g}s)"))
            if c.min_rows_per_s is not None and rows and secs > 0 and rows / secs < c.min_rows_per_s:
                out.append(Alert("throughput", run["publication"], run.get("subscription"),
                                 f"{who}: the last run moved {rows:,} row(s) at {rows / secs:,.0f} rows/s "
                                 f"(threshold {c.min_rows_per_s:g})"))
        return out


@dataclass
class Event:
    status: str                # firing | resolved
    alert: Alert
    since: dt.datetime
    time: dt.datetime

    def to_dict(self) -> dict[str, Any]:
        a = self.alert
        return {"status": self.status, "alert": a.name, "publication": a.publication, "subscription": a.subscription,
                "message": redact(a.message), "since": iso(self.since), "time": iso(self.time),
                "source": "sparksync"}


@dataclass
class AlertBook:
    """What fires now, since when; ``update`` gives the events of a new evaluation."""

    firing: dict[tuple[str, str, str | None], tuple[Alert, dt.datetime]] = field(default_factory=dict)

    def update(self, alerts: list[Alert], now: dt.datetime) -> list[Event]:
        events = []
        current = {a.key: a for a in alerts}
        for key, (a, since) in list(self.firing.items()):
            if key not in current:
                del self.firing[key]
                events.append(Event("resolved", a, since, now))
        for key, a in current.items():
            if key not in self.firing:
                self.firing[key] = (a, now)
                events.append(Event("firing", a, now, now))
            else:
                self.firing[key] = (a, self.firing[key][1])       # the newest message, the first time
        return events

    def active(self) -> list[dict[str, Any]]:
        return [Event("firing", a, since, since).to_dict() for a, since in self.firing.values()]
