"""``GET /metrics``: Prometheus text made by a collector that reads the metadata at scrape time (``status``, the
history tables' totals and last runs) and the alerts the watch holds. Every name starts ``sparksync_``; the
labels are ``publication`` and ``subscription`` (``""`` for a publication-wide value), with ``direction``,
``hop``, ``agent``, ``status`` or ``alert`` where a value has several. Never a URL, a password or a token:
labels are configured names."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparksync.config import Topology
from sparksync.monitor.rollup import ORDER, cadences_of, roll_up
from sparksync.monitor.watch import Agents, Watch
from sparksync.run_history import gather_history, totals
from sparksync.status import gather_status

PS = ["publication", "subscription"]


def _ts(iso_text: str | None) -> float | None:
    if not iso_text:
        return None
    t = dt.datetime.fromisoformat(iso_text)
    return (t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)).timestamp()


class SparksyncCollector(Collector):
    def __init__(self, topology: Topology, agents: Agents, watch: Watch | None):
        self.topology, self.agents, self.watch = topology, agents, watch

    def collect(self) -> Iterator[Metric]:
        now = dt.datetime.now(dt.UTC)
        status = gather_status(self.topology)
        history = gather_history(self.topology)["runs"]
        if self.watch is not None:
            self.watch.observe(status, history, now)
        rollup = roll_up(status, self.topology.alerts, self.agents.running(), now, cadences_of(self.topology))
        tx = status.get("transactional") or {}
        merge_subs, tx_subs = status["subscriptions"], tx.get("subscriptions", [])

        up = GaugeMetricFamily("sparksync_agents_loop_up", "1 while the service's agents' loop is alive")
        up.add_metric([], 1.0 if self.agents.alive() else 0.0)
        yield up

        pending = GaugeMetricFamily("sparksync_pending_changes", "Changes waiting to reach the subscriber "
                                    "(download) or the publisher (upload); transactions for a transactional "
                                    "subscription", labels=[*PS, "direction"])
        failed = GaugeMetricFamily("sparksync_failed_changes", "Changes that failed and wait to be applied again",
                                   labels=[*PS, "direction"])
        lag = GaugeMetricFamily("sparksync_lag_seconds", "How long the oldest change not yet applied has waited, "
                                "per hop", labels=[*PS, "hop"])
        for s in merge_subs:
            k = [s["publication"], s["name"]]
            for d in ("download", "upload"):
                if s.get(f"pending_{d}") is not None:
                    pending.add_metric([*k, d], float(s[f"pending_{d}"]))
                if s.get(f"failed_{d}") is not None:
                    failed.add_metric([*k, d], float(s[f"failed_{d}"]))
                lag.add_metric([*k, d], float(s.get(f"oldest_pending_{d}_age") or 0.0))
        for s in tx_subs:
            k = [s["publication"], s["name"]]
            if s.get("pending_transactions") is not None:
                pending.add_metric([*k, "download"], float(s["pending_transactions"]))
            lag.add_metric([*k, "distributor_to_subscriber"], float(s.get("oldest_pending_age") or 0.0))
        for p in tx.get("publications", []):
            if p.get("state") in ("published", "stopped"):
                lag.add_metric([p["name"], "", "publisher_to_distributor"], float(p.get("oldest_unread_age") or 0.0))
        yield from (pending, failed, lag)

        valid = GaugeMetricFamily("sparksync_validation_failed", "1 while the subscription's last conclusive "
                                  "validation failed (it does not hold its partition), 0 after one passed", labels=PS)
        valid_age = GaugeMetricFamily("sparksync_validation_age_seconds", "Seconds since the subscription's last "
                                      "validation (whatever its result)", labels=PS)
        for s in merge_subs:
            if isinstance(s.get("validation"), dict):
                k = [s["publication"], s["name"]]
                valid.add_metric(k, 1.0 if s.get("diverged") else 0.0)     # whatever else its state is
                valid_age.add_metric(k, float(s.get("validation_age") or 0.0))
        yield from (valid, valid_age)

        state = GaugeMetricFamily("sparksync_subscription_status", "1 for the subscription's roll-up state (error, "
                                  "performance critical, retrying, expired, expiring soon, uninitialized, running, idle, "
                                  "offline)", labels=[*PS, "status"])
        expiry = GaugeMetricFamily("sparksync_expiry_seconds", "Seconds until the subscription expires unless it "
                                   "merges (negative: expired)", labels=PS)
        latency = GaugeMetricFamily("sparksync_latency_seconds", "The subscription's latency: how long its oldest "
                                    "waiting change has waited", labels=PS)
        late = GaugeMetricFamily("sparksync_late_seconds", "How long the subscription's oldest waiting change has "
                                 "waited past the scheduled run that should have carried it: the performance rating's "
                                 "measure (none for an offline web device)", labels=PS)
        for name, r in rollup["subscriptions"].items():
            k = [r["publication"] or "", name]
            for st in ORDER:
                state.add_metric([*k, st], 1.0 if r["state"] == st else 0.0)
            if r["expires_in_s"] is not None:
                expiry.add_metric(k, float(r["expires_in_s"]))
            latency.add_metric(k, float(r["latency_s"]))
            if r["late_s"] is not None:
                late.add_metric(k, float(r["late_s"]))
        yield from (state, expiry, latency, late)

        queued = GaugeMetricFamily("sparksync_undistributed_commands", "Commands queued at the distributor",
                                   labels=["publication"])
        for p in tx.get("publications", []):
            if p.get("queued_commands") is not None:
                queued.add_metric([p["name"]], float(p["queued_commands"]))
        yield queued

        yield from self._history(history, [(status["publications"], "snapshot agent", True),
                                  (tx.get("publications", []), "log reader", True),
                                  (merge_subs, "merge agent", False), (tx_subs, "distribution agent", False)])
        yield self._alerts()

    def _history(self, history: list[dict[str, Any]],
                 groups: list[tuple[list[dict[str, Any]], str, bool]]) -> Iterator[Metric]:
        rows = CounterMetricFamily("sparksync_rows_moved", "Rows applied by the agents' runs (merge: inserts, "
                                   "updates, deletes; transactional: commands)", labels=[*PS, "direction"])
        conflicts = CounterMetricFamily("sparksync_conflicts", "Conflicts resolved by the merge agent's runs",
                                        labels=PS)
        runs = CounterMetricFamily("sparksync_agent_runs", "Agent runs in the history tables", labels=[*PS, "agent"])
        failed = CounterMetricFamily("sparksync_agent_failed_runs", "Agent runs that failed", labels=[*PS, "agent"])
        for t in totals(self.topology):
            k = [t["publication"], t["subscription"] or ""]
            for d, n in t["rows"].items():
                rows.add_metric([*k, d], float(n))
            if t["agent"] == "merge agent":
                conflicts.add_metric(k, float(t["conflicts"]))
            runs.add_metric([*k, t["agent"]], float(t["runs"]))
            failed.add_metric([*k, t["agent"]], float(t["failed_runs"]))
        yield from (rows, conflicts, runs, failed)

        duration = GaugeMetricFamily("sparksync_agent_last_run_seconds", "How long each agent's last run took",
                                     labels=[*PS, "agent"])
        success = GaugeMetricFamily("sparksync_last_success_timestamp_seconds", "When the agent's last successful "
                                    "run ended (Unix time)", labels=[*PS, "agent"])
        seen: set[tuple[str, str, str]] = set()
        for r in history:
            key = (r["publication"], r.get("subscription") or "", r["agent"])
            if key not in seen and r.get("seconds") is not None:
                seen.add(key)
                duration.add_metric(list(key), float(r["seconds"]))
        for entries, agent, wide in groups:
            for e in entries:
                when = _ts(e.get("last_success"))
                if when is not None:
                    success.add_metric([e["name"], "", agent] if wide else [e["publication"], e["name"], agent], when)
        yield from (duration, success)

    def _alerts(self) -> Metric:
        firing = GaugeMetricFamily("sparksync_alert_firing", "1 for each alert firing now", labels=[*PS, "alert"])
        for a in self.watch.active() if self.watch else []:
            firing.add_metric([a["publication"], a["subscription"] or "", a["alert"]], 1.0)
        return firing
