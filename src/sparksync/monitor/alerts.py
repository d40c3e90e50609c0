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
``offline``    ``devices_offline_percent`` of a device group's devices have not synced for
               ``devices_offline_minutes`` (default 120): "12% of Tills offline for 2 h or more"
=============  ==========================================================================================

The devices enrolled into a device group fire their group's alerts, not one each: one ``error`` (``latency``,
``expiry``, ``stuck``, ``duration``, ``throughput``) alert per group counting its devices that would each fire it
and naming a few; 10,000 tills offline or failing are a line each per rule, never 10,000 alerts.

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
    name: str                      # error | latency | expiry | duration | throughput | stuck | offline
    publication: str
    subscription: str | None
    message: str
    group: str | None = None       # a device group's alert: its enrolled devices', counted (subscription None)

    @property
    def key(self) -> tuple[str, str, str | None, str | None]:
        return (self.name, self.publication, self.subscription, self.group)


@dataclass
class GroupAlerts:
    """A device group's devices that would each fire an alert, collected into one alert of the group per rule."""

    publication: str
    devices: int = 0
    offline: list[str] = field(default_factory=list)
    fired: dict[str, list[tuple[str, str]]] = field(default_factory=dict)      # rule -> [(device, why)]

    def add(self, rule: str, device: str, why: str) -> None:
        self.fired.setdefault(rule, []).append((device, why))

    def alerts(self, group: str) -> list[Alert]:
        said = {"error": "in error", "latency": "late past the latency threshold", "expiry": "expired or expiring",
                "stuck": "stuck (a backlog that does not move)"}
        out = []
        for rule, found in self.fired.items():
            examples = "; ".join(f"{d}: {why}" for d, why in found[:EXAMPLES])
            more = f"; and {len(found) - EXAMPLES:,} more" if len(found) > EXAMPLES else ""
            out.append(Alert(rule, self.publication, None, f"device group {group}: {len(found):,} of {self.devices:,} "
                             f"device(s) {said[rule]} ({examples}{more})", group))
        return out


EXAMPLES = 3                   # devices a group's alert names


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
        groups: dict[str, GroupAlerts] = {}
        for e in status.get("subscriptions", []) + tx.get("subscriptions", []):
            r = rollup["subscriptions"][e["name"]]
            pub, sub = e.get("publication", ""), e["name"]
            fired = []
            if r["state"] == "error":
                fired.append(("error", r["why"]))
            if c.latency_s is not None and r["late_s"] is not None and r["late_s"] >= c.latency_s:
                fired.append(("latency", f"its oldest waiting change is {r['late_s']:.0f}s late (it has waited "
                                         f"{r['latency_s']:.0f}s; threshold {c.latency_s:g}s)"))
            if c.expiry_fraction is not None and r["state"] in ("expired", "expiring soon"):
                left = r["expires_in_s"]
                fired.append(("expiry", "expired" if r["state"] == "expired" or left is None or left <= 0
                              else f"expires in {left / 3600:.1f} h unless it merges"))
            stuck = self._stuck(e, now)
            if stuck is not None:
                fired.append(("stuck", stuck))
            if e.get("group"):              # an enrolled device: its group's alerts count it
                g = groups.setdefault(str(e["group"]), GroupAlerts(pub))
                g.devices += 1
                for rule, why in fired:
                    g.add(rule, sub, why)
                if self._offline(e, now):
                    g.offline.append(sub)
                continue
            out += [Alert(rule, pub, sub, f"subscription {sub}: {why}") for rule, why in fired]
        for name, g in sorted(groups.items()):
            out += g.alerts(name) + self._offline_alert(name, g)
        out += self._runs(history, {e["name"]: str(e["group"]) for e in status.get("subscriptions", [])
                                    if e.get("group")})
        return out

    def _offline(self, e: dict[str, Any], now: dt.datetime) -> bool:
        """An enrolled device that has not synced for ``devices_offline_minutes`` (one that never synced is
        uninitialized, not offline)."""
        if self.config.devices_offline_percent is None or not e.get("last_sync"):
            return False
        last = dt.datetime.fromisoformat(e["last_sync"])
        last = last if last.tzinfo is not None else last.replace(tzinfo=dt.UTC)
        return (now - last).total_seconds() >= self.config.devices_offline_minutes * 60

    def _offline_alert(self, group: str, g: GroupAlerts) -> list[Alert]:
        """``devices_offline_percent`` of the group's devices offline for ``devices_offline_minutes`` or more."""
        c = self.config
        if c.devices_offline_percent is None or not g.devices:
            return []
        share = 100.0 * len(g.offline) / g.devices
        if share < c.devices_offline_percent:
            return []
        hours = c.devices_offline_minutes / 60
        named = ", ".join(g.offline[:EXAMPLES]) + (", ..." if len(g.offline) > EXAMPLES else "")
        return [Alert("offline", g.publication, None, f"{share:.0f}% of {group} offline for {hours:g} h or more "
                      f"({len(g.offline):,} of {g.devices:,} device(s) have not synced since: {named}; threshold "
                      f"{c.devices_offline_percent:g}%)", group)]

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

    def _runs(self, history: list[dict[str, Any]], groups: dict[str, str]) -> list[Alert]:
        """The duration and throughput rules over each agent's last run (``history`` newest first); an enrolled
        device's (``groups``: its device group by name) fires its group's alert, once."""
        c = self.config
        out: list[Alert] = []
        seen: set[tuple[str, str, str | None]] = set()
        fired: set[tuple[str, str, str | None, str | None]] = set()
        for run in history:
            key = (run["agent"], run["publication"], run.get("subscription"))
            if key in seen or run["agent"] == "snapshot agent":
                continue
            seen.add(key)
            secs, rows = run.get("seconds") or 0.0, int(run.get("rows") or 0)
            who = f"{run['agent']} {run['publication']}" + (f" ({run['subscription']})" if run.get("subscription") else "")
            group = groups.get(run.get("subscription") or "")
            sub = None if group is not None else run.get("subscription")
            who = who if group is None else f"device group {group}: {who}"
            found = []
            if c.merge_duration_s is not None and run["agent"] == "merge agent" and secs > c.merge_duration_s:
                found.append(("duration", f"{who}: the last run took {secs:.1f}s (threshold {c.merge_duration_s:g}s)"))
            if c.min_rows_per_s is not None and rows and secs > 0 and rows / secs < c.min_rows_per_s:
                found.append(("throughput", f"{who}: the last run moved {rows:,} row(s) at {rows / secs:,.0f} rows/s "
                                            f"(threshold {c.min_rows_per_s:g})"))
            for rule, message in found:
                alert = Alert(rule, run["publication"], sub, message, group)
                if alert.key not in fired:
                    fired.add(alert.key)
                    out.append(alert)
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
                "group": a.group, "message": redact(a.message), "since": iso(self.since), "time": iso(self.time),
                "source": "sparksync"}


@dataclass
class AlertBook:
    """What fires now, since when; ``update`` gives the events of a new evaluation."""

    firing: dict[tuple[str, str, str | None, str | None], tuple[Alert, dt.datetime]] = field(default_factory=dict)

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
