"""A merge publication made without Spark, for the contract tests: tables created (``PARENT_CHILD``),
published and tracked (``publish``), the tracking metadata read back (``contents``, ``tombstones``)."""

from __future__ import annotations

from pathlib import Path

from sparksync.dialects import connect
from sparksync.merge.publish.publication import apply_publication, plan_publication
from sparksync.merge.tracking import pending
from sparksync.metadata import store
from sparksync.topology import parse_topology

PARENT_CHILD = {
    "sqlite": [
        'CREATE TABLE "Parent" ("id" INTEGER PRIMARY KEY, "name" TEXT, "price" NUMERIC(10,2), "doc" JSON)',
        'CREATE TABLE "Child" ("id" INTEGER PRIMARY KEY, "parent_id" INTEGER REFERENCES "Parent"("id"), "qty" INTEGER)',
    ],
    "postgresql": [
        'CREATE TABLE "Parent" ("id" integer PRIMARY KEY, "name" text, "price" numeric(10,2), "doc" json)',
        'CREATE TABLE "Child" ("id" integer PRIMARY KEY, "parent_id" integer REFERENCES "Parent"("id"), "qty" integer)',
    ],
}


def topology_for(url: str, articles: list[dict], base: Path | None = None, subscriptions: list[dict] | None = None,
                 **pub):
    return parse_topology({
        "publisher": {"name": "HQ", "database": url},
        "publications": [{"name": "Pub", "articles": articles, **pub}],
        "subscriptions": subscriptions or [],
    }, base or Path("."))


def publish(url: str, articles: list[dict], **pub):
    topo = topology_for(url, articles, **pub)
    with connect(url) as r:
        plan = plan_publication(r, topo.publications[0])
        with r.transaction():
            store.install_metadata(r)
            return apply_publication(r, topo, plan)


def make_tables(url: str, kind: str, ddl: list[str] | None = None) -> None:
    with connect(url) as r:
        for stmt in ddl or PARENT_CHILD[kind]:
            r.execute(stmt)


def contents(r, nick=None):
    pending.flush(r)                     # as every reader of the tracking metadata does
    rows = store.select_rows(r, "MSmerge_contents", order_by=("tablenick", "rowguid"))
    return [x for x in rows if nick is None or x["tablenick"] == nick]


def tombstones(r, nick=None):
    pending.flush(r)
    rows = store.select_rows(r, "MSmerge_tombstone", order_by=("tablenick", "rowguid"))
    return [x for x in rows if nick is None or x["tablenick"] == nick]


def rowguid_of(r, table: str, pk: int) -> str:
    return str(r.scalar(f'SELECT "rowguid" FROM "{table}" WHERE "id" = {r.p}', [pk]))
