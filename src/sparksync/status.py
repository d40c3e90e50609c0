"""``status``: publications, articles and nicknames, subscriptions and their watermarks."""

from __future__ import annotations

from typing import Any

from .config import Topology
from .dialects import connect
from .dialects.replica import Replica, redact_url
from .errors import ReplicaDamaged, SparksyncError
from .merge.evaluation import describe_partitions, evaluated_at_sync
from .merge.expiration import expiry
from .merge.generations import enumeration_bound, waiting_writers
from .merge.integrity import check_identity, check_not_behind, replica_problems
from .merge.partitions import scheme_of
from .metadata import store


def _count_after(replica: Replica, nicknames: list[int], after: int | None, exclude_received_from: int | None = None) -> int:
    if not nicknames:
        return 0
    p = replica.p
    nick_list = ", ".join(str(int(n)) for n in nicknames)
    gh = replica.meta("MSmerge_genhistory")
    excl = ""
    params: list[Any] = [int(after or 0)]
    if exclude_received_from is not None:
        excl = f" AND generation NOT IN (SELECT generation FROM {gh} WHERE genstatus = 2 AND source_nickname = {p})"
        params.append(exclude_received_from)
    total = 0
    for t in ("MSmerge_contents", "MSmerge_tombstone"):
        total += int(replica.scalar(
            f"SELECT count(*) FROM {replica.meta(t)} WHERE tablenick IN ({nick_list}) AND generation > {p}{excl}",
            params) or 0)
    return total


def _pending_download(pub: Replica, arts: list[dict], scheme, registered: dict) -> int:
    """What the publisher has for a subscription: every change of its unfiltered articles, and of the
    filtered ones only what concerns its partition (by their mappings, with precomputed partitions;
    ``scheme`` None: every change, as SetupBelongs evaluates them at the sync; so for articles with
    partition_options = 3, which have no mappings)."""
    at_sync = evaluated_at_sync(arts, scheme, True) if scheme is not None else frozenset()
    filtered = {int(a["nickname"]) for a in arts if scheme is not None and scheme.articles[a["name"]].filtered
                and int(a["nickname"]) not in at_sync}
    whole = [a["nickname"] for a in arts if int(a["nickname"]) not in filtered]
    n = _count_after(pub, whole, registered["sentgen"], exclude_received_from=registered["replnickname"])
    if filtered and registered.get("partition_id") is not None:
        n += _count_for_partition(pub, sorted(filtered), registered["sentgen"], int(registered["partition_id"]),
                                  registered["replnickname"])
    return n


def _count_for_partition(replica: Replica, nicknames: list[int], after: int | None, partition_id: int,
                         exclude_received_from: int | None) -> int:
    """Changes of filtered articles after ``after`` for one partition (as of the last partition
    evaluation): upserts of rows in it, deletes and removals of rows that left it."""
    if not nicknames:
        return 0
    p = replica.p
    nick_list = ", ".join(str(int(n)) for n in nicknames)
    gh, cur, past = (replica.meta(t) for t in ("MSmerge_genhistory", "MSmerge_current_partition_mappings",
                                                "MSmerge_past_partition_mappings"))
    excl, params = "", [int(after or 0)]
    if exclude_received_from is not None:
        excl = f" AND x.generation NOT IN (SELECT generation FROM {gh} WHERE genstatus = 2 AND source_nickname = {p})"
        params.append(exclude_received_from)
    ups = replica.scalar(
        f"SELECT count(*) FROM {replica.meta('MSmerge_contents')} x JOIN {cur} cm ON cm.tablenick = x.tablenick "
        f"AND cm.rowguid = x.rowguid AND cm.partition_id = {int(partition_id)} "
        f"WHERE x.tablenick IN ({nick_list}) AND x.generation > {p}{excl}", params)
    gone = replica.scalar(
        f"SELECT count(DISTINCT x.rowguid) FROM {past} x WHERE x.partition_id = {int(partition_id)} "
        f"AND x.tablenick IN ({nick_list}) AND x.generation > {p} AND NOT EXISTS (SELECT 1 FROM {cur} cm "
        f"WHERE cm.tablenick = x.tablenick AND cm.rowguid = x.rowguid AND cm.partition_id = x.partition_id)",
        [int(after or 0)])
    return int(ups or 0) + int(gone or 0)


def _failed_count(replica: Replica, source_nick: int | None) -> int:
    """Changes from ``source_nick`` that failed here and wait to be tried again."""
    if source_nick is None:
        return 0
    return int(replica.scalar(f"SELECT count(*) FROM {replica.meta('MSmerge_failed_changes')} "
                              f"WHERE source_nickname = {int(source_nick)}") or 0)


def _waiting(replica: Replica) -> list[str]:
    """Closed generations that cannot be sent yet, and the open transactions they wait for."""
    gh = replica.meta("MSmerge_genhistory")
    unsettled = [int(g) for (g,) in replica.query(
        f"SELECT generation FROM {gh} WHERE genstatus > 0 AND settled = 0 ORDER BY generation")]
    return [w.describe() for w in waiting_writers(replica, unsettled)]


