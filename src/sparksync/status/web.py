"""The web subscriptions of a publication in ``status``: each device's registration as the publisher knows it (its
database is on the device: what is pending there is the device's to say, at its next sync), configured by hand
or enrolled into a device group alike.

A fleet is read in bulk: a constant number of queries per publication whatever the number of devices (their
backlogs: ``merge/session/backlogs.py``; their last runs: ``history.session_states``; their newest validations,
failed and refused changes, refused files: one query each), so that ``status`` of 10,000 devices, and the monitor
over it, take the time of reading 10,000 rows, not of 100,000 queries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparksync.config import SubscriptionConfig, Topology
from sparksync.dialects.replica import Replica
from sparksync.merge.maintenance import validations
from sparksync.merge.maintenance.expiration import expiry
from sparksync.merge.maintenance.validations import Validation
from sparksync.merge.session.backlogs import Backlogs
from sparksync.merge.session.remote import holders
from sparksync.metadata import store
from sparksync.metadata.history import iso, session_states
from sparksync.metadata.records import ArticleRow, PublicationRow, SubscriptionRow
from sparksync.status.readings import (
    expires_at,
    failed_counts,
    generation_times,
    in_open,
    refused_by_source,
    validation,
)


@dataclass
class _Fleet:
    """What ``status`` says of a publication's web subscriptions, read once for all of them."""

    strays: dict[str, list[dict[str, Any]]]
    runs: dict[str, dict[str, Any]]
    failed: dict[int, int]
    refused: dict[int, list[str]]
    validations: dict[str, Validation]
    backlogs: Backlogs

    @classmethod
    def read(cls, pub: Replica, prow: PublicationRow, arts: list[ArticleRow], scheme,
             regs: list[SubscriptionRow]) -> _Fleet:
        strays: dict[str, list[dict[str, Any]]] = {}
        for f in holders.strays(pub):
            strays.setdefault(f["subscription"], []).append(f)
        return cls(strays, session_states(pub, prow.pubid), failed_counts(pub), refused_by_source(pub),
                   validations.latest(pub, prow.pubid), Backlogs.of_publication(pub, arts, scheme, regs))


def web_entries(pub: Replica, topology: Topology, subs: list[SubscriptionConfig], registered: dict[str, SubscriptionRow],
                prow: PublicationRow, arts: list[ArticleRow], scheme) -> list[dict[str, Any]]:
    """The entries of ``subs`` (the publication's web subscriptions) in ``status``'s document; ``registered``: the
    publication's registrations by name; ``scheme`` as ``pending_download`` takes it."""
    if not subs:
        return []
    active = [r for s in subs if (r := registered.get(s.name)) is not None and r.active]
    fleet = _Fleet.read(pub, prow, arts, scheme, active)
    open_generation = fleet.backlogs.open_generation
    made = generation_times(pub)
    now = store.utcnow()
    # days without a sync after which a device expires: its device group's retention where it sets one (cleanup
    # forgets the device then: fleet/registry.forget), else its publication's
    kept = {g.name: g.retention for g in topology.device_groups if g.retention is not None}
    out = []
    for s in subs:
        r = registered.get(s.name)
        entry: dict[str, Any] = {"name": s.name, "publication": prow.name, "transport": "web", "database": None,
                                 "subscriber_type": s.subscriber_type, "priority": s.effective_priority,
                                 "host_name": s.host_name, **({"login": s.login} if s.login is not None else {}),
                                 "sync_interval_s": s.sync_interval_s, **({"group": s.group} if s.group else {})}
        others = fleet.strays.get(s.name)
        if others:
            entry["other_files"] = [{"file_id": f["file_id"], "described": f["described"], "reason": f["reason"],
                                     "attempts": f["attempts"], "unsent": f["unsent"], "last_seen": iso(f["last_seen"])}
                                    for f in others]
        out.append(entry)
        if r is None or not r.active:
            entry["status"] = "not initialized" if r is None else "waiting for its device's first sync"
            if r is not None:
                _initialization_failed(prow, fleet.runs.get(s.name, {}), entry)
            continue
        retention = kept.get(s.group or "", prow.retention)
        expired = expiry(retention, r, now)
        if expired is not None:
            entry.update({"status": "expired", "problems": [expired]})
            continue
        pending, lowest = fleet.backlogs.of(r)
        runs = fleet.runs.get(s.name, {})
        entry.update({"status": "stopped" if "stopped_since" in runs else "active", **runs,
                      "nickname": r.replnickname, "partition_id": r.partition_id,
                      "publisher_sentgen": r.sentgen, "publisher_recgen": r.recgen,
                      "last_sync": iso(r.last_sync_date), "expires_at": expires_at(retention, r),
                      **({"retention": retention} if retention != prow.retention else {}),
                      "pending_download": pending, "oldest_pending_download": iso(made(lowest)),
                      "download_in_open_generation": in_open(lowest, open_generation),
                      "failed_upload": fleet.failed.get(int(r.replnickname), 0)})
        refused = fleet.refused.get(int(r.replnickname))
        if refused:
            entry.update({"status": "damaged", "problems": [f"{refused[0]}; initialize a new file on the device "
                                                            "('sparksync sync --reinitialize --upload-first')"]})
        validation(pub, prow.pubid, entry, "the device's next sync validates it again; 'sparksync sync --reinitialize "
                   "--upload-first' on the device starts a new file", fleet.validations.get(s.name))
    return out


def _initialization_failed(prow: PublicationRow, runs: dict[str, Any], entry: dict[str, Any]) -> None:
    """A registration waiting for its device's file whose last sync failed (``runs``: its last runs, as
    ``agent_state`` says them; a way out that failed halfway: the file set aside by ``sync --reinitialize``, then
    its initialization refused): stopped, with the command that completes it, never a quiet "waiting"."""
    if "last_error" not in runs:
        return
    error = runs["last_error"]
    way = (f"the operator runs 'sparksync snapshot --publication {prow.name}', then the device's 'sparksync sync' "
           "initializes its file" if "sparksync snapshot" in error else
           "the device's next 'sparksync sync' initializes its file")
    entry.update({"status": "stopped", **runs, "problems": [
        f"its device's file is not initialized: its last sync ({runs['last_error_time']}) failed: {error}; {way}"]})
