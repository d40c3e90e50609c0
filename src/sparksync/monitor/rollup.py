"""Replication Monitor's status roll-up over ``status``'s document.

Each subscription gets one state, the worst that applies, in SQL Server's order, with sparksync's offline last::

    error > performance critical > retrying > expired > expiring soon > uninitialized > running > idle > offline

and a publication the worst of its own and its subscriptions'. **error**: its agent's last run failed
(stopped), or its database is damaged, unreachable or inactive. **performance critical**: its oldest waiting
change is late by the threshold or more. **retrying**: failed changes wait to be applied again. **expired** /
**expiring soon**: it has not merged for all / ``expiry_fraction`` (default 0.8) of its publication's
retention. **uninitialized**: not set up, or a device that has not synced yet. **running**: an agent works
for it now. **offline**: a web device that has not synced for longer than its ``sync_interval`` (default 15
minutes): its changes wait for it, which is the device's business, not a fault of replication; ranked last, so
it never colours its publication, and any other state that applies (error, retrying, expiring soon, expired)
shows instead.

**Latency** is how long the oldest change not yet at the subscriber has waited (upload or download, and for a
transactional subscription the log reader's oldest unread change too); 0 when nothing waits. **Late** is how
much of it is past the run that should have carried the change (``Cadence``): a change waits for the next
scheduled run of each agent on its way, so it is late only from the latest that run can start
(``Schedule.latest_run_after``: one interval after it arrived, for ``every N``; 5 s for ``continuous``; the
cron expression's next time), through the merge agent, or the log reader then the distribution agent; for a
web device, one ``sync_interval``. A change still in its replica's open generation arrived after the agent's
last successful run for the subscription (that run closed the generation it found with changes), so it is
counted from that run at the earliest. Without a schedule (agents run by hand or by another scheduler) the
whole latency is late. The performance rating is the late time as a share of the threshold (``[alerts]
latency_s``, default 30 s, SQL Server's default latency warning): below 25 % excellent, 50 % good, 75 % fair,
100 % poor, else critical; an offline device is not rated.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparksync.config import DEFAULT_SYNC_INTERVAL, AlertsConfig, Topology
from sparksync.schedule import Schedule, parse_interval, parse_schedule

ORDER = ("error", "performance critical", "retrying", "expired", "expiring soon", "uninitialized", "running", "idle",
         "offline")
ATTENTION = ORDER[:ORDER.index("uninitialized")]       # the states that ask the operator to act (in red or amber)
DEFAULT_LATENCY_S = 30.0
DEFAULT_EXPIRY_FRACTION = 0.8
BANDS = ((0.25, "excellent"), (0.5, "good"), (0.75, "fair"), (1.0, "poor"))

ERROR_STATES = ("stopped", "damaged", "diverged", "unreachable", "inactive", "error")
UNINITIALIZED = ("not initialized", "not set up", "not published", "waiting for its device's first sync", "subscribed")


@dataclass(frozen=True)
class Cadence:
    """When a subscription's changes are carried, as the configuration says: ``carried_by``, the schedules of
    the agents a change waits for, in turn (merge: its merge agent; transactional: the log reader, then the
    distribution agent; a web device: its ``sync_interval``; none: nothing runs on a schedule); ``read_by``,
    those a transactional publication's unread change waits for (its log reader); ``sync_interval_s``, a web
    device's expected interval between syncs."""

    carried_by: tuple[Schedule, ...] = ()
    read_by: tuple[Schedule, ...] = ()
    sync_interval_s: float | None = None

    @classmethod
    def device(cls, seconds: float) -> Cadence:
        return _device_cadence(seconds)


@functools.lru_cache(maxsize=256)
def _device_cadence(seconds: float) -> Cadence:
    """A web device's cadence, made once per interval (a fleet's devices share a few)."""
    return Cadence((Schedule(f"every {seconds:g}s", "every", seconds),), (), seconds)


def cadences_of(topology: Topology) -> dict[str, Cadence]:
    """Each subscription's ``Cadence``, from its (or its publication's) ``agent_schedule`` and, for a web
    subscription, its ``sync_interval``."""
    out: dict[str, Cadence] = {}
    for s in topology.subscriptions:
        if s.transport == "web":
            out[s.name] = Cadence.device(s.sync_interval_s)
            continue
        own = _schedules(topology.schedule_of(s))
        if topology.publication(s.publication).kind == "transactional":
            reader = _schedules(topology.log_reader_schedule(s.publication))
            out[s.name] = Cadence(reader + own, reader)
        else:
            out[s.name] = Cadence(own)
    return out


