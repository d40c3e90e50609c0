"""Agents' history tables as ``status`` (and the monitor) tell them: each agent's last run, and
whether it is stopped (its last run failed), since when, how many runs failed since, and the error.

The history tables (``MSmerge_sessions``, ``MSsnapshot_history``, ``MSlogreader_history``,
``MSdistribution_history``) hold every run, failed ones with their error text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sparksync.dialects.replica import Replica


def agent_state(replica: Replica, table: str, where: str, params: Sequence[Any], ok: tuple[str, ...]) -> dict[str, Any]:
    """The runs of ``table`` matching ``where`` (SQL over its columns, with ``params``): ``last_run``
    (status succeeded | failed, time), ``last_success``, and while the last run failed: ``last_error``,
    ``last_error_time``, ``stopped_since`` (when the first run after the last success started) and
    ``failed_runs``. A run's ``status`` is one of ``ok`` when it succeeded (NULL counts as succeeded:
    rows from before failed runs were recorded). Empty when there is no run."""
    t = replica.meta(table)
    good = f"coalesce(status, '{ok[0]}') IN ({', '.join(repr(s) for s in ok)})"
    cols = "status, start_time, end_time, message"
    last = replica.query_one(f"SELECT {cols} FROM {t} WHERE {where} ORDER BY start_time DESC, end_time DESC LIMIT 1",
                             params)
    if last is None:
        return {}
    last_ok = (last[0] or ok[0]) in ok
    out: dict[str, Any] = {"last_run": {"status": "succeeded" if last_ok else "failed", "time": iso(last[2])}}
    success = replica.query_one(f"SELECT start_time, end_time FROM {t} WHERE {where} AND {good} "
                                "ORDER BY start_time DESC LIMIT 1", params)
    if success is not None:
        out["last_success"] = iso(success[1])
    if not last_ok:
        after, after_params = ("", []) if success is None else (f" AND start_time > {replica.p}", [success[0]])
        n, since = replica.aggregate(f"SELECT count(*), min(start_time) FROM {t} WHERE {where} AND NOT {good}{after}",
                                     [*params, *after_params])
        out.update({"last_error": last[3] or "(no message)", "last_error_time": iso(last[2]),
                    "stopped_since": iso(since), "failed_runs": int(n or 0)})
    return out


def iso(t: Any) -> str | None:
    return None if t is None else t.isoformat() if hasattr(t, "isoformat") else str(t)


def age_seconds(t: Any, now: dt.datetime) -> float | None:
    """Seconds from ``t`` (a timestamp, or its ISO text) to ``now``."""
    if t is None:
        return None
    if isinstance(t, str):
        t = dt.datetime.fromisoformat(t)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return max(0.0, round((now - t).total_seconds(), 1))
