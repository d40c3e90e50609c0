"""``GET /metrics``: Prometheus text made by a collector that reads the metadata at scrape time (``status``, the
history tables' totals and last runs) and the alerts the watch holds. Every name starts ``sparksync_``; the
labels are ``publication`` and ``subscription`` (``""`` for a publication-wide value), with ``direction``,
``hop``, ``agent``, ``status`` or ``alert`` where a value has several. The devices enrolled into device groups
have no series of their own: ``sparksync_devices*`` count and sum them per ``group`` and ``partition``, so that
10,000 devices are as many series as their partitions. Never a URL, a password or a token: labels are configured
names, and partitions' values."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparksync.config import Topology
from sparksync.monitor.fleet import Fleet, is_device, partition_of
from sparksync.monitor.rollup import ORDER, cadences_of, roll_up
from sparksync.monitor.watch import Agents, Watch
from sparksync.run_history import gather_history, totals
from sparksync.status import gather_status

PS = ["publication", "subscription"]
FLEET = ["publication", "group", "partition"]       # an enrolled device's series: its group's


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
        merge_subs = [e for e in status["subscriptions"] if not is_device(e)]
        tx_subs = tx.get("subscriptions", [])
        enrolled = [e for e in status["subscriptions"] if is_device(e)]

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

        wal = GaugeMetricFamily("sparksync_change_capture_retained_wal_bytes", "Write-ahead log a replica's change "
                                "capture slot keeps its PostgreSQL server from recycling (change_capture = log)",
                                labels=["replica"])
        for name, c in [(status["publisher"]["name"], status["publisher"].get("change_capture"))] + [
                (s["name"], s.get("change_capture")) for s in merge_subs]:
            if isinstance(c, dict) and c.get("mode") == "log" and c.get("retained_wal_bytes") is not None:
                wal.add_metric([name], float(c["retained_wal_bytes"]))
        yield wal
        held = GaugeMetricFamily("sparksync_logreader_retained_wal_bytes", "Write-ahead log a transactional "
                                 "publication's replication slot keeps its PostgreSQL publisher from recycling: what "
                                 "the log reader has not stored yet", labels=["publication"])
        for p in tx.get("publications", []):
            if p.get("slot_lag_bytes") is not None:
                held.add_metric([p["name"]], float(p["slot_lag_bytes"]))
        yield held

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
        devices = {e["name"]: e for e in enrolled}

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
            if name in devices:
                continue
            k = [r["publication"] or "", name]
            for st in ORDER:
                state.add_metric([*k, st], 1.0 if r["state"] == st else 0.0)
            if r["expires_in_s"] is not None:
                expiry.add_metric(k, float(r["expires_in_s"]))
            latency.add_metric(k, float(r["latency_s"]))
            if r["late_s"] is not None:
                late.add_metric(k, float(r["late_s"]))
        yield from (state, expiry, latency, late)
        yield from self._fleet(Fleet.of(enrolled, rollup["subscriptions"]))

        queued = GaugeMetricFamily("sparksync_undistributed_commands", "Commands queued at the distributor",
                                   labels=["publication"])
        for p in tx.get("publications", []):
            if p.get("queued_commands") is not None:
                queued.add_metric([p["name"]], float(p["queued_commands"]))
        yield queued

        yield from self._history(history, [(status["publications"], "snapshot agent", True),
                                  (tx.get("publications", []), "log reader", True),
                                  (merge_subs, "merge agent", False), (tx_subs, "distribution agent", False)],
                                 devices)
        yield self._alerts()

    def _fleet(self, fleet: Fleet) -> Iterator[Metric]:
        """The enrolled devices per device group and partition: bounded by the partitions, not the devices."""
        labels = FLEET
        count = GaugeMetricFamily("sparksync_devices", "Enrolled devices in each roll-up state (error, performance "
                                  "critical, retrying, expired, expiring soon, uninitialized, running, idle, offline), "
                                  "per device group and partition", labels=[*labels, "status"])
        diverged = GaugeMetricFamily("sparksync_devices_diverged", "Enrolled devices whose last conclusive validation "
                                     "failed", labels=labels)
        pending = GaugeMetricFamily("sparksync_devices_pending_changes", "Changes waiting at the publisher for the "
                                    "group's devices in the partition (their sum)", labels=labels)
        failed = GaugeMetricFamily("sparksync_devices_failed_changes", "The devices' changes that failed at the "
                                   "publisher and wait to be applied again (their sum)", labels=labels)
        lag = GaugeMetricFamily("sparksync_devices_lag_seconds", "How long the oldest change waiting for one of the "
                                "devices has waited (the longest)", labels=labels)
        for group, partition, t in fleet.worst_partitions(None):
            k = [fleet.publications.get(group, ""), group, partition]
            for st in ORDER:
                count.add_metric([*k, st], float(t.states.get(st, 0)))
            diverged.add_metric(k, float(t.diverged))
            pending.add_metric(k, float(t.pending))
            failed.add_metric(k, float(t.failed))
            lag.add_metric(k, t.lag_s)
        yield from (count, diverged, pending, failed, lag)

    def _history(self, history: list[dict[str, Any]], groups: list[tuple[list[dict[str, Any]], str, bool]],
                 devices: dict[str, dict[str, Any]]) -> Iterator[Metric]:
        """The history's counters per publication and subscription; an enrolled device's summed into its group and
        partition (``sparksync_devices_*``)."""
        rows = CounterMetricFamily("sparksync_rows_moved", "Rows applied by the agents' runs (merge: inserts, "
                                   "updates, deletes; transactional: commands)", labels=[*PS, "direction"])
        conflicts = CounterMetricFamily("sparksync_conflicts", "Conflicts resolved by the merge agent's runs",
                                        labels=PS)
        runs = CounterMetricFamily("sparksync_agent_runs", "Agent runs in the history tables", labels=[*PS, "agent"])
        failed = CounterMetricFamily("sparksync_agent_failed_runs", "Agent runs that failed", labels=[*PS, "agent"])
        fleet_rows: dict[tuple[str, str, str, str], float] = {}
        fleet_runs: dict[tuple[str, str, str, str], float] = {}
        for t in totals(self.topology):
            device = devices.get(t["subscription"] or "")
            if device is not None:
                where = (t["publication"], str(device["group"]), partition_of(device))
                for d, n in t["rows"].items():
                    fleet_rows[(*where, d)] = fleet_rows.get((*where, d), 0.0) + float(n)
                for what in ("runs", "failed_runs"):
                    fleet_runs[(*where, what)] = fleet_runs.get((*where, what), 0.0) + float(t[what])
                continue
            k = [t["publication"], t["subscription"] or ""]
            for d, n in t["rows"].items():
                rows.add_metric([*k, d], float(n))
            if t["agent"] == "merge agent":
                conflicts.add_metric(k, float(t["conflicts"]))
            runs.add_metric([*k, t["agent"]], float(t["runs"]))
            failed.add_metric([*k, t["agent"]], float(t["failed_runs"]))
        yield from (rows, conflicts, runs, failed)
        labels = FLEET
        device_rows = CounterMetricFamily("sparksync_devices_rows_moved", "Rows moved by the syncs of the group's "
                                          "devices in the partition", labels=[*labels, "direction"])
        device_runs = CounterMetricFamily("sparksync_devices_syncs", "Syncs of the group's devices in the partition, "
                                          "and those that failed", labels=[*labels, "outcome"])
        for key, n in sorted(fleet_rows.items()):
            device_rows.add_metric(list(key), n)
        for (publication, group, partition, what), n in sorted(fleet_runs.items()):
            device_runs.add_metric([publication, group, partition, "all" if what == "runs" else "failed"], n)
        yield from (device_rows, device_runs)

        duration = GaugeMetricFamily("sparksync_agent_last_run_seconds", "How long each agent's last run took",
                                     labels=[*PS, "agent"])
        success = GaugeMetricFamily("sparksync_last_success_timestamp_seconds", "When the agent's last successful "
                                    "run ended (Unix time)", labels=[*PS, "agent"])
        last_runs: set[tuple[str, str, str]] = set()
        for r in history:
            run = (r["publication"], r.get("subscription") or "", r["agent"])
            if run not in last_runs and r.get("seconds") is not None and run[1] not in devices:
                last_runs.add(run)
                duration.add_metric(list(run), float(r["seconds"]))
        for entries, agent, wide in groups:
            for e in entries:
                when = _ts(e.get("last_success"))
                if when is not None:
                    success.add_metric([e["name"], "", agent] if wide else [e["publication"], e["name"], agent], when)
        yield from (duration, success)

    def _alerts(self) -> Metric:
        firing = GaugeMetricFamily("sparksync_alert_firing", "1 for each alert firing now (a device group's: its "
                                   "group, subscription \"\")", labels=[*PS, "group", "alert"])
        for a in self.watch.active() if self.watch else []:
            firing.add_metric([a["publication"], a["subscription"] or "", a.get("group") or "", a["alert"]], 1.0)
        return firing