def gather_status(topology: Topology) -> dict[str, Any]:
    out = _merge_status(topology)
    if topology.publications_of_kind("transactional"):
        from .transactional.status import gather

        out["transactional"] = gather(topology)
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
        ident = store.replica_identity(pub)
        pub_nick = ident.nickname if ident else None     # None: damaged, reported by replica_problems
        out["publisher"].update({
            "state": "published", "replica_nickname": pub_nick,
            "open_generation": pub.dialect.current_open_generation(pub), "enumeration_bound": enumeration_bound(pub)})
        waiting = _waiting(pub)
        if waiting:
            out["publisher"]["waiting"] = waiting
        pub_rows = {r["name"]: r for r in store.select_rows(pub, "sysmergepublications")}
        for pcfg in topology.publications_of_kind("merge"):
            prow = pub_rows.get(pcfg.name)
            if prow is None:
                out["publications"].append({"name": pcfg.name, "state": "not published"})
                continue
            arts = store.select_rows(pub, "sysmergearticles", {"pubid": prow["pubid"]}, order_by=("nickname",))
            articles = []
            for a in arts:
                from .names import TableName

                t = TableName(a["source_schema"], a["source_table"])
                articles.append({
                    "name": a["name"], "nickname": a["nickname"], "processing_group": a["processing_group"],
                    "column_tracking": bool(a["column_tracking"]), "rowguid_column": a["rowguid_column"],
                    "related_nicknames": a["related_nicknames"],
                    "triggers": len(pub.dialect.list_merge_triggers(pub, t)),
                    "rows": pub.scalar(f"SELECT count(*) FROM {pub.table_sql(t)}"),
                })
            damaged = replica_problems(pub, prow["pubid"])
            scheme = scheme_of(arts)
            precomputed = prow.get("use_partition_groups") in (None, 1)
            filtered = ({"partitions": describe_partitions(pub, prow["pubid"], arts, scheme, precomputed)}
                        if scheme.filtered else {})
            out["publications"].append({
                "name": pcfg.name, "pubid": prow["pubid"], "kind": prow["kind"],
                "state": "damaged" if damaged else "published", **({"problems": damaged} if damaged else {}),
                "snapshot_generation": prow["snapshot_generation"],
                "snapshot_time": prow["snapshot_time"].isoformat() if prow["snapshot_time"] else None,
                "generation_leveling_threshold": prow["generation_leveling_threshold"], "articles": articles,
                "retention": prow["retention"], "schema_version": int(prow.get("schema_version") or 0),
                "cleanup_generation": prow.get("cleanup_generation"),
                **filtered})
            nicks = [a["nickname"] for a in arts]
            sub_rows = {r["name"]: r for r in store.select_rows(pub, "sysmergesubscriptions", {"pubid": prow["pubid"]})}
            for s in topology.subscriptions_of(pcfg.name):
                r = sub_rows.get(s.name)
                entry: dict[str, Any] = {
                    "name": s.name, "publication": pcfg.name,
                    "database": redact_url(topology.resolve_url(s.database)),
                    "subscriber_type": s.subscriber_type, "priority": s.effective_priority, "host_name": s.host_name,
                    **({"login": s.login} if s.login is not None else {})}
                if r is None or r["status"] != 1:
                    entry["status"] = "not initialized"
                    out["subscriptions"].append(entry)
                    continue
                expired = expiry(prow.get("retention"), r, store.utcnow())
                if expired is not None:
                    entry.update({"status": "expired", "problems": [expired]})
                    out["subscriptions"].append(entry)
                    continue
                entry.update({"status": "active", "nickname": r["replnickname"], "partition_id": r["partition_id"],
                              "publisher_sentgen": r["sentgen"], "publisher_recgen": r["recgen"],
                              "pending_download": _pending_download(pub, arts, scheme if precomputed else None, r),
                              "failed_upload": _failed_count(pub, r["replnickname"])})
                try:
                    with connect(topology.resolve_url(s.database), s.name) as sub:
                        store.require_metadata(sub)
                        check_identity(sub, s.name, r)
                        check_not_behind(sub, s.name, r, prow["pubid"])
                        prow_sub = store.select_rows(sub, "sysmergesubscriptions",
                                                     {"pubid": prow["pubid"], "role": "publisher"})
                        if prow_sub:
                            entry["subscriber_recgen"] = prow_sub[0]["recgen"]
                            entry["subscriber_sentgen"] = prow_sub[0]["sentgen"]
                        entry["open_generation"] = sub.dialect.current_open_generation(sub)
                        entry["pending_upload"] = _count_after(sub, nicks, entry.get("subscriber_sentgen"),
                                                               exclude_received_from=pub_nick)
                        entry["failed_download"] = _failed_count(sub, pub_nick)
                        waiting = _waiting(sub)
                        if waiting:
                            entry["waiting"] = waiting
                        damaged = replica_problems(sub, prow["pubid"])
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
    return out
