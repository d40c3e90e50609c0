"""The participants of a merge session: its endpoints, the links between them (one subscription, one
direction), what one direction plans, and the rules conflicts are resolved by."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparksync.config import PUBLISHER_PRIORITY, PublicationConfig
from sparksync.dialects.replica import Replica
from sparksync.merge.apply.decide import ArticleRules
from sparksync.merge.conflicts.resolvers import Replicas
from sparksync.merge.session.changes import (
    ALL_PARTITIONS,
)
from sparksync.merge.session.plan import BatchInfo, DestinationInfo, Route
from sparksync.merge.session.summary import SubscriptionSession
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, Role, SubscriberType, SubscriptionRow
from sparksync.names import TableName
from sparksync.spark.reads import ReadPartition


@dataclass(frozen=True)
class PublisherSchema:
    """The publication's schema at the publisher: its version, and the schema changes a subscriber
    that has an older one replays (``sysmergeschemachange`` rows)."""

    publication: str
    version: int
    changes: list[dict]


def article_rules(pubcfg: PublicationConfig, replica: Replica, articles: list[ArticleRow],
           search: str | None = None) -> dict[int, ArticleRules]:
    d = replica.dialect
    by_key = {str(d.resolve_name(a.table_name)): a for a in pubcfg.articles}
    out = {}
    for a in articles:
        key = str(TableName(a.source_schema, a.source_table))
        cfg = by_key.get(key)
        out[a.nickname] = ArticleRules(a.nickname, bool(a.column_tracking),
                                          cfg.resolver if cfg else "default", cfg.resolver_column if cfg else None,
                                          cfg.compensate_for_errors if cfg else False, search,
                                          cfg.business_logic if cfg else None,
                                          cfg.business_logic_timeout_s if cfg else 2.0)
    return out


def session_replicas(pub: Replica, pubid: str) -> Replicas:
    """This publication's replicas: a database subscribed to two publications has a priority and a
    subscriber type in each."""
    rows = store.select(pub, SubscriptionRow, {"pubid": pubid})
    prio, local, names = {}, set(), {}
    for r in rows:
        names[r.replnickname] = r.name
        if r.role is Role.PUBLISHER:
            prio[r.replnickname] = PUBLISHER_PRIORITY
        elif r.subscriber_type is SubscriberType.LOCAL:
            local.add(r.replnickname)
        else:
            prio[r.replnickname] = r.priority
    return Replicas(publisher=1, priority=prio, local=frozenset(local), names=names)


@dataclass(frozen=True)
class Endpoint:
    """One end of an exchange: the publisher or a subscriber, with its open connection."""

    name: str
    url: str
    nickname: int
    replica: Replica
    is_publisher: bool
    partition_id: int = ALL_PARTITIONS          # a subscriber of a filtered publication: its partition

    def partner_row(self, pubid: str, subscription: str) -> dict:
        """The key of this replica's ``sysmergesubscriptions`` row for its partner in ``subscription``:
        at the publisher the subscriber's row, at a subscriber the publisher's."""
        if self.is_publisher:
            return {"pubid": pubid, "name": subscription, "role": Role.SUBSCRIBER}
        return {"pubid": pubid, "role": Role.PUBLISHER}


@dataclass
class Link:
    """One subscription's exchange in one direction: ``source``'s changes to ``dest``."""

    subscription: str
    session: SubscriptionSession
    source: Endpoint
    dest: Endpoint
    order: int                                   # upload: configuration order (first to sync wins)
    batches: list[BatchInfo] = field(default_factory=list)


@dataclass
class DirectionPlan:
    """Everything one direction's Spark stage needs: the change reads, the routes of each source's
    generations to the destinations' batches, and the destinations."""

    links: list[Link] = field(default_factory=list)          # the links that could be planned
    reads: list[ReadPartition] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    destinations: dict[str, DestinationInfo] = field(default_factory=dict)
    changes: int = 0              # the changes its batches carry, all destinations together (an estimate)
