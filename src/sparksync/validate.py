"""Validation: do the replicas hold the same rows? (SQL Server's rowcount + checksum, by row.)

Rows are compared by rowguid after normalizing every value through its logical type, so a
PostgreSQL publisher and a SQLite subscriber compare equal when they hold the same data.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import Topology
from .dialects import connect
from .dialects.base import Replica, from_table_dict
from .merge.publish import published_articles
from .metadata import store
from .names import TableName
from .types import Kind, arrow_converter


@dataclass
class Difference:
    subscription: str
    article: str
    missing: int          # rows at the publisher, not at the subscriber
    extra: int            # rows at the subscriber, not at the publisher
    changed: int          # same rowguid, other values


def _rows(replica: Replica, table: TableName, columns, rowguid: str) -> dict[str, tuple]:
    d = replica.dialect
    convs = [arrow_converter(c.type) for c in columns]
    floats = [c.type.kind in (Kind.REAL, Kind.DOUBLE, Kind.DECIMAL) for c in columns]
    names = [c.name for c in columns]
    out = {}
    for row in replica.query(f"SELECT {', '.join(d.quote(n) for n in names)} FROM {d.table_sql(table)}"):
        vals = tuple(float(f"{float(v):.15g}") if (v is not None and fl) else v
                     for v, fl in zip((c(x) for c, x in zip(convs, row)), floats))
        out[str(vals[names.index(rowguid)])] = vals
    return out


def compare_replicas(topology: Topology, publication: str) -> tuple[list[Difference], int]:
    """Differences between the publisher and each subscriber of ``publication``; and rows compared."""
    diffs: list[Difference] = []
    total = 0
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        prow = store.select_rows(pub, "sysmergepublications", {"name": publication})[0]
        articles = published_articles(pub, prow["pubid"])
        base = {}
        for a in articles:
            info = from_table_dict(a["table_schema"])
            base[a["name"]] = _rows(pub, TableName(a["source_schema"], a["source_table"]), info.columns,
                                    a["rowguid_column"])
            total += len(base[a["name"]])
    for s in topology.subscriptions_of(publication):
        with connect(topology.resolve_url(s.database), s.name) as sub:
            for a in published_articles(sub, prow["pubid"]):
                info = from_table_dict(a["table_schema"])
                mine = _rows(sub, TableName(a["source_schema"], a["source_table"]), info.columns, a["rowguid_column"])
                theirs = base.get(a["name"], {})
                missing = len(set(theirs) - set(mine))
                extra = len(set(mine) - set(theirs))
                changed = sum(1 for k in set(mine) & set(theirs) if mine[k] != theirs[k])
                if missing or extra or changed:
                    diffs.append(Difference(s.name, a["name"], missing, extra, changed))
    return diffs, total