def _schedules(text: str | None) -> tuple[Schedule, ...]:
    return () if text is None else (parse_schedule(text),)


def _cadence(entry: dict[str, Any], cadences: Mapping[str, Cadence] | None) -> Cadence:
    """The subscription's cadence, or, when the configuration's are not given, a web device's default."""
    if cadences is not None and entry["name"] in cadences:
        return cadences[entry["name"]]
    if entry.get("transport") == "web":         # an enrolled device's: its group's interval, as status says it
        return Cadence.device(float(entry.get("sync_interval_s") or parse_interval(DEFAULT_SYNC_INTERVAL)))
    return Cadence()


def worst(states: list[str]) -> str:
    return min(states, key=ORDER.index) if states else "idle"


def rating(late: float, threshold: float) -> str:
    share = late / threshold
    for bound, name in BANDS:
        if share < bound:
            return name
    return "critical"


def latency_of(entry: dict[str, Any], publication: dict[str, Any] | None) -> float:
    ages = [entry.get(k) for k in ("oldest_pending_download_age", "oldest_pending_upload_age", "oldest_pending_age")]
    if publication is not None:
        ages.append(publication.get("oldest_unread_age"))
    return max([float(a) for a in ages if a is not None], default=0.0)


def late_of(entry: dict[str, Any], publication: dict[str, Any] | None, cadence: Cadence, now: dt.datetime) -> float:
    """How long the subscription's oldest waiting change has waited past the latest the runs on its way could
    have carried it (``Cadence``); 0 when every change is on time or nothing waits."""
    last_run = _time(entry.get("last_success"))
    waits = [(entry.get("oldest_pending_download_age"), entry.get("download_in_open_generation"), cadence.carried_by),
             (entry.get("oldest_pending_upload_age"), entry.get("upload_in_open_generation"), cadence.carried_by),
             (entry.get("oldest_pending_age"), False, cadence.carried_by),
             ((publication or {}).get("oldest_unread_age"), False, cadence.read_by)]
    late = 0.0
    for age, in_open, hops in waits:
        if age is None:
            continue
        due = now - dt.timedelta(seconds=float(age))          # when it arrived
        if in_open and last_run is not None:                  # after the run that found the generation empty
            due = max(due, last_run)
        for hop in hops:
            due = hop.latest_run_after(due)
        late = max(late, (now - due).total_seconds())
    return late


def offline_since(entry: dict[str, Any], cadence: Cadence, now: dt.datetime) -> str | None:
    """A web device's last sync when it is longer ago than its expected interval (it is offline since then)."""
    last = entry.get("last_sync")
    if cadence.sync_interval_s is None or entry.get("transport") != "web" or not last:
        return None
    t = _time(last)
    return last if t is not None and (now - t).total_seconds() > cadence.sync_interval_s else None


def _time(at: str | None) -> dt.datetime | None:
    if not at:
        return None
    t = dt.datetime.fromisoformat(at)
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def _retention_s(publication: dict[str, Any] | None) -> float | None:
    days = (publication or {}).get("retention")
    return float(days) * 86400 if days else None


def _late_why(late: float, latency: float, threshold: float, cadence: Cadence) -> str:
    if not cadence.carried_by:
        return f"latency {latency:.0f}s >= threshold {threshold:g}s"
    every = cadence.sync_interval_s
    run = "scheduled run" if every is None else f"expected sync (every {duration(every)})"
    return f"{late:.0f}s past its {run} (latency {latency:.0f}s) >= threshold {threshold:g}s"


