"""The enrolled devices as ``sparksync devices`` and the monitor's ``/api/devices`` list them: each with the state the
monitor's roll-up gives it (``rollup.subscription_state``) over ``status``'s document, so the three agree."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.errors import ConfigurationError
from sparksync.fleet.registry import rows
from sparksync.merge.session.remote.enrollment import ENROLLED, iso
from sparksync.metadata import store
from sparksync.monitor.rollup import ORDER, Cadence, subscription_state
from sparksync.status import gather_status

STATES = ("offline", "late", "error", "diverged", "retrying", "expired", "expiring soon", "uninitialized", "idle",
          "revoked", "removed", "unserved")


@dataclass(frozen=True)
class EnrolledDevice:
    """One enrolled device as ``sparksync devices`` lists it."""

    name: str
    group: str
    publication: str
    host_name: str | None
    login: str | None
    enrolled_at: str | None
    described: str | None
    state: str                     # the monitor's state (idle, offline, error, ...), or revoked / removed
    why: str
    status: str | None             # status's word for it (active, diverged, waiting for its device's first sync ...)
    last_sync: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def devices(topology: Topology, status: dict[str, Any], group: str | None = None, state: str | None = None,
            now: dt.datetime | None = None, search: str | None = None) -> list[EnrolledDevice]:
    """The enrolled devices (of ``group``; in ``state``: a roll-up state, ``late`` for performance critical,
    ``diverged``, ``revoked`` or ``removed``; ``search``: whose name, partition or file's place holds it,
    case-insensitive), each with the state the monitor gives it, read from ``status``'s document (which lists the
    enrolled devices: ``fleet/registry.with_fleet``)."""
    if group is not None:
        topology.device_group(group)            # an unknown group: its own error
    now = now or store.utcnow()
    entries = {e["name"]: e for e in status.get("subscriptions", [])}
    pubs = {p["name"]: p for p in status.get("publications", [])}
    groups = {g.name: g for g in topology.device_groups}
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        found = rows(pub, group)
    out = []
    for d in found:
        g = groups.get(d["group_name"])
        e = entries.get(d["subscription"])
        if d["state"] != ENROLLED:
            st, why = d["state"], f"{d['state']} at {iso(d['changed_at'])}"
        elif e is None or g is None:
            st, why = "unserved", f"device group {d['group_name']} is not configured"
        else:
            rolled = subscription_state(e, pubs.get(g.publication), topology.alerts, False, now,
                                        Cadence.device(float(e["sync_interval_s"])))
            st, why = rolled["state"], rolled["why"]
        out.append(EnrolledDevice(d["subscription"], d["group_name"], g.publication if g else "", d["host_name"],
                                  d["login"], iso(d["enrolled_at"]), d["described"], st, why,
                                  e.get("status") if e else None, e.get("last_sync") if e else None))
    if state is not None:
        out = [x for x in out if _in_state(x, state)]
    if search:
        needle = search.lower()
        out = [d for d in out if any(needle in (v or "").lower() for v in (d.name, d.host_name, d.login, d.described))]
    rank = {s: i for i, s in enumerate(ORDER)}
    return sorted(out, key=lambda d: (rank.get(d.state, -1), d.name))    # revoked, removed, unserved, then worst


def _in_state(d: EnrolledDevice, state: str) -> bool:
    if state == "late":
        return d.state == "performance critical"
    if state == "diverged":
        return d.status == "diverged"
    return d.state == state


def listing(topology: Topology, group: str | None = None, state: str | None = None,
            search: str | None = None) -> list[EnrolledDevice]:
    """``devices`` over the publisher as it is now (``gather_status``); ``search``: the devices whose name, partition
    or file's place holds it (case-insensitive)."""
    if state is not None and state not in STATES:
        raise ConfigurationError(f"state {state[:40]!r}: one of {', '.join(STATES)}", obj="state")
    return devices(topology, gather_status(topology), group, state, search=search)


def page_of(found: list[EnrolledDevice], page: int, size: int) -> dict[str, Any]:
    """One page of ``found`` (``page`` from 1), with the count of every state among them all."""
    counts: dict[str, int] = {}
    for d in found:
        counts[d.state] = counts.get(d.state, 0) + 1
    return {"total": len(found), "page": page, "page_size": size, "states": counts,
            "devices": [d.to_dict() for d in found[(page - 1) * size: page * size]]}
