"""Replication Monitor's status roll-up over ``status``'s document.

Each subscription gets one state, the worst that applies, in SQL Server's order::

    error > performance critical > retrying > expired > expiring soon > uninitialized > running > idle

and a publication the worst of its own and its subscriptions'. **error**: its agent's last run failed
(stopped), or its database is damaged, unreachable or inactive. **performance critical**: its latency is
at or above the threshold. **retrying**: failed changes wait to be applied again. **expired** / **expiring
soon**: it has not merged for all / ``expiry_fraction`` (default 0.8) of its publication's retention.
**uninitialized**: not set up, or a device that has not synced yet. **running**: an agent works for it now.

Latency is how long the oldest change not yet at the subscriber has waited (upload or download, and for a
transactional subscription the log reader's oldest unread change too); 0 when nothing waits. The
performance rating is the latency as a share of the threshold (``[alerts] latency_s``, default 30 s, SQL
Server's default latency warning): below 25 % excellent, 50 % good, 75 % fair, 100 % poor, else critical.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparksync.config import AlertsConfig

ORDER = ("error", "performance critical", "retrying", "expired", "expiring soon", "uninitialized", "running", "idle")
DEFAULT_LATENCY_S = 30.0
DEFAULT_EXPIRY_FRACTION = 0.8
BANDS = ((0.25, "excellent"), (0.5, "good"), (0.75, "fair"), (1.0, "poor"))

ERROR_STATES = ("stopped", "damaged", "unreachable", "inactive", "error")
UNINITIALIZED = ("not initialized", "not set up", "not published", "waiting for its device's first sync", "subscribed")


def worst(states: list[str]) -> str:
    return min(states, key=ORDER.index) if states else "idle"


def rating(latency: float, threshold: float) -> str:
    share = latency / threshold
    return next((name for bound, name in BANDS if share < bound), "critical")


def latency_of(entry: dict[str, Any], publication: dict[str, Any] | None) -> float:
    ages = [entry.get(k) for k in ("oldest_pending_download_age", "oldest_pending_upload_age", "oldest_pending_age")]
    if publication is not None:
        ages.append(publication.get("oldest_unread_age"))
    return max([float(a) for a in ages if a is not None], default=0.0)


def _retention_s(publication: dict[str, Any] | None) -> float | None:
    days = (publication or {}).get("retention")
    return float(days) * 86400 if days else None


def subscription_state(entry: dict[str, Any], publication: dict[str, Any] | None, alerts: AlertsConfig,
                       running: bool, now: dt.datetime) -> dict[str, Any]:
    """The roll-up of one subscription entry of ``status``: state, why, latency, rating, seconds to expiry."""
    threshold = alerts.latency_s or DEFAULT_LATENCY_S
    latency = latency_of(entry, publication)
    expires_in = _until(entry["expires_at"], now) if entry.get("expires_at") else None
    status = entry.get("status", "")
    failed = int(entry.get("failed_upload") or 0) + int(entry.get("failed_download") or 0)
    retention = _retention_s(publication)
    fraction = alerts.expiry_fraction or DEFAULT_EXPIRY_FRACTION
    why = ""
    if status in ERROR_STATES:
        state = "error"
        why = "; ".join(entry.get("problems", [])) or entry.get("error") or entry.get("last_error") \
            or entry.get("message") or status
    elif status == "expired":
        state, why = "expired", "; ".join(entry.get("problems", []))
    elif latency >= threshold:
        state, why = "performance critical", f"latency {latency:.0f}s >= threshold {threshold:g}s"
    elif failed:
        state, why = "retrying", f"{failed} failed change(s) wait to be applied again"
    elif expires_in is not None and retention and expires_in <= (1 - fraction) * retention:
        state, why = "expiring soon", f"expires in {expires_in / 3600:.1f} h"
    elif status in UNINITIALIZED:
        state, why = "uninitialized", status
    else:
        state = "running" if running else "idle"
    return {"state": state, "why": why, "latency_s": round(latency, 1), "rating": rating(latency, threshold),
            "expires_in_s": None if expires_in is None else round(expires_in, 1)}


def _until(at: str, now: dt.datetime) -> float:
    t = dt.datetime.fromisoformat(at)
    t = t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
    return (t - now).total_seconds()


def roll_up(status: dict[str, Any], alerts: AlertsConfig, running: set[tuple[str, str | None]],
            now: dt.datetime) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"publications": {name: roll-up}, "subscriptions": {name: roll-up}}`` over ``status``'s document;
    ``running``: (publication, subscription) of the runs in flight (subscription None: publication-wide)."""
    tx = status.get("transactional") or {}
    pubs = {p["name"]: p for p in status.get("publications", []) + tx.get("publications", [])}
    subs_out: dict[str, dict[str, Any]] = {}
    for e in status.get("subscriptions", []) + tx.get("subscriptions", []):
        p = pubs.get(e.get("publication", ""))
        is_running = (e.get("publication"), e["name"]) in running
        subs_out[e["name"]] = {"publication": e.get("publication"),
                               **subscription_state(e, p, alerts, is_running, now)}
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