def subscription_state(entry: dict[str, Any], publication: dict[str, Any] | None, alerts: AlertsConfig,
                       running: bool, now: dt.datetime, cadence: Cadence | None = None) -> dict[str, Any]:
    """The roll-up of one subscription entry of ``status``: state, why, latency, late, rating, seconds to expiry
    (late and rating None for an offline device)."""
    cadence = cadence or Cadence()
    threshold = alerts.latency_s or DEFAULT_LATENCY_S
    latency = latency_of(entry, publication)
    away = offline_since(entry, cadence, now)
    late = None if away else late_of(entry, publication, cadence, now)
    expires_in = _until(entry["expires_at"], now) if entry.get("expires_at") else None
    status = entry.get("status", "")
    failed = int(entry.get("failed_upload") or 0) + int(entry.get("failed_download") or 0)
    retention = _retention_s(entry if entry.get("retention") is not None else publication)   # a device group's own
    fraction = alerts.expiry_fraction or DEFAULT_EXPIRY_FRACTION
    why = ""
    strays = entry.get("other_files") or []
    if status in ERROR_STATES:
        state = "error"
        why = "; ".join(entry.get("problems", [])) or entry.get("error") or entry.get("last_error") \
            or entry.get("message") or status
    elif strays:              # a copy of its file, or a second file, was refused: writes that are not at the publisher
        state = "error"
        why = (f"{len(strays)} file(s) that do not hold it tried to sync and were refused (last: "
               f"{strays[0]['described'] or strays[0]['file_id']}, {strays[0]['reason']})")
    elif status == "expired":
        state, why = "expired", "; ".join(entry.get("problems", []))
    elif late is not None and late >= threshold:
        state, why = "performance critical", _late_why(late, latency, threshold, cadence)
    elif failed:
        state, why = "retrying", f"{failed} failed change(s) wait to be applied again"
    elif expires_in is not None and retention and expires_in <= (1 - fraction) * retention:
        state, why = "expiring soon", f"expires in {expires_in / 3600:.1f} h"
    elif status in UNINITIALIZED:
        state, why = "uninitialized", status
    elif away:
        state, why = "offline", f"offline since {away[:19].replace('T', ' ')} UTC (expected to sync every " \
            f"{duration(cadence.sync_interval_s or 0)})"
    else:
        state = "running" if running else "idle"
    return {"state": state, "why": why, "latency_s": round(latency, 1),
            "late_s": None if late is None else round(late, 1),
            "rating": None if late is None else rating(late, threshold),
            "expires_in_s": None if expires_in is None else round(expires_in, 1),
            **({"offline_since": away} if away else {})}


def duration(seconds: float) -> str:
    """``seconds`` as a ``sync_interval`` says it (``"15m"``, ``"4h"``, ``"90s"``)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _until(at: str, now: dt.datetime) -> float:
    t = dt.datetime.fromisoformat(at)
    t = t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
    return (t - now).total_seconds()


def roll_up(status: dict[str, Any], alerts: AlertsConfig, running: set[tuple[str, str | None]],
            now: dt.datetime, cadences: Mapping[str, Cadence] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"publications": {name: roll-up}, "subscriptions": {name: roll-up}}`` over ``status``'s document;
    ``running``: (publication, subscription) of the runs in flight (subscription None: publication-wide);
    ``cadences``: each subscription's (``cadences_of``; without it nothing runs on a schedule, and a web device is
    expected every ``DEFAULT_SYNC_INTERVAL``)."""
    tx = status.get("transactional") or {}
    pubs = {p["name"]: p for p in status.get("publications", []) + tx.get("publications", [])}
    subs_out: dict[str, dict[str, Any]] = {}
    for e in status.get("subscriptions", []) + tx.get("subscriptions", []):
        p = pubs.get(e.get("publication", ""))
        is_running = (e.get("publication"), e["name"]) in running
        subs_out[e["name"]] = {"publication": e.get("publication"),
                               **subscription_state(e, p, alerts, is_running, now, _cadence(e, cadences))}
    pubs_out: dict[str, dict[str, Any]] = {}
    for name, p in pubs.items():
        own = p.get("state", "")
        states = [s["state"] for s in subs_out.values() if s["publication"] == name]
        why = ""
        if own in ("damaged", "stopped"):
            states.append("error")
            why = "; ".join(p.get("problems", [])) or p.get("last_error") or own
        elif own in UNINITIALIZED:
            states.append("uninitialized")
        elif (name, None) in running:
            states.append("running")
        state = worst(states)
        if not why:
            why = next((s["why"] for s in subs_out.values() if s["publication"] == name and s["state"] == state), "")
        pubs_out[name] = {"state": state, "why": why, "subscriptions": len([s for s in subs_out.values()
                                                                            if s["publication"] == name])}
    return {"publications": pubs_out, "subscriptions": subs_out}
