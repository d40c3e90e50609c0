"""``status``: publications, articles and nicknames, subscriptions and their watermarks (the web subscriptions':
``web.py``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import redact_url
from sparksync.errors import ReplicaDamaged, SparksyncError
from sparksync.fleet.registry import with_fleet
from sparksync.merge.maintenance.expiration import expiry
from sparksync.merge.maintenance.integrity import check_identity, check_not_behind, replica_problems
from sparksync.merge.partitions.evaluation import describe_partitions
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.session.backlog import count_after, pending_download
from sparksync.merge.tracking import capture
from sparksync.merge.tracking.generations import enumeration_bound
from sparksync.metadata import store
from sparksync.metadata.history import age_seconds, agent_state, iso
from sparksync.metadata.records import ArticleRow, PublicationRow, Role, SubscriptionRow
from sparksync.names import TableName
from sparksync.status.readings import (
    expires_at,
    failed_count,
    generation_time,
    in_open,
    refused_claims,
    validation,
    waiting,
)
from sparksync.status.web import web_entries
from sparksync.transactional.status.publications import gather


def gather_status(topology: Topology) -> dict[str, Any]:
    """Every publication and subscription: watermarks, what is pending and since when, the last run of
    each agent and its error; ``ok`` is False (``problems`` says why) while anything is stopped,
    damaged, unreachable, expired or inactive. The devices enrolled into device groups are web subscriptions
    here as the configured ones are (``fleet/registry.with_fleet``)."""
    topology = with_fleet(topology)
    out = _merge_status(topology)
    if topology.publications_of_kind("transactional"):

        out["transactional"] = gather(topology)
    now = dt.datetime.now(dt.UTC)
    out["time"] = now.isoformat()
    _add_ages(out, now)
    out["problems"] = _problems(out)
    out["ok"] = not out["problems"]
    return out


BAD_STATES = ("stopped", "damaged", "diverged", "unreachable", "expired", "inactive")


def _entries(st: dict[str, Any]) -> list[tuple[str, dict]]:
    """Every publication and subscription entry, merge and transactional: (kind, entry)."""
    tx = st.get("transactional") or {}
    return [("publication", e) for e in st["publications"] + tx.get("publications", [])] + \
        [("subscription", e) for e in st["subscriptions"] + tx.get("subscriptions", [])]


_OLDEST = ("oldest_pending_download", "oldest_pending_upload", "oldest_pending", "oldest_unread")   # the timestamps aged


def _add_ages(st: dict[str, Any], now: dt.datetime) -> None:
    """Beside every ``oldest_*`` timestamp, its age in seconds (``oldest_*_age``); a last validation's too."""
    for _, e in _entries(st):
        for k in _OLDEST:
            if k in e:
                e[f"{k}_age"] = age_seconds(e[k], now)
        if isinstance(e.get("validation"), dict):
            e["validation_age"] = age_seconds(e["validation"]["at"], now)


def _problems(st: dict[str, Any]) -> list[str]:
    """One line per database, publication or subscription that is not replicating, and why."""
    out = []
    distributor = (st.get("transactional") or {}).get("distributor") or {}
    if distributor.get("state") == "unreachable":
        out.append(f"distributor: unreachable: {distributor.get('error', '')}")
    for kind, e in _entries(st):
        for f in e.get("other_files", []):       # a device file refused as this subscription's: its writes are not here
            where = f["described"] or f["file_id"]
            out.append(f"subscription {e['name']}: a file that does not hold it tried to sync ({where}, "
                       f"{f['attempts']} time(s), last at {f['last_seen']}): {f['reason']}; refused, its changes stay "
                       "in it (docs/web-sync.md, 'Which file holds a subscription'); once it is dealt with, "
                       f"'sparksync devices --forget-strays {e['name']}'")
        state = e.get("state") if kind == "publication" else e.get("status")
        if state not in BAD_STATES:
            continue
        why = "; ".join(e.get("problems", [])) or e.get("error") or e.get("last_error") or e.get("message") or ""
        since = f" since {e['stopped_since']}" if e.get("stopped_since") else ""
        out.append(f"{kind} {e['name']}: {state}{since}" + (f": {why}" if why else ""))
    return out


