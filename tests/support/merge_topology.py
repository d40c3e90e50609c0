"""The merge topology of the conflict matrix: a publisher and four subscribers (global S1 at priority 75
and S2 at 50, local S3 and S4), one table per resolver (``TABLES``) and a parent/child pair; and the
check that every replica converged."""

from __future__ import annotations

from pathlib import Path

from sparksync.dialects import connect
from sparksync.dialects.model import from_table_dict
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.merge.tracking import identity
from sparksync.metadata import store
from sparksync.names import TableName
from sparksync.provision import setup
from sparksync.snapshot.manifest import current_snapshot
from sparksync.topology import parse_topology
from sparksync.types import arrow_converter

from .databases import Databases

TABLES = {
    "Item": {},
    "ItemCol": {"column_tracking": True},
    "ItemSub": {"resolver": "subscriber_wins"},
    "ItemMax": {"resolver": "maximum", "resolver_column": "n"},
    "ItemLater": {"resolver": "later_wins", "resolver_column": "ts"},
    "ItemAdd": {"resolver": "additive", "resolver_column": "n", "column_tracking": True},
    "ItemUser": {"resolver": "tests.support.resolvers:concat"},
    "ItemComp": {"compensate_for_errors": True},
    "ItemMin": {"resolver": "minimum", "resolver_column": "n"},
    "ItemEarlier": {"resolver": "earlier_wins", "resolver_column": "ts"},
    "ItemAvg": {"resolver": "averaging", "resolver_column": "n", "column_tracking": True},
}


SUBS = [("S1", "global", 75.0), ("S2", "global", 50.0), ("S3", "local", None), ("S4", "local", None)]


def ddl(kind: str, table: str) -> str:
    if kind == "sqlite":
        return (f'CREATE TABLE "{table}" ("id" INTEGER PRIMARY KEY, "v" TEXT, "n" INTEGER, "w" TEXT, '
                f'"ts" TIMESTAMP)')
    return f'CREATE TABLE "{table}" ("id" integer PRIMARY KEY, "v" text, "n" integer, "w" text, "ts" timestamp)'


FK_DDL = {
    "sqlite": ['CREATE TABLE "Parent" ("id" INTEGER PRIMARY KEY, "name" TEXT)',
               'CREATE TABLE "Child" ("id" INTEGER PRIMARY KEY, "parent_id" INTEGER NOT NULL REFERENCES "Parent"("id"), '
               '"qty" INTEGER)'],
    "postgresql": ['CREATE TABLE "Parent" ("id" integer PRIMARY KEY, "name" text)',
                   'CREATE TABLE "Child" ("id" integer PRIMARY KEY, "parent_id" integer NOT NULL REFERENCES "Parent"("id"), '
                   '"qty" integer)'],
}


class Topo:
    """Publisher ``P`` (``pub_kind``) with 20 rows in each of ``tables``, subscribers S1-S4 (``sub_kind``),
    set up; ``tmp_path`` holds the snapshots; ``publication``, ``publisher``: more keys of each."""

    def __init__(self, spark, dbs: Databases, tmp_path: Path, pub_kind: str, sub_kind: str, logging: str = "publisher",
                 tables: list[str] | None = None, with_fk: bool = True, publication: dict | None = None,
                 publisher: dict | None = None):
        self.spark = spark
        self.pub_url = dbs.url(pub_kind, "pub")
        tables = tables or list(TABLES)
        with connect(self.pub_url) as r:
            for t in tables:
                r.execute(ddl(pub_kind, t))
                r.executemany(f'INSERT INTO "{t}" ("id", "v", "n", "w", "ts") VALUES ({r.p}, {r.p}, {r.p}, {r.p}, {r.p})',
                              [(i, f"v{i}", 10, f"w{i}", "2024-01-01 00:00:00") for i in range(1, 21)])
            for stmt in FK_DDL[pub_kind] if with_fk else []:
                r.execute(stmt)
        self.sub_urls = {n: dbs.url(sub_kind, n.lower()) for n, _, _ in SUBS}
        self.data = {
            "publisher": {"name": "P", "database": self.pub_url, "snapshot_dir": str(tmp_path / "snap"),
                          **(publisher or {})},
            "publications": [{"name": "Pub", "conflict_logging": logging, **(publication or {}), "articles":
                              [{"table": t, **TABLES[t]} for t in tables]
                              + ([{"table": "Child"}, {"table": "Parent"}] if with_fk else [])}],
            "subscriptions": [{"name": n, "publication": "Pub", "database": self.sub_urls[n], "subscriber_type": st,
                               **({"priority": p} if p is not None else {})} for n, st, p in SUBS],
        }
        self.topology = parse_topology(self.data, tmp_path)
        setup(self.topology, lambda: spark)
        self.agent = MergeAgent(self.topology, spark)

    def url(self, who: str) -> str:
        return self.pub_url if who == "P" else self.sub_urls[who]

    def sql(self, who: str, *statements: str) -> None:
        with connect(self.url(who)) as r:
            for s in statements:
                r.execute(s)

    def merge(self, **kw):
        return self.agent.run(MergeOptions(**kw))

    def value(self, who: str, table: str, id_: int, col: str = "v"):
        with connect(self.url(who)) as r:
            return r.scalar(f'SELECT "{col}" FROM "{table}" WHERE "id" = {r.p}', [id_])

    def exists(self, who: str, table: str, id_: int) -> bool:
        with connect(self.url(who)) as r:
            return r.scalar(f'SELECT count(*) FROM "{table}" WHERE "id" = {r.p}', [id_]) == 1

    def everywhere(self, table: str, id_: int, col: str = "v") -> set:
        return {self.value(w, table, id_, col) for w in ["P", *self.sub_urls]}

    def conflicts(self, who: str = "P") -> list[dict]:
        with connect(self.url(who)) as r:
            return store.select_rows(r, "MSmerge_conflicts_info")

    def snapshot_rows(self, who: str) -> dict[str, dict]:
        _, m = current_snapshot(self.topology.snapshots, "Pub")
        out = {}
        with connect(self.url(who)) as r:
            for a in m.articles:
                info = from_table_dict(a.table_schema)
                name = TableName(None, a.table)
                cols = [c.name for c in info.columns]
                convs = [arrow_converter(c.type) for c in info.columns]
                rows = {}
                rows_sql = identity.rows_of_table(r, name)      # with their rowguids (SQLite's: beside the table)
                for row in r.query(f"SELECT {', '.join(r.dialect.quote(c) for c in cols)} FROM {rows_sql} AS t"):
                    vals = tuple(c(x) for c, x in zip(convs, row))
                    rows[vals[0]] = vals
                out[a.table] = rows
        return out

    def assert_converged(self, ignore: dict[str, set] | None = None) -> None:
        ignore = ignore or {}
        base = self.snapshot_rows("P")
        for who in self.sub_urls:
            other = self.snapshot_rows(who)
            for t in base:
                b = {k: v for k, v in base[t].items() if k not in ignore.get(t, set())}
                o = {k: v for k, v in other[t].items() if k not in ignore.get(t, set())}
                assert b == o, f"{t} differs at {who}: " + str(
                    [(k, b.get(k), o.get(k)) for k in set(b) | set(o) if b.get(k) != o.get(k)][:3])
