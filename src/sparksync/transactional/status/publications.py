"""``status`` for transactional publications: the log reader's position and what the publisher still
holds for it, what the distribution database queues, and each subscription's position and backlog."""

from __future__ import annotations

from typing import Any

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import redact_url
from sparksync.errors import SparksyncError
from sparksync.metadata import store
from sparksync.metadata.history import agent_state, iso
from sparksync.metadata.schema import DISTRIBUTION
from sparksync.transactional.capture import capture_method
from sparksync.transactional.delivery.subscriber import position
from sparksync.transactional.distribution import database as dst


def gather(topology: Topology) -> dict[str, Any]:
    out: dict[str, Any] = {"distributor": {"database": redact_url(topology.distributor_url)},
                           "publications": [], "subscriptions": []}
    pubs = topology.publications_of_kind("transactional")
    try:
        dist = connect(topology.distributor_url, "distributor")
    except SparksyncError as exc:
        out["distributor"].update({"state": "unreachable", "error": exc.message})
        return out
    with dist:
        if store.table_set_version(dist, DISTRIBUTION) is None:
            out["distributor"]["state"] = "not set up"
            out["publications"] = [{"name": p.name, "state": "not published"} for p in pubs]
            return out
        out["distributor"]["state"] = "ready"
        with connect(topology.publisher_url, topology.publisher.name) as pubdb:
            for pcfg in pubs:
                p = dst.publication(dist, pcfg.name)
                if p is None:
                    out["publications"].append({"name": pcfg.name, "state": "not published"})
                    continue
                u = dist.dialect.uuid_param()
                queued = dist.aggregate(f"SELECT count(*), coalesce(sum(commands), 0) FROM "
                                        f"{dist.meta('MSrepl_transactions')} WHERE publication_id = {u}",
                                        [p.publication_id])
                entry = {"name": p.name, "state": "published", "source": p.source, "slot": p.slot,
                         "logreader_seqno": p.logreader_seqno, "queued_transactions": int(queued[0]),
                         "queued_commands": int(queued[1]),
                         "articles": [{"article_id": a.article_id, "name": a.name, "filter": a.filter,
                                       "columns": len(a.table_schema["columns"]),
                                       "commands": [a.ins_cmd or "default", a.upd_cmd or "default",
                                                    a.del_cmd or "default"]}
                                      for a in p.articles if a.active]}
                entry.update(_publisher_side(pubdb, p))
                reader = agent_state(dist, "MSlogreader_history", f"publication_id = {u}", [p.publication_id],
                                     ("succeeded",))
                if reader:
                    entry.update({"agent": "logreader", **reader})
                    if "stopped_since" in reader:
                        entry["state"] = "stopped"
                out["publications"].append(entry)
                subs = {s.subscription: s for s in dst.subscriptions(dist, p.publication_id)}
                for s in topology.subscriptions_of(pcfg.name):
                    r = subs.get(s.name)
                    e: dict[str, Any] = {"name": s.name, "publication": p.name, "streams": s.subscription_streams,
                                         "database": redact_url(topology.subscriber_url(s)),
                                         "status": r.status.name.lower() if r else "not initialized",
                                         "delivered_seqno": r.delivered_seqno if r else None}
                    if r is not None and r.message:
                        e["message"] = r.message
                    if r is not None and r.active:
                        runs = agent_state(dist, "MSdistribution_history",
                                           f"publication_id = {u} AND subscription = {dist.p}",
                                           [p.publication_id, s.name], ("ok",))
                        e.update(runs)
                        if "stopped_since" in runs:
                            e["status"] = "stopped"
                        try:
                            with connect(topology.subscriber_url(s), s.name) as sub:
                                at = position(sub, p.name, s.name)
                            e["subscriber_seqno"] = at
                            e["pending_transactions"] = dst.pending(dist, p.publication_id, at or 0)
                            e["oldest_pending"] = iso(dst.oldest_pending(dist, p.publication_id, at or 0))
                        except SparksyncError as ex:
                            e["status"], e["error"] = "unreachable", ex.message
                    out["subscriptions"].append(e)
    return out


def _publisher_side(pubdb, p: dst.Publication) -> dict[str, Any]:
    """What the publisher holds for the log reader: the slot's retained log, or the log table's rows."""
    return capture_method(pubdb).backlog(pubdb, p)
