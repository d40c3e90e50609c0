"""``status``: publications, articles and nicknames, subscriptions and their watermarks."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica, redact_url
from sparksync.errors import ReplicaDamaged, SparksyncError
from sparksync.merge.conflicts.model import REFUSED
from sparksync.merge.maintenance.expiration import expiry
from sparksync.merge.maintenance.integrity import check_identity, check_not_behind, replica_problems
from sparksync.merge.partitions.evaluation import describe_partitions, evaluated_at_sync
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.tracking import pending
from sparksync.merge.tracking.generations import enumeration_bound, waiting_writers
from sparksync.metadata import store
from sparksync.metadata.history import age_seconds, agent_state, iso
from sparksync.metadata.records import ArticleRow, GenStatus, PublicationRow, Role, SubscriptionRow
from sparksync.names import TableName
from sparksync.transactional.status import gather


def _count_after(replica: Replica, nicknames: list[int], after: int | None,
                 exclude_received_from: int | None = None) -> tuple[int, int | None]:
    """Changes of the articles ``nicknames`` in generations after ``after`` (leaving out those received
    from ``exclude_received_from``), and the lowest generation holding one."""
    if not nicknames:
        return 0, None
    p = replica.p
    nick_list = ", ".join(str(int(n)) for n in nicknames)
    gh = replica.meta("MSmerge_genhistory")
    excl = ""
    params: list[Any] = [int(after or 0)]
    if exclude_received_from is not None:
        excl = (f" AND generation NOT IN (SELECT generation FROM {gh} WHERE genstatus = {GenStatus.RECEIVED:d} "
                f"AND source_nickname = {p})")
        params.append(exclude_received_from)
    total = logged = pending.count(replica, nicknames, after)     # read-only: what the next flush records
    lowest = replica.dialect.current_open_generation(replica) if logged else None
    for t in ("MSmerge_contents", "MSmerge_tombstone"):
        n, g = replica.aggregate(
            f"SELECT count(*), min(generation) FROM {replica.meta(t)} WHERE tablenick IN ({nick_list}) "
            f"AND generation > {p}{excl}", params)
        total += int(n or 0)
        lowest = _lower(lowest, g)
    return total, lowest


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(int(a), int(b))


def _generation_time(replica: Replica, generation: int | None) -> Any:
    """About when the changes of ``generation`` were made: when it was closed, or for the open
    generation, when it was opened (it has been collecting changes since); for an open generation
    of an older version, when the one before it closed."""
    if generation is None:
        return None
    gh, p = replica.meta("MSmerge_genhistory"), replica.p
    return replica.scalar(f"SELECT coalesce((SELECT coldate FROM {gh} WHERE generation = {p}), "
                          f"(SELECT max(coldate) FROM {gh} WHERE generation < {p}))", [int(generation), int(generation)])


def _pending_download(pub: Replica, arts: list[ArticleRow], scheme, registered: SubscriptionRow) -> tuple[int, int | None]:
    """What the publisher has for a subscription: every change of its unfiltered articles, and of the
    filtered ones only what concerns its partition (by their mappings, with precomputed partitions;
    ``scheme`` None: every change, as SetupBelongs evaluates them at the sync; so for articles with
    partition_options = 3, which have no mappings); and the lowest generation holding one."""
    at_sync = evaluated_at_sync(arts, scheme, True) if scheme is not None else frozenset()
    filtered = {a.nickname for a in arts if scheme is not None and scheme.articles[a.name].filtered
                and a.nickname not in at_sync}
    whole = [a.nickname for a in arts if a.nickname not in filtered]
    n, lowest = _count_after(pub, whole, registered.sentgen, exclude_received_from=registered.replnickname)
    if filtered and registered.partition_id is not None:
        m, g = _count_for_partition(pub, sorted(filtered), registered.sentgen, registered.partition_id,
                                    registered.replnickname)
        n, lowest = n + m, _lower(lowest, g)
    return n, lowest


def _count_for_partition(replica: Replica, nicknames: list[int], after: int | None, partition_id: int,
                         exclude_received_from: int | None) -> tuple[int, int | None]:
    """Changes of filtered articles after ``after`` for one partition (as of the last partition
    evaluation): upserts of rows in it, deletes and removals of rows that left it; and the lowest
    generation holding one."""
    if not nicknames:
        return 0, None
    p = replica.p
    nick_list = ", ".join(str(int(n)) for n in nicknames)
    gh, cur, past = (replica.meta(t) for t in ("MSmerge_genhistory", "MSmerge_current_partition_mappings",
                                                "MSmerge_past_partition_mappings"))
    excl, params = "", [int(after or 0)]
    if exclude_received_from is not None:
        excl = (f" AND x.generation NOT IN (SELECT generation FROM {gh} WHERE genstatus = {GenStatus.RECEIVED:d} "
                f"AND source_nickname = {p})")
        params.append(exclude_received_from)
    logged = pending.count(replica, nicknames, after, partition_id)    # rows of the partition changed since
    ups, g1 = replica.aggregate(
        f"SELECT count(*), min(x.generation) FROM {replica.meta('MSmerge_contents')} x JOIN {cur} cm "
        f"ON cm.tablenick = x.tablenick AND cm.rowguid = x.rowguid AND cm.partition_id = {int(partition_id)} "
        f"WHERE x.tablenick IN ({nick_list}) AND x.generation > {p}{excl}", params)
    gone, g2 = replica.aggregate(
        f"SELECT count(DISTINCT x.rowguid), min(x.generation) FROM {past} x WHERE x.partition_id = {int(partition_id)} "
        f"AND x.tablenick IN ({nick_list}) AND x.generation > {p} AND NOT EXISTS (SELECT 1 FROM {cur} cm "
        f"WHERE cm.tablenick = x.tablenick AND cm.rowguid = x.rowguid AND cm.partition_id = x.partition_id)",
        [int(after or 0)])
    lowest = _lower(g1, g2)
    if logged:
        lowest = _lower(lowest, replica.dialect.current_open_generation(replica))
    return int(ups or 0) + int(gone or 0) + logged, lowest


def _expires_at(retention_days: int | None, r: SubscriptionRow) -> str | None:
    """When the subscription expires if it does not merge before (its publication's retention after its
    last merge, or its creation); None: retention 0, it never expires."""
    last = r.last_sync_date or r.created_at
    if not retention_days or last is None:
        return None
    last = last if last.tzinfo is not None else last.replace(tzinfo=dt.UTC)
    return iso(last + dt.timedelta(days=retention_days))


def _failed_count(replica: Replica, source_nick: int | None) -> int:
    """Changes from ``source_nick`` that failed here and wait to be tried again."""
    if source_nick is None:
        return 0
    return int(replica.scalar(f"SELECT count(*) FROM {replica.meta('MSmerge_failed_changes')} "
                              f"WHERE source_nickname = {int(source_nick)}") or 0)


def _refused_claims(pub: Replica, source_nick: int | None) -> list[str]:
    """A replica's changes the publisher refused for what they claim (a lineage out of range or beyond
    what the publisher had, a version far above the row's history): its database was edited or damaged.
    One line saying so, or none."""
    if source_nick is None:
        return []
    rows = pub.query(f"SELECT count(*), min(reason) FROM {pub.meta('MSmerge_failed_changes')} "
                     f"WHERE source_nickname = {int(source_nick)} AND reason LIKE {pub.p}", [f"{REFUSED}%"])
    n, example = rows[0] if rows else (0, None)
    if not n:
        return []
    return [f"the publisher refused {n} of its change(s) for what they claim ({str(example)[:300]}): its database "
            "was edited or is damaged, and those rows stay as the publisher has them"]


def _waiting(replica: Replica) -> list[str]:
    """Closed generations that cannot be sent yet, and the open transactions they wait for."""
    gh = replica.meta("MSmerge_genhistory")
    unsettled = [int(g) for (g,) in replica.query(
        f"SELECT generation FROM {gh} WHERE genstatus > {GenStatus.OPEN:d} AND settled = 0 ORDER BY generation")]
    return [w.describe() for w in waiting_writers(replica, unsettled)]


def gather_status(topology: Topology) -> dict[str, Any]:
    """Every publication and subscription: watermarks, what is pending and since when, the last run of
    each agent and its error; ``ok`` is False (``problems`` says why) while anything is stopped,
    damaged, unreachable, expired or inactive."""
    out = _merge_status(topology)
    if topology.publications_of_kind("transactional"):

        out["transactional"] = gather(topology)
    now = dt.datetime.now(dt.UTC)
    out["time"] = now.isoformat()
    _add_ages(out, now)
    out["problems"] = _problems(out)
    out["ok"] = not out["problems"]
    return out


BAD_STATES = ("stopped", "damaged", "unreachable", "expired", "inactive")


def _entries(st: dict[str, Any]) -> list[tuple[str, dict]]:
    """Every publication and subscription entry, merge and transactional: (kind, entry)."""
    tx = st.get("transactional") or {}
    return [("publication", e) for e in st["publications"] + tx.get("publications", [])] + \
        [("subscription", e) for e in st["subscriptions"] + tx.get("subscriptions", [])]


def _add_ages(st: dict[str, Any], now: dt.datetime) -> None:
    """Beside every ``oldest_*`` timestamp, its age in seconds (``oldest_*_age``)."""
    for _, e in _entries(st):
        for k in [k for k in e if k.startswith("oldest_")]:
            e[f"{k}_age"] = age_seconds(e[k], now)


def _problems(st: dict[str, Any]) -> list[str]:
    """One line per database, publication or subscription that is not replicating, and why."""
    out = []
    distributor = (st.get("transactional") or {}).get("distributor") or {}
    if distributor.get("state") == "unreachable":
        out.append(f"distributor: unreachable: {distributor.get('error', '')}")
    for kind, e in _entries(st):
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
            "open_generation": pub.dialect.current_open_generation(pub), "enumeration_bound": enumeration_bound(pub)})
        waiting = _waiting(pub)
        if waiting:
            out["publisher"]["waiting"] = waiting
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
            filtered = ({"partitions": describe_partitions(pub, prow.pubid, arts, scheme, precomputed)}
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
            sub_rows = {r.name: r for r in store.select(pub, SubscriptionRow, {"pubid": prow.pubid})}
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
                pending, lowest = _pending_download(pub, arts, scheme if precomputed else None, r)
                entry.update({"status": "stopped" if "stopped_since" in runs else "active",
                              "last_sync": iso(r.last_sync_date), "expires_at": _expires_at(prow.retention, r),
                              "nickname": r.replnickname, "partition_id": r.partition_id,
                              "publisher_sentgen": r.sentgen, "publisher_recgen": r.recgen,
                              "pending_download": pending,
                              "oldest_pending_download": iso(_generation_time(pub, lowest)),
                              "failed_upload": _failed_count(pub, r.replnickname), **runs})
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
                        up, lowest = _count_after(sub, nicks, entry.get("subscriber_sentgen"),
                                                  exclude_received_from=pub_nick)
                        entry["pending_upload"] = up
                        entry["oldest_pending_upload"] = iso(_generation_time(sub, lowest))
                        entry["failed_download"] = _failed_count(sub, pub_nick)
                        waiting = _waiting(sub)
                        if waiting:
                            entry["waiting"] = waiting
                        damaged = replica_problems(sub, prow.pubid) + [
                            f"{line}; run 'sparksync reinit --subscription {s.name} --upload-first'"
                            for line in _refused_claims(pub, r.replnickname)]
                        if damaged:
                            entry["status"] = "damaged"
                            entry["problems"] = damaged
                except ReplicaDamaged as e:
                    entry["status"] = "damaged"
                    entry["problems"] = [e.message]
                except SparksyncError as e:
                    entry["status"] = "unreachable"
                    entry["error"] = e.message
                out["subscriptions"].append(entry)
            for s in topology.web_subscriptions_of(pcfg.name):
                out["subscriptions"].append(_web_subscription(pub, s, sub_rows.get(s.name), prow, arts,
                                                              scheme if precomputed else None))
    return out


def _web_subscription(pub, s, r: SubscriptionRow | None, prow, arts, scheme) -> dict[str, Any]:
    """A web subscription as the publisher knows it (its database is on the device: what is pending there
    is the device's to say, at its next sync)."""
    entry: dict[str, Any] = {"name": s.name, "publication": prow.name, "transport": "web", "database": None,
                             "subscriber_type": s.subscriber_type, "priority": s.effective_priority,
                             "host_name": s.host_name, **({"login": s.login} if s.login is not None else {})}
    if r is None or not r.active:
        entry["status"] = "not initialized" if r is None else "waiting for its device's first sync"
        return entry
    expired = expiry(prow.retention, r, store.utcnow())
    if expired is not None:
        entry.update({"status": "expired", "problems": [expired]})
        return entry
    pending, lowest = _pending_download(pub, arts, scheme, r)
    runs = agent_state(pub, "MSmerge_sessions", f"pubid = {pub.dialect.uuid_param()} AND subscription = {pub.p}",
                       [prow.pubid, s.name], ("succeeded",))
    entry.update({"status": "stopped" if "stopped_since" in runs else "active", **runs,
                  "nickname": r.replnickname, "partition_id": r.partition_id,
                  "publisher_sentgen": r.sentgen, "publisher_recgen": r.recgen,
                  "last_sync": iso(r.last_sync_date), "expires_at": _expires_at(prow.retention, r),
                  "pending_download": pending,
                  "oldest_pending_download": iso(_generation_time(pub, lowest)),
                  "failed_upload": _failed_count(pub, r.replnickname)})
    refused = _refused_claims(pub, r.replnickname)
    if refused:
        entry.update({"status": "damaged", "problems": [f"{refused[0]}; initialize a new file on the device "
                                                        "('sparksync sync --reinitialize --upload-first')"]})
    return entry
