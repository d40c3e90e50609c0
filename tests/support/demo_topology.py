"""The demo's AdventureWorks-like database as a merge publication: publisher HQ (``create_demo_database``)
publishing its tables as ``Sales`` (Product with column tracking), subscribers S1, S2, ... of the
kinds asked for (the odd ones global, with priorities)."""

from __future__ import annotations

from pathlib import Path

from sparksync.demo.adventureworks import article_names, create_demo_database
from sparksync.dialects import connect
from sparksync.topology import parse_topology

from .databases import Databases


def build(dbs: Databases, tmp_path: Path, pub_kind: str, sub_kinds: list[str], **demo):
    pub_url = dbs.url(pub_kind, "hq")
    with connect(pub_url) as r:
        create_demo_database(r, customers=20, products=8, orders=30, vendors=4, employees=5, **demo)
        supports = r.dialect.capabilities.supports_schemas
    data = {
        "publisher": {"name": "HQ", "database": pub_url, "snapshot_dir": str(tmp_path / "snap")},
        "publications": [{"name": "Sales", "articles": [
            {"table": n, **({"column_tracking": True} if n == "Product" else {})} for n in article_names(supports)]}],
        "subscriptions": [
            {"name": f"S{i}", "publication": "Sales", "database": dbs.url(k, f"s{i}"),
             **({"subscriber_type": "global", "priority": 50.0 + i} if i % 2 else {})}
            for i, k in enumerate(sub_kinds, 1)],
    }
    return data, parse_topology(data, tmp_path)
