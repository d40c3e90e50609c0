"""What the monitor's page shows, read at request time: ``status`` rolled up, the agents' loop (last and
next run), the agents' history, conflicts per day, tracer token latencies, the alerts firing; the enrolled devices
per device group and partition (``fleet.py``), and those a search finds."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparksync.config import Topology
from sparksync.errors import SparksyncError
from sparksync.merge.conflicts.view import list_conflicts
from sparksync.metadata.history import iso
from sparksync.monitor.devices import devices
from sparksync.monitor.fleet import Fleet, is_device
from sparksync.monitor.rollup import cadences_of, duration, roll_up, worst
from sparksync.monitor.watch import Agents, Watch
from sparksync.run_history import gather_history, runs_of
from sparksync.status import gather_status
from sparksync.transactional.status import tracer

TOKENS = 30             # tracer tokens per publication on the latency chart
RUNS = 25               # agent runs in the history table
FOUND = 50              # devices a search lists
HISTORIES = 5           # of which the first few with their last runs
HISTORY = 10            # runs each
LINES = 20              # enrolled devices' problems listed (the rest counted)


def _conflicts_per_day(topology: Topology, now: dt.datetime) -> dict[str, int]:
    """Conflicts logged in the last 24 hours, per subscription."""
    out: dict[str, int] = {}
    if not topology.publications_of_kind("merge"):
        return out
    try:
        rows = list_conflicts(topology)
    except SparksyncError:
        return out
    for r in rows:
        t = r.get("create_time")
        if t is None:
            continue
        t = dt.datetime.fromisoformat(str(t)) if not isinstance(t, dt.datetime) else t
        t = t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
        if now - t <= dt.timedelta(days=1):
            out[r["subscription"]] = out.get(r["subscription"], 0) + 1
    return out


def latency_series(topology: Topology) -> dict[str, list[tuple[str, float]]]:
    """Per ``publication/subscription``: (time the token reached the distributor, seconds from the publisher to
    the subscriber) of the recent tracer tokens, oldest first."""
    out: dict[str, list[tuple[str, float]]] = {}
    for p in topology.publications_of_kind("transactional"):
        try:
            reports = tracer.recent(topology, p.name, TOKENS)
        except SparksyncError:
            continue
        for r in reversed(reports):
            for s, at in r.subscribers.items():
                if at is not None and r.publisher_commit is not None and r.distributor_commit is not None:
                    out.setdefault(f"{p.name}/{s}", []).append(
                        (iso(r.distributor_commit) or "", (at - r.publisher_commit).total_seconds()))
    return out


def _eta(history: list[dict[str, Any]], subscription: str, pending: int | None) -> float | None:
    """Seconds to apply ``pending`` transactions at the subscription's recent rate (its distribution runs that
    moved some)."""
    if not pending:
        return None
    runs = [r for r in history if r["agent"] == "distribution agent" and r.get("subscription") == subscription
            and r.get("transactions") and r.get("seconds")][:10]
    tx = sum(int(r["transactions"]) for r in runs)
    secs = sum(float(r["seconds"]) for r in runs)
    return round(pending * secs / tx, 1) if tx and secs else None


def _found(topology: Topology, status: dict[str, Any], entries: dict[str, dict[str, Any]], search: str | None
           ) -> dict[str, Any] | None:
    """The enrolled devices that ``search`` finds (name, partition, login or file), the first ``FOUND`` of them
    with their state, and the last runs of the first ``HISTORIES``."""
    if not search:
        return None
    found = devices(topology, status, search=search)
    shown = []
    for i, d in enumerate(found[:FOUND]):
        e = entries.get(d.name) or {}
        shown.append({**d.to_dict(), "rollup": e.get("rollup") or {"state": d.state, "why": d.why},
                      "pending_download": e.get("pending_download"),
                      "sync_interval": duration(e["sync_interval_s"]) if e.get("sync_interval_s") else None,
                      "runs": runs_of(topology, d.name, HISTORY) if i < HISTORIES else None})
    return {"q": search, "total": len(found), "devices": shown}


def _bounded(lines: list[str], more: str) -> list[str]:
    return lines if len(lines) <= LINES else [*lines[:LINES], f"... and {len(lines) - LINES:,} more: {more}"]


def build_view(topology: Topology, agents: Agents, watch: Watch | None, search: str | None = None) -> dict[str, Any]:
    """What the page shows; ``search``: find enrolled devices (their state and last runs)."""
    now = dt.datetime.now(dt.UTC)
    status = gather_status(topology)
    history = gather_history(topology)
    running = agents.running()
    rollup = roll_up(status, topology.alerts, running, now, watch.cadences if watch else cadences_of(topology))
    if watch is not None:
        watch.observe(status, history["runs"], now, rollup)
    per_day = _conflicts_per_day(topology, now)
    loop = agents.snapshot()
    tx = status.get("transactional") or {}

    def loop_runs(publication: str, subscription: str | None) -> tuple[str | None, str | None]:
        """(last, next) run of the loop's worker serving it."""
        last = nxt = None
        for w in loop:
            if w["publication"] != publication:
                continue
            for g in w["groups"]:
                if subscription is None or subscription in g["subscriptions"]:
                    nxt = min(filter(None, [nxt, g["next_run"]]), default=None)
            if w["last"] and (subscription is None or subscription in w["last"]["subscriptions"]
                              or not w["last"]["subscriptions"]):
                last = max(filter(None, [last, w["last"]["start"]]), default=None)
        return last, nxt

    subscriptions, enrolled = [], {}
    for e in status.get("subscriptions", []) + tx.get("subscriptions", []):
        r = rollup["subscriptions"][e["name"]]
        if is_device(e):               # rolled up per group and partition below, never a row each
            enrolled[e["name"]] = {**e, "rollup": r}
            continue
        last, nxt = loop_runs(e.get("publication", ""), e["name"])
        pending_tx = e.get("pending_transactions")
        subscriptions.append({**e, "rollup": r, "conflicts_per_day": per_day.get(e["name"], 0), "loop_last_run": last,
                              "next_run": nxt, "eta_s": _eta(history["runs"], e["name"], pending_tx)})
    fleet = Fleet.of(enrolled.values(), rollup["subscriptions"])
    publications = []
    for p in status.get("publications", []) + tx.get("publications", []):
        last, nxt = loop_runs(p["name"], None)
        publications.append({**p, "rollup": rollup["publications"].get(p["name"], {"state": "idle", "why": ""}),
                             "loop_last_run": last, "next_run": nxt})
    sessions = [r for r in history["runs"] if r["agent"] == "merge agent" and r.get("articles")][:10]
    damaged = [f"{kind} {e['name']}: {line}" for kind, entries in
               (("publication", publications), ("subscription", subscriptions))
               for e in entries for line in e.get("problems", [])]
    damaged += _bounded([f"device {e['name']} (group {e['group']}): {line}" for e in enrolled.values()
                         for line in e.get("problems", [])], "'sparksync devices --state error' lists them")
    waiting = [f"publisher: {w}" for w in status["publisher"].get("waiting", [])] + \
        [f"{s['name']}: {w}" for s in subscriptions for w in s.get("waiting", [])]
    overall = worst([p["rollup"]["state"] for p in publications])
    return {
        "time": iso(now), "publisher": status["publisher"], "distributor": tx.get("distributor"),
        "overall": overall, "publications": publications, "subscriptions": subscriptions,
        "web": [{**s, "sync_interval": duration(s["sync_interval_s"])}
                for s in subscriptions if s.get("transport") == "web"],
        "fleet": fleet, "partitions": fleet.worst_partitions(), "found": _found(topology, status, enrolled, search),
        "history": history["runs"][:RUNS], "history_errors": history["errors"], "sessions": sessions,
        "damaged": damaged, "waiting": waiting, "latency": latency_series(topology),
        "alerts": watch.active() if watch else [], "alerts_error": watch.error if watch else None,
        "loop": loop, "loop_alive": agents.alive(), "agents_elsewhere": agents.elsewhere(),
        "problems": status["problems"],
    }

