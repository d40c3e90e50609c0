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


def session_states(replica: Replica, pubid: str) -> dict[str, dict[str, Any]]:
    """``agent_state`` of ``MSmerge_sessions`` for every subscription registered in the publication, by name, in
    one query whatever their number (``status`` of a fleet: the history holds every sync of every device, so each
    subscription's last run and last success are found through its index, never by reading its history); a
    subscription whose last run failed is read alone (how many runs failed since when)."""
    ok = ("succeeded",)
    t, subs, u, p = (replica.meta("MSmerge_sessions"), replica.meta("sysmergesubscriptions"),
                     replica.dialect.uuid_param(), replica.p)
    good = "coalesce({}status, 'succeeded') = 'succeeded'"
    own = "x.pubid = r.pubid AND x.subscription = r.name"
    newest: dict[str, tuple] = {}                      # name -> (last run's status, its end, last success's end)
    if replica.dialect.capabilities.lateral_joins:      # one probe a subscription: its last run, and its ties
        for name, status, end, started in replica.query(
                f"SELECT r.name, l.status, l.end_time, (SELECT count(*) FROM {t} y WHERE y.pubid = r.pubid AND "
                f"y.subscription = r.name AND y.start_time = l.start_time) FROM {subs} r CROSS JOIN LATERAL "
                f"(SELECT x.status, x.start_time, x.end_time FROM {t} x WHERE {own} ORDER BY x.start_time DESC "
                f"LIMIT 1) l WHERE r.pubid = {u}", [pubid]):
            # two runs started at once: which is last is agent_state's
            newest[name] = (status, end, end) if started == 1 else ("failed", None, None)
    else:
        rows = replica.query(
            f"SELECT n.name, l.status, l.end_time, k.end_time FROM (SELECT r.name, "
            f"(SELECT max(x.start_time) FROM {t} x WHERE {own}) AS last_start, "
            f"(SELECT x.start_time FROM {t} x WHERE {own} AND {good.format('x.')} ORDER BY x.start_time DESC LIMIT 1) "
            f"AS ok_start FROM {subs} r WHERE r.pubid = {u}) n "
            f"JOIN {t} l ON l.pubid = {u} AND l.subscription = n.name AND l.start_time = n.last_start "
            f"LEFT JOIN {t} k ON k.pubid = {u} AND k.subscription = n.name AND k.start_time = n.ok_start "
            f"AND {good.format('k.')}", [pubid, pubid, pubid])
        for name, status, end, ok_end in rows:        # runs that started at the same time: the last to end
            seen = newest.get(name)
            if seen is None or (end is not None and (seen[1] is None or end > seen[1])) or \
                    (end == seen[1] and ok_end is not None and (seen[2] is None or ok_end > seen[2])):
                newest[name] = (status, end, ok_end)
    out: dict[str, dict[str, Any]] = {}
    for name, (status, end, ok_end) in newest.items():
        if (status or ok[0]) not in ok:               # failed (or tied): read alone
            out[name] = agent_state(replica, "MSmerge_sessions", f"pubid = {u} AND subscription = {p}", [pubid, name], ok)
            continue
        ended = iso(end)
        out[name] = {"last_run": {"status": "succeeded", "time": ended},
                     "last_success": ended if ok_end is end else iso(ok_end)}
    return out


def iso(t: Any) -> str | None:
    if t is None:
        return None
    if type(t) is dt.datetime:          # most of them (status reads 10,000 devices' times)
        return t.isoformat()
    return t.isoformat() if hasattr(t, "isoformat") else str(t)


def age_seconds(t: Any, now: dt.datetime) -> float | None:
    """Seconds from ``t`` (a timestamp, or its ISO text) to ``now``."""
    if t is None:
        return None
    if isinstance(t, str):
        t = dt.datetime.fromisoformat(t)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return max(0.0, round((now - t).total_seconds(), 1))
