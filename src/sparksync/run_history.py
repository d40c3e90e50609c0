"""``sparksync history`` (and the monitor's ``/api/history``): every agent's recent runs from the history
tables, newest first, failed ones with their error; and each subscription's totals (rows moved,
conflicts) for the monitor's counters.

Merge sessions and snapshot runs are kept at the publisher (``MSmerge_sessions``, with per-article rows
in ``MSmerge_articlehistory``; ``MSsnapshot_history``), log reader and distribution agent runs at the
distributor (``MSlogreader_history``, ``MSdistribution_history``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import SparksyncError
from sparksync.merge.session.remote import enrollment
from sparksync.metadata import store
from sparksync.metadata.history import iso
from sparksync.metadata.records import PublicationRow
from sparksync.metadata.schema import DISTRIBUTION
from sparksync.redaction import redact
from sparksync.transactional.distribution import database as dst

LIMIT = 50          # runs per agent table


def gather_history(topology: Topology, limit: int = LIMIT) -> dict[str, Any]:
    """``runs``: the last ``limit`` runs of each agent, newest first; ``errors``: a database that could not
    be read (its runs are missing, and that is said)."""
    runs: list[dict[str, Any]] = []
    errors: list[str] = []
    if topology.publications_of_kind("merge"):
        try:
            with connect(topology.publisher_url, topology.publisher.name) as pub:
                if store.metadata_version(pub) is not None:
                    runs += _merge_runs(pub, limit)
                    runs += _lockouts(topology, pub, limit)
        except SparksyncError as e:
            errors.append(f"publisher: {e.message}")
    if topology.publications_of_kind("transactional"):
        try:
            with connect(topology.distributor_url, "distributor") as dist:
                if store.table_set_version(dist, DISTRIBUTION) is not None:
                    runs += _transactional_runs(topology, dist, limit)
        except SparksyncError as e:
            errors.append(f"distributor: {e.message}")
    runs.sort(key=lambda r: (r["start_time"] or "", r["end_time"] or ""), reverse=True)
    return {"time": dt.datetime.now(dt.UTC).isoformat(), "runs": runs, "errors": errors}


def _lockouts(topology: Topology, pub: Replica, limit: int) -> list[dict[str, Any]]:
    """The enrollment secrets locked after too many wrong secrets (``merge/session/remote/enrollment.py``), each
    its lockout's last: a failed run of the door (what was tried is the operator's to see)."""
    if not enrollment.installed(pub):
        return []
    groups = {g.name: g.publication for g in topology.device_groups}
    rows = pub.query(f"SELECT secret_id, group_name, locked_until FROM {pub.meta('MSweb_enrollments')} "
                     f"WHERE locked_until IS NOT NULL ORDER BY locked_until DESC LIMIT {int(limit)}")
    out = []
    for secret_id, group, until in rows:
        end = enrollment.aware(until)
        out.append(_run("door", groups.get(group, ""), None, end - enrollment.LOCKED_FOR, end, None, "failed",
                        f"enrollment secret {secret_id} of device group {group}: {enrollment.LOCKOUT} wrong secrets "
                        f"presented for it; locked until {end:%Y-%m-%d %H:%M} UTC"))
    return out


def _names(pub: Replica) -> dict[str, str]:
    return {str(r.pubid): r.name for r in store.select(pub, PublicationRow)}


def _time(t: Any) -> str | None:
    """A history time as ISO 8601 (a SQLite database gives text, PostgreSQL a datetime)."""
    if isinstance(t, str):
        try:
            t = dt.datetime.fromisoformat(t)
        except ValueError:
            return t
    if isinstance(t, dt.datetime) and t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return iso(t)


def _run(agent: str, publication: str, subscription: str | None, start: Any, end: Any, seconds: Any, status: Any,
         message: Any, **extra: Any) -> dict[str, Any]:
    return {"agent": agent, "publication": publication, "subscription": subscription, "start_time": _time(start),
            "end_time": _time(end), "seconds": None if seconds is None else round(float(seconds), 3),
            "status": "failed" if status in ("failed", "error") else "succeeded",
            "message": None if message is None else redact(str(message)), **extra}


def runs_of(topology: Topology, subscription: str, limit: int = 10) -> list[dict[str, Any]]:
    """One subscription's last ``limit`` merge runs, newest first (the monitor's search for a device)."""
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        if store.metadata_version(pub) is None:
            return []
        return _sessions(pub, limit, subscription)


def _merge_runs(pub: Replica, limit: int) -> list[dict[str, Any]]:
    out = _sessions(pub, limit)
    names = _names(pub)
    for (pubid, start, end, secs, status, snapshot_id, msg) in pub.query(
            f"SELECT pubid, start_time, end_time, seconds, status, snapshot_id, message "
            f"FROM {pub.meta('MSsnapshot_history')} ORDER BY start_time DESC LIMIT {int(limit)}"):
        out.append(_run("snapshot agent", names.get(str(pubid), str(pubid)), None, start, end, secs, status, msg,
                        snapshot_id=snapshot_id))
    return out


def _sessions(pub: Replica, limit: int, subscription: str | None = None) -> list[dict[str, Any]]:
    """The last ``limit`` merge sessions (of ``subscription``), newest first, each with its articles' rows."""
    names = _names(pub)
    out = []
    where, params = ("", []) if subscription is None else (f" WHERE subscription = {pub.p}", [subscription])
    sessions = pub.query(
        f"SELECT session_id, subscription, pubid, start_time, end_time, duration, status, upload_inserts, upload_updates, "
        f"upload_deletes, upload_conflicts, download_inserts, download_updates, download_deletes, download_conflicts, "
        f"retries, failed, message FROM {pub.meta('MSmerge_sessions')}{where} ORDER BY start_time DESC "
        f"LIMIT {int(limit)}", params)
    keys = [(str(r[0]), r[1]) for r in sessions]
    articles = _articles(pub, keys)
    for (sid, sub, pubid, start, end, secs, status, ui, uu, ud, uc, di, du, dd, dc, retries, failed, msg) in sessions:
        out.append(_run("merge agent", names.get(str(pubid), str(pubid)), sub, start, end, secs, status, msg,
                        session_id=str(sid), upload={"inserts": ui, "updates": uu, "deletes": ud, "conflicts": uc},
                        download={"inserts": di, "updates": du, "deletes": dd, "conflicts": dc},
                        rows=ui + uu + ud + di + du + dd, conflicts=uc + dc, retries=retries, failed=failed,
                        articles=articles.get((str(sid), sub), [])))
    return out


