"""Reading logged conflicts back (``sparksync conflicts``), from the publisher and the subscribers."""

from __future__ import annotations

from typing import Any

from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import SparksyncError
from sparksync.merge.conflicts.model import ConflictType, conflict_table_name
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, FailedChangeRow, PublicationRow, SubscriptionRow
from sparksync.types import arrow_converter


def _from(replica: Replica, where: str, topology: Topology, publication: str | None, article: str | None) -> list[dict]:
    if store.metadata_version(replica) is None:
        return []
    pubs = {r.pubid: r.name for r in store.select(replica, PublicationRow)}
    out = []
    for pubid, pname in pubs.items():
        if publication and pname != publication:
            continue
        arts = {a.nickname: (a, tracked_article(a)) for a in published_articles(replica, pubid)}
        for c in store.select_rows(replica, "MSmerge_conflicts_info", {"pubid": pubid}, order_by=("create_time",)):
            a_row, art = arts.get(c["tablenick"], (None, None))
            name = a_row.name if a_row else str(c["tablenick"])
            if article and article not in (name, name.split(".")[-1]):
                continue
            losing = None
            if art is not None:
                d = replica.dialect
                table = d.metadata_table_sql(conflict_table_name(pname, art))
                try:
                    cols = list(art.info.columns)
                    row = replica.query_one(
                        f"SELECT {', '.join(d.quote(x.name) for x in cols)} FROM {table} WHERE {d.quote('conflict_id')} "
                        f"= {d.uuid_param()}", [c["conflict_id"]])
                    if row is not None:
                        losing = {x.name: arrow_converter(x.type)(v) for x, v in zip(cols, row)}
                except SparksyncError:
                    losing = None
            out.append({**c, "logged_at": where, "publication": pname, "article": name,
                        "primary_key": list(art.info.primary_key) if art is not None else [],
                        "conflict_type_name": ConflictType(c["conflict_type"]).label, "losing_row": losing})
    return out


def list_conflicts(topology: Topology, publication: str | None = None, article: str | None = None) -> list[dict[str, Any]]:
    if publication:
        topology.publication(publication)
    rows = []
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        rows += _from(pub, topology.publisher.name, topology, publication, article)
    for s in topology.direct_subscriptions:
        if (publication and s.publication != publication) or topology.publication(s.publication).kind != "merge":
            continue
        try:
            with connect(topology.subscriber_url(s), s.name) as sub:
                rows += _from(sub, s.name, topology, publication, article)
        except SparksyncError:
            continue
    return sorted(rows, key=lambda r: str(r["create_time"]))


def _failed_from(replica: Replica, where: str, publisher_nick: int, names: dict[int, str],
                 publication: str | None, article: str | None) -> list[dict]:
    if store.metadata_version(replica) is None:
        return []
    arts: dict[int, tuple[str, str]] = {}
    pubs = {r.pubid: r.name for r in store.select(replica, PublicationRow)}
    for a in store.select(replica, ArticleRow):
        arts.setdefault(a.nickname, (pubs.get(a.pubid, "?"), a.name))
    ident = store.replica_identity(replica)
    out = []
    for f in store.select(replica, FailedChangeRow, order_by=("first_time",)):
        pname, aname = arts.get(f.tablenick, ("?", str(f.tablenick)))
        if publication and pname != publication:
            continue
        if article and article not in (aname, aname.split(".")[-1]):
            continue
        upload = ident is not None and ident.nickname == publisher_nick
        out.append({**f.to_dict(), "where": where, "publication": pname, "article": aname,
                    "direction": "upload" if upload else "download",
                    "subscription": names.get(f.source_nickname, str(f.source_nickname)) if upload else where,
                    "conflict_type_name": ConflictType(f.conflict_type).label})
    return out


def list_failed_changes(topology: Topology, publication: str | None = None,
                        article: str | None = None) -> list[dict[str, Any]]:
    """The failed changes waiting at every replica to be tried again (MSmerge_failed_changes): the
    publisher's come from uploads, a subscriber's from downloads."""
    if publication:
        topology.publication(publication)
    rows = []
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        names = {}
        if store.metadata_version(pub) is not None:
            names = {r.replnickname: r.name for r in store.select(pub, SubscriptionRow)}
        rows += _failed_from(pub, topology.publisher.name, 1, names, publication, article)
    for s in topology.direct_subscriptions:
        if (publication and s.publication != publication) or topology.publication(s.publication).kind != "merge":
            continue
        try:
            with connect(topology.subscriber_url(s), s.name) as sub:
                rows += _failed_from(sub, s.name, 1, names, publication, article)
        except SparksyncError:
            continue
    return rows
