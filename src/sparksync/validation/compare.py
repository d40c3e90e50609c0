"""Validation: do the replicas hold the same rows? (SQL Server's rowcount + checksum, by row.)

Rows are compared by rowguid after normalizing every value through its logical type, so a
PostgreSQL publisher and a SQLite subscriber compare equal when they hold the same data.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.model import from_table_dict
from sparksync.dialects.replica import Replica
from sparksync.filters import parse_filter
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import PublicationRow
from sparksync.names import TableName
from sparksync.transactional.distribution import database as dst
from sparksync.types import Kind, arrow_converter


@dataclass
class Difference:
    subscription: str
    article: str
    missing: int          # rows at the publisher, not at the subscriber
    extra: int            # rows at the subscriber, not at the publisher
    changed: int          # same rowguid, other values


def _rows(replica: Replica, table: TableName | str, columns, key: str | list[str], where: str = "") -> dict:
    """Rows by key (a column, or several), every value normalized through its logical type (``table``: a table, or
    a relation's SQL)."""
    d = replica.dialect
    convs = [arrow_converter(c.type) for c in columns]
    floats = [c.type.kind in (Kind.REAL, Kind.DOUBLE, Kind.DECIMAL) for c in columns]
    names = [c.name for c in columns]
    keys = [names.index(k) for k in ([key] if isinstance(key, str) else key)]
    out = {}
    relation = table if isinstance(table, str) else d.table_sql(table)
    for row in replica.query(f"SELECT {', '.join(d.quote(n) for n in names)} FROM {relation} AS x{where}"):
        vals = tuple(float(f"{float(v):.15g}") if (v is not None and fl) else v
                     for v, fl in zip((c(x) for c, x in zip(convs, row)), floats))
        out[str(vals[keys[0]]) if len(keys) == 1 else tuple(str(vals[i]) for i in keys)] = vals
    return out


def _difference(subscription: str, article: str, theirs: dict, mine: dict) -> Difference | None:
    missing = len(set(theirs) - set(mine))
    extra = len(set(mine) - set(theirs))
    changed = sum(1 for k in set(mine) & set(theirs) if mine[k] != theirs[k])
    return Difference(subscription, article, missing, extra, changed) if missing or extra or changed else None


def compare_replicas(topology: Topology, publication: str) -> tuple[list[Difference], int]:
    """Differences between the publisher and each subscriber of ``publication``; and rows compared."""
    diffs: list[Difference] = []
    total = 0
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        prow = store.select(pub, PublicationRow, {"name": publication})[0]
        articles = published_articles(pub, prow.pubid)
        base = {}
        for a in articles:
            info = from_table_dict(a.table_schema)
            base[a.name] = _rows(pub, identity.rows_sql(pub.dialect, tracked_article(a)), info.columns,
                                 a.rowguid_column)
            total += len(base[a.name])
    for s in topology.subscriptions_of(publication):
        with connect(topology.subscriber_url(s), s.name) as sub:
            for a in published_articles(sub, prow.pubid):
                info = from_table_dict(a.table_schema)
                mine = _rows(sub, identity.rows_sql(sub.dialect, tracked_article(a)), info.columns, a.rowguid_column)
                diff = _difference(s.name, a.name, base.get(a.name, {}), mine)
                if diff is not None:
                    diffs.append(diff)
    return diffs, total


def compare_transactional(topology: Topology, publication: str) -> tuple[list[Difference], int]:
    """Transactional validation: does each active subscription hold the publisher's published rows
    (row filter) and columns (column filter)? Rows are compared by primary key."""

    diffs: list[Difference] = []
    total = 0
    with connect(topology.distributor_url, "distributor") as dist:
        p = dst.require_publication(dist, publication)
        active = {s.subscription for s in dst.subscriptions(dist, p.publication_id) if s.active}
    articles = [a for a in p.articles if a.active]
    base = {}
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        d = pub.dialect
        for a in articles:
            info = from_table_dict(a.table_schema)
            where = ""
            if a.filter:
                f = parse_filter(a.filter, info.column_names, a.name)
                where = " WHERE " + f.sql_for(d.capabilities.sql, info.columns)
            base[a.name] = _rows(pub, TableName(a.source_schema, a.source_table), info.columns,
                                    list(info.primary_key), where)
            total += len(base[a.name])
    for s in topology.subscriptions_of(publication):
        if s.name not in active:
            continue
        with connect(topology.subscriber_url(s), s.name) as sub:
            for a in articles:
                info = from_table_dict(a.table_schema)
                table = sub.dialect.destination_table(TableName(a.source_schema, a.source_table))
                diff = _difference(s.name, a.name, base[a.name],
                                   _rows(sub, table, info.columns, list(info.primary_key)))
                if diff is not None:
                    diffs.append(diff)
    return diffs, total
