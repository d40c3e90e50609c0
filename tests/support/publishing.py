"""A merge publication made without Spark, for the contract tests: tables created (``PARENT_CHILD``),
published and tracked (``publish``), the tracking metadata read back (``contents``, ``tombstones``)."""

from __future__ import annotations

from pathlib import Path

from sparksync.dialects import connect
from sparksync.merge.publish.publication import apply_publication, plan_publication
from sparksync.merge.tracking import identity, pending
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow
from sparksync.names import TableName
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


def rows_of(r, table: str) -> str:
    """The rows of a published table with their rowguids (a SQLite table's are kept beside it), as a relation."""
    return identity.rows_of_table(r, TableName.parse(table))


def rowguid_of(r, table: str, pk: int) -> str:
    return str(r.scalar(f'SELECT "rowguid" FROM {rows_of(r, table)} AS t WHERE "id" = {r.p}', [pk]))


def rowguids(r, table: str) -> list:
    """Every row's rowguid, in key order."""
    return [g for (g,) in r.query(f'SELECT "rowguid" FROM {rows_of(r, table)} AS t ORDER BY "id"')]


def insert_with_rowguid_sql(r, table: str, values: dict, guid: str) -> str:
    """SQL (for the sqlite3 shell) that inserts a row under a rowguid of its own choosing, as a client that writes
    the replication metadata by hand would: into the table's rowguid column, or (SQLite) beside the table."""
    d = r.dialect
    name = d.resolve_name(TableName.parse(table))
    art = next((tracked_article(a) for a in store.select(r, ArticleRow) if d.resolve_name(tracked_article(a).table)
                == name), None)
    lit = {k: f"'{v}'" if isinstance(v, str) else str(v) for k, v in values.items()}
    if art is None or not art.keyed:
        lit[art.rowguid_column if art else "rowguid"] = f"'{guid}'"
        return f"INSERT INTO {d.table_sql(name)} ({', '.join(lit)}) VALUES ({', '.join(lit.values())});\n"
    keys = list(art.info.primary_key)
    return (f"INSERT INTO {d.table_sql(name)} ({', '.join(lit)}) VALUES ({', '.join(lit.values())});\n"
            f"INSERT INTO {r.meta(art.ids_table)} ({', '.join(keys)}, {art.rowguid_column}) VALUES "
            f"({', '.join(lit[k] for k in keys)}, '{guid}');\n")


def empty_tracking_logs_sql(r) -> str:
    """SQL (for the sqlite3 shell) that empties every tracking log by hand, as whoever holds the file can: the shared
    one and each keyed article's own."""
    logs = ["MSmerge_pending", *sorted({tracked_article(a).log_table for a in store.select(r, ArticleRow)
                                        if a.rowguid_keyed})]
    return "".join(f"DELETE FROM {r.dialect.quote(t)};\n" for t in logs)
