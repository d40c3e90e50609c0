"""Tracer tokens (SQL Server's sp_posttracertoken): a marker posted at the publisher that travels
the replication path like a transaction. The log reader stores it at the distributor, the
distribution agent commits it at each subscriber; the three times give the latency from publisher
to distributor and from distributor to each subscriber. A token posted on PostgreSQL is a logical
decoding message (``pg_logical_emit_message``) in a transaction of its own; on SQLite, a row of
the capture log. Tokens are kept for the distributor's ``history_retention``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.errors import ConfigurationError
from sparksync.metadata import store
from sparksync.transactional.capture import capture_method
from sparksync.transactional.distribution import database as dst


@dataclass
class TokenReport:
    tracer_id: str
    publication: str
    posted: dt.datetime | None
    publisher_commit: dt.datetime | None
    distributor_commit: dt.datetime | None
    subscribers: dict[str, dt.datetime | None] = field(default_factory=dict)   # None: pending

    @property
    def publisher_to_distributor(self) -> float | None:
        if self.publisher_commit is None or self.distributor_commit is None:
            return None
        return (self.distributor_commit - self.publisher_commit).total_seconds()

    def distributor_to(self, subscription: str) -> float | None:
        t = self.subscribers.get(subscription)
        if t is None or self.distributor_commit is None:
            return None
        return (t - self.distributor_commit).total_seconds()

    @property
    def complete(self) -> bool:
        return self.distributor_commit is not None and all(v is not None for v in self.subscribers.values())

    def to_dict(self) -> dict:
        return {
            "tracer_id": self.tracer_id, "publication": self.publication, "posted": _iso(self.posted),
            "publisher_commit": _iso(self.publisher_commit), "distributor_commit": _iso(self.distributor_commit),
            "publisher_to_distributor": self.publisher_to_distributor,
            "subscribers": {s: {"subscriber_commit": _iso(t), "distributor_to_subscriber": self.distributor_to(s),
                                "total": (None if t is None or self.publisher_commit is None
                                          else (t - self.publisher_commit).total_seconds())}
                            for s, t in self.subscribers.items()},
        }


def _iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def post(topology: Topology, publication: str) -> str:
    """Post a tracer token into the publication's log; returns its id."""
    if topology.publication(publication).kind != "transactional":
        raise ConfigurationError(f"publication {publication} is not transactional: tracer tokens measure "
                                 "transactional replication", obj=publication)
    tracer_id = store.new_guid()
    content = {"tracer_id": tracer_id, "publication": publication, "posted": store.utcnow().isoformat()}
    with connect(topology.distributor_url, "distributor") as dist:
        dst.require(dist)
        dst.require_publication(dist, publication)
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        with pub.transaction():
            capture_method(pub).post_marker(pub, publication, "token", content)
    return tracer_id


def report(topology: Topology, publication: str, tracer_id: str) -> TokenReport:
    """Where the token is: its times at the distributor and at every active subscription."""
    with connect(topology.distributor_url, "distributor") as dist:
        p = dst.require_publication(dist, publication)
        return _report(dist, publication, tracer_id, _active(dist, p))


def recent(topology: Topology, publication: str, limit: int = 20) -> list[TokenReport]:
    """The publication's last ``limit`` tokens to reach the distributor, newest first."""
    with connect(topology.distributor_url, "distributor") as dist:
        p = dst.require_publication(dist, publication)
        ids = [r[0] for r in dist.query(
            f"SELECT tracer_id FROM {dist.meta('MStracer_tokens')} WHERE publication_id = {dist.dialect.uuid_param()} "
            f"ORDER BY distributor_commit DESC LIMIT {int(limit)}", [p.publication_id])]
        active = _active(dist, p)
        return [_report(dist, publication, str(i), active) for i in ids]


def _active(dist, p: dst.Publication) -> list[str]:
    return [s.subscription for s in dst.subscriptions(dist, p.publication_id) if s.active]


def _report(dist, publication: str, tracer_id: str, active: list[str]) -> TokenReport:
    rows = store.select_rows(dist, "MStracer_tokens", {"tracer_id": tracer_id})
    history = {r["subscription"]: r["subscriber_commit"]
               for r in store.select_rows(dist, "MStracer_history", {"tracer_id": tracer_id})}
    r = rows[0] if rows else {}
    return TokenReport(tracer_id, publication, r.get("posted_time"), r.get("publisher_commit"),
                       r.get("distributor_commit"), {s: history.get(s) for s in active})