def _merge_status(topology: Topology) -> dict[str, Any]:
    out: dict[str, Any] = {"publisher": {"name": topology.publisher.name,
                                         "database": redact_url(topology.publisher_url)},
                           "publications": [], "subscriptions": []}
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        version = store.metadata_version(pub)
        out["publisher"]["metadata_version"] = version
        if version is None:
            out["publisher"]["state"] = "not set up" if topology.publications_of_kind("merge") else "no merge metadata"
            for s in topology.subscriptions:
                if topology.publication(s.publication).kind == "merge":
                    out["subscriptions"].append({"name": s.name, "publication": s.publication, "status": "not set up"})
            return out
        store.require_metadata(pub)             # older metadata: 'run sparksync setup to upgrade it'
        ident = store.replica_identity(pub)
        pub_nick = ident.nickname if ident else None     # None: damaged, reported by replica_problems
        out["publisher"].update({
            "state": "published", "replica_nickname": pub_nick,
            "open_generation": pub.dialect.current_open_generation(pub), "enumeration_bound": enumeration_bound(pub),
            "change_capture": capture.state(pub)})
        blocked = waiting(pub)
        if blocked:
            out["publisher"]["waiting"] = blocked
        pub_rows = {r.name: r for r in store.select(pub, PublicationRow)}
        for pcfg in topology.publications_of_kind("merge"):
            prow = pub_rows.get(pcfg.name)
            if prow is None:
                out["publications"].append({"name": pcfg.name, "state": "not published"})
                continue
            arts = store.select(pub, ArticleRow, {"pubid": prow.pubid}, order_by=("nickname",))
            articles = []
            for a in arts:

                t = TableName(a.source_schema, a.source_table)
                articles.append({
                    "name": a.name, "nickname": a.nickname, "processing_group": a.processing_group,
                    "column_tracking": bool(a.column_tracking), "rowguid_column": a.rowguid_column,
                    "related_nicknames": a.related_nicknames,
                    "triggers": len(pub.dialect.list_merge_triggers(pub, t)),
                    "rows": pub.scalar(f"SELECT count(*) FROM {pub.table_sql(t)}"),
                })
            damaged = replica_problems(pub, prow.pubid)
            snapshots = agent_state(pub, "MSsnapshot_history", f"pubid = {pub.dialect.uuid_param()}", [prow.pubid],
                                    ("succeeded",))
            scheme = scheme_of(arts)
            precomputed = prow.precomputed
            sub_rows = {r.name: r for r in store.select(pub, SubscriptionRow, {"pubid": prow.pubid})}
            filtered = ({"partitions": describe_partitions(pub, prow.pubid, arts, scheme, precomputed,
                                                           sub_rows.values())}
                        if scheme.filtered else {})
            out["publications"].append({
                "name": pcfg.name, "pubid": prow.pubid, "kind": prow.kind,
                "state": "damaged" if damaged else "stopped" if "stopped_since" in snapshots else "published",
                **({"problems": damaged} if damaged else {}), **({"agent": "snapshot", **snapshots} if snapshots else {}),
                "snapshot_generation": prow.snapshot_generation,
                "snapshot_time": prow.snapshot_time.isoformat() if prow.snapshot_time else None,
                "generation_leveling_threshold": prow.generation_leveling_threshold, "articles": articles,
                "retention": prow.retention, "schema_version": prow.schema_version or 0,
                "cleanup_generation": prow.cleanup_generation,
                **filtered})
            nicks = [a.nickname for a in arts]
            for s in topology.subscriptions_of(pcfg.name):
                r = sub_rows.get(s.name)
                entry: dict[str, Any] = {
                    "name": s.name, "publication": pcfg.name,
                    "database": redact_url(topology.subscriber_url(s)),
                    "subscriber_type": s.subscriber_type, "priority": s.effective_priority, "host_name": s.host_name,
                    **({"login": s.login} if s.login is not None else {})}
                if r is None or not r.active:
                    entry["status"] = "not initialized"
                    out["subscriptions"].append(entry)
                    continue
                expired = expiry(prow.retention, r, store.utcnow())
                if expired is not None:
                    entry.update({"status": "expired", "problems": [expired]})
                    out["subscriptions"].append(entry)
                    continue
                runs = agent_state(pub, "MSmerge_sessions", f"pubid = {pub.dialect.uuid_param()} AND subscription = {pub.p}",
                                   [prow.pubid, s.name], ("succeeded",))
                pending, lowest = pending_download(pub, arts, scheme if precomputed else None, r)
                entry.update({"status": "stopped" if "stopped_since" in runs else "active",
                              "last_sync": iso(r.last_sync_date), "expires_at": expires_at(prow.retention, r),
                              "nickname": r.replnickname, "partition_id": r.partition_id,
                              "publisher_sentgen": r.sentgen, "publisher_recgen": r.recgen,
                              "pending_download": pending,
                              "oldest_pending_download": iso(generation_time(pub, lowest)),
                              "download_in_open_generation": in_open(lowest, out["publisher"]["open_generation"]),
                              "failed_upload": failed_count(pub, r.replnickname), **runs})
                try:
                    with connect(topology.subscriber_url(s), s.name) as sub:
                        store.require_metadata(sub)
                        check_identity(sub, s.name, r)
                        check_not_behind(sub, s.name, r, prow.pubid)
                        prow_sub = store.select_one(sub, SubscriptionRow, {"pubid": prow.pubid, "role": Role.PUBLISHER})
                        if prow_sub is not None:
                            entry["subscriber_recgen"] = prow_sub.recgen
                            entry["subscriber_sentgen"] = prow_sub.sentgen
                        entry["open_generation"] = sub.dialect.current_open_generation(sub)
                        up, lowest = count_after(sub, nicks, entry.get("subscriber_sentgen"),
                                                  exclude_received_from=pub_nick)
                        entry["pending_upload"] = up
                        entry["oldest_pending_upload"] = iso(generation_time(sub, lowest))
                        entry["upload_in_open_generation"] = in_open(lowest, entry["open_generation"])
                        entry["failed_download"] = failed_count(sub, pub_nick)
                        entry["change_capture"] = capture.state(sub)
                        blocked = waiting(sub)
                        if blocked:
                            entry["waiting"] = blocked
                        damaged = replica_problems(sub, prow.pubid) + [
                            f"{line}; run 'sparksync reinit --subscription {s.name} --upload-first'"
                            for line in refused_claims(pub, r.replnickname)]
                        if damaged:
                            entry["status"] = "damaged"
                            entry["problems"] = damaged
                except ReplicaDamaged as e:
                    entry["status"] = "damaged"
                    entry["problems"] = [e.message]
                except SparksyncError as e:
                    entry["status"] = "unreachable"
                    entry["error"] = e.message
                validation(pub, prow.pubid, entry, f"'sparksync validate --checksum -s {s.name}' lists the rows that "
                            f"differ and '--repair' mends them (or 'sparksync reinit -s {s.name}')")
                out["subscriptions"].append(entry)
            out["subscriptions"] += web_entries(pub, topology, topology.web_subscriptions_of(pcfg.name), sub_rows, prow,
                                                arts, scheme if precomputed else None)
    return out
