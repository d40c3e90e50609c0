"""The devices enrolled into device groups, as every operation reads them beside the subscriptions configured by
hand: ``with_fleet`` gives a topology that holds their web subscriptions (``status``, ``validate``, the monitor),
``rows`` their records (``monitor/devices.py`` lists them with their state), ``revoke`` and ``remove`` end one
(refused at its next request; its metadata dropped at the next cleanup: ``forget``); ``forget_strays`` clears a
subscription's refused files once they are dealt with."""

from __future__ import annotations

import datetime as dt
import threading

from sparksync.config import SubscriptionConfig, Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, SparksyncError
from sparksync.merge.session.remote import holders
from sparksync.merge.session.remote.enrollment import DEVICES, ENROLLED, REMOVED, REVOKED, aware, installed
from sparksync.merge.snapshot.initialize import drop_registration
from sparksync.metadata import store
from sparksync.metadata.history import iso
from sparksync.metadata.records import SubscriptionRow
from sparksync.progress import Reporter, silent
from sparksync.web import tokens


def enrolled(pub: Replica, topology: Topology) -> list[SubscriptionConfig]:
    """The web subscriptions of the devices enrolled into the configured device groups (a revoked or removed
    device, or one of a group no longer configured, is not served and not listed)."""
    if not topology.device_groups or not installed(pub):
        return []
    groups = {g.name: g for g in topology.device_groups}
    rows = pub.query(f"SELECT subscription, group_name, host_name, login FROM {pub.meta(DEVICES)} "
                     f"WHERE state = {pub.p} ORDER BY subscription", [ENROLLED])
    return [groups[g].device(name, host, login) for name, g, host, login in rows if g in groups]


_made: dict[int, tuple[Topology, tuple, Topology]] = {}      # id(topology) -> (it, the registry's mark, with fleet)
_made_lock = threading.Lock()


def with_fleet(topology: Topology) -> Topology:
    """``topology`` with the enrolled devices' web subscriptions (``Topology.with_devices``); as it is when it has
    no device group, or the publisher cannot be read (what reads it next says why). Made again only when the
    registry changed since the last call for the same ``topology`` (a device enrolled, revoked, removed or
    forgotten), so that the monitor's every read of 10,000 devices does not build 10,000 subscriptions again."""
    if not topology.device_groups or topology.enrolled:
        return topology
    try:
        with connect(topology.publisher_url, topology.publisher.name) as pub:
            mark = _mark(pub)
            with _made_lock:
                seen = _made.get(id(topology))
            if seen is not None and seen[0] is topology and seen[1] == mark:
                return seen[2]
            made = topology.with_devices(enrolled(pub, topology))
            with _made_lock:
                if len(_made) >= 8:               # a few configurations read in one process (tests, one serve)
                    _made.clear()
                _made[id(topology)] = (topology, mark, made)
            return made
    except SparksyncError:
        return topology


def _mark(pub: Replica) -> tuple:
    """What changes whenever the set of enrolled devices does: how many rows, how many enrolled, the newest
    enrollment and the newest change of state."""
    if not installed(pub):
        return ()
    row = pub.query_one(f"SELECT count(*), sum(CASE WHEN state = {pub.p} THEN 1 ELSE 0 END), max(enrolled_at), "
                        f"max(changed_at) FROM {pub.meta(DEVICES)}", [ENROLLED])
    return tuple(str(v) for v in row) if row else ()


def rows(pub: Replica, group: str | None = None) -> list[dict]:
    if not installed(pub):
        return []
    return store.select_rows(pub, DEVICES, {"group_name": group} if group else None, order_by=("subscription",))


def _row(pub: Replica, name: str) -> dict:
    found = store.select_rows(pub, DEVICES, {"subscription": name}) if installed(pub) else []
    if not found:
        raise ConfigurationError(f"no enrolled device named {name!r} (sparksync devices lists them)", obj=name)
    return found[0]


def revoke(topology: Topology, name: str) -> dict:
    """The device's credential revoked: its next request is refused (401); it is listed as revoked until the next
    cleanup drops its metadata."""
    return _end(topology, name, REVOKED)


def remove(topology: Topology, name: str) -> dict:
    """The device removed: refused from now on, its registration dropped at the next cleanup."""
    return _end(topology, name, REMOVED)


def _end(topology: Topology, name: str, state: str) -> dict:
    with connect(topology.publisher_url, topology.publisher.name) as pub, pub.transaction():
        row = _row(pub, name)
        tokens.revoke(pub, name)
        if row["state"] == REMOVED:                # removed stays removed (a revoke after it changes nothing)
            return row
        store.update_rows(pub, DEVICES, {"state": state, "changed_at": store.utcnow()}, {"subscription": name})
        return {**row, "state": state}


def forget_strays(topology: Topology, name: str) -> list[dict]:
    """The files refused as web subscription ``name``'s (configured or enrolled) forgotten once the operator dealt
    with them (``holders.forget``): what was recorded of them, its times as ISO text."""
    if name not in {s.name for s in with_fleet(topology).subscriptions if s.transport == "web"}:
        raise ConfigurationError(f"no web subscription or enrolled device named {name!r} ('sparksync status' and "
                                 "'sparksync devices' list them)", obj=name)
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        return [{**f, "first_seen": iso(f["first_seen"]), "last_seen": iso(f["last_seen"])}
                for f in holders.forget(pub, name)]


def forget(pub: Replica, topology: Topology, now: dt.datetime, dry_run: bool = False,
           report: Reporter = silent) -> list[str]:
    """At cleanup: the devices revoked or removed, and those that have not synced within their group's retention
    (else their publication's; 0: never), dropped: their registration, token, file and device rows (inside the
    caller's lock). Returns their names."""
    if not installed(pub):
        return []
    groups = {g.name: g for g in topology.device_groups}
    retention = {p.name: p.retention for p in topology.publications}
    regs = {r.name: r for r in store.select(pub, SubscriptionRow, {}) if str(r.database_label).startswith("web:")}
    gone: list[tuple[str, str]] = []
    for d in rows(pub):
        r = regs.get(d["subscription"])
        if d["state"] in (REVOKED, REMOVED):
            gone.append((d["subscription"], d["state"]))
            continue
        g = groups.get(d["group_name"])
        if g is None:
            continue                        # a group no longer configured: kept until it is again, or removed
        days = g.retention if g.retention is not None else retention.get(g.publication, 0)
        last = (r.last_sync_date or r.created_at) if r is not None else d["enrolled_at"]
        if days and last is not None and now - aware(last) > dt.timedelta(days=days):
            gone.append((d["subscription"], f"no sync for more than {days} day(s)"))
    if dry_run or not gone:
        return [name for name, _ in gone]
    with pub.transaction():
        for name, _ in gone:
            r = regs.get(name)
            if r is not None:
                drop_registration(pub, r.pubid, r)
            tokens.revoke(pub, name)
            for table in ("MSweb_holders", "MSweb_strays", DEVICES):
                store.delete_rows(pub, table, {"subscription": name})
    report(f"cleanup: {len(gone)} enrolled device(s) dropped: "
           + "; ".join(f"{n} ({why})" for n, why in gone[:10]) + (" ..." if len(gone) > 10 else ""))
    return [name for name, _ in gone]