def _articles(pub: Replica, keys: list[tuple[str, str]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Per session and subscription: each article's rows in each direction."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    sids = sorted({k[0] for k in keys})
    if not sids:
        return out
    marks = ", ".join([pub.dialect.uuid_param()] * len(sids))
    for (sid, sub, article, direction, ins, upd, dele, conf, failed, secs) in pub.query(
            f"SELECT session_id, subscription, article, direction, inserts, updates, deletes, conflicts, failed, duration "
            f"FROM {pub.meta('MSmerge_articlehistory')} WHERE session_id IN ({marks}) ORDER BY article, direction", sids):
        out.setdefault((str(sid), sub), []).append({
            "article": article, "direction": direction, "inserts": ins, "updates": upd, "deletes": dele,
            "conflicts": conf, "failed": failed, "seconds": None if secs is None else round(float(secs), 3)})
    return out


def _transactional_runs(topology: Topology, dist: Replica, limit: int) -> list[dict[str, Any]]:
    out = []
    for pcfg in topology.publications_of_kind("transactional"):
        p = dst.publication(dist, pcfg.name)
        if p is None:
            continue
        u = dist.dialect.uuid_param()
        for (start, end, secs, status, tx, cmds, first, last, msg) in dist.query(
                f"SELECT start_time, end_time, seconds, status, transactions, commands, first_seqno, last_seqno, message "
                f"FROM {dist.meta('MSlogreader_history')} WHERE publication_id = {u} "
                f"ORDER BY start_time DESC LIMIT {int(limit)}", [p.publication_id]):
            out.append(_run("log reader", pcfg.name, None, start, end, secs, status, msg, transactions=tx,
                            commands=cmds, rows=cmds, first_seqno=first, last_seqno=last))
        for (sub, start, end, secs, status, tx, cmds, batches, skipped, last, msg) in dist.query(
                f"SELECT subscription, start_time, end_time, seconds, status, transactions, commands, batches, skipped, "
                f"last_seqno, message FROM {dist.meta('MSdistribution_history')} WHERE publication_id = {u} "
                f"ORDER BY start_time DESC LIMIT {int(limit)}", [p.publication_id]):
            out.append(_run("distribution agent", pcfg.name, sub, start, end, secs, status, msg, transactions=tx,
                            commands=cmds, rows=cmds, batches=batches, skipped=skipped, last_seqno=last))
    return out


def totals(topology: Topology) -> list[dict[str, Any]]:
    """Per publication and subscription (and per direction), what the history tables hold in all: rows
    moved, conflicts, runs and failed runs; the monitor's counters. A database that cannot be read is
    left out (its subscriptions' status says why)."""
    out: list[dict[str, Any]] = []
    if topology.publications_of_kind("merge"):
        try:
            with connect(topology.publisher_url, topology.publisher.name) as pub:
                if store.metadata_version(pub) is not None:
                    names = _names(pub)
                    for (pubid, sub, up, down, conf, n, failed) in pub.query(
                            f"SELECT pubid, subscription, sum(upload_inserts + upload_updates + upload_deletes), "
                            f"sum(download_inserts + download_updates + download_deletes), "
                            f"sum(upload_conflicts + download_conflicts), count(*), "
                            f"sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) "
                            f"FROM {pub.meta('MSmerge_sessions')} GROUP BY pubid, subscription"):
                        out.append({"agent": "merge agent", "publication": names.get(str(pubid), str(pubid)),
                                    "subscription": sub, "rows": {"upload": int(up or 0), "download": int(down or 0)},
                                    "conflicts": int(conf or 0), "runs": int(n), "failed_runs": int(failed or 0)})
        except SparksyncError:
            pass
    if topology.publications_of_kind("transactional"):
        try:
            with connect(topology.distributor_url, "distributor") as dist:
                if store.table_set_version(dist, DISTRIBUTION) is not None:
                    out += _transactional_totals(topology, dist)
        except SparksyncError:
            pass
    return out


def _transactional_totals(topology: Topology, dist: Replica) -> list[dict[str, Any]]:
    out = []
    for pcfg in topology.publications_of_kind("transactional"):
        p = dst.publication(dist, pcfg.name)
        if p is None:
            continue
        for (sub, cmds, n, failed) in dist.query(
                f"SELECT subscription, sum(commands), count(*), sum(CASE WHEN status = 'error' OR status = 'failed' "
                f"THEN 1 ELSE 0 END) FROM {dist.meta('MSdistribution_history')} "
                f"WHERE publication_id = {dist.dialect.uuid_param()} GROUP BY subscription", [p.publication_id]):
            out.append({"agent": "distribution agent", "publication": pcfg.name, "subscription": sub,
                        "rows": {"download": int(cmds or 0)}, "conflicts": 0, "runs": int(n),
                        "failed_runs": int(failed or 0)})
    return out
