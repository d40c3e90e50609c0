"""Two merge publications of one publisher (issue 35, finding 8): ``Catalog`` (Product, unfiltered) and
``Stores`` (salespeople by ``Territory = HOST_NAME()``, their customers and orders by join filters). A
store's database subscribes to both. Generations belong to the publisher, so one transaction that
changes thousands of products and the customers' emails makes one big generation of both
publications, cut by key at the leveling threshold; the next transaction moves a salesperson to
another territory. After the merge the store of the new territory holds the salesperson with its
customers and orders, and no change failed: in the agent's own process (a small round) and on Spark.

The publisher once numbered each publication's articles on their own, so Product and SalesPerson
shared nickname 10: the tracking flush of that nickname recorded one table's changes only (the
move was never recorded; the changed customers still moved by the filter, and failed at the store
without their salesperson). Then a store damaged behind the triggers' back: the download's failed
changes are cleared by ``validate --repair`` along with the rows it writes.

One topology with a SQLite publisher, built and run once (and the move at a PostgreSQL publisher); the
named checks read what they recorded.
"""

from __future__ import annotations

import re

import pytest

from sparksync.dialects import connect
from sparksync.merge.conflicts.view import list_failed_changes
from sparksync.merge.maintenance.integrity import replica_problems
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.merge.tracking.articles import agent_writes, install_tracking
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow
from sparksync.provision import setup
from sparksync.status import gather_status
from sparksync.topology import parse_topology
from sparksync.validation.repair import repair
from sparksync.validation.subscriptions import validate
from tests.support.databases import databases

PRODUCTS, PEOPLE, CUSTOMERS, ORDERS = 1500, 9, 180, 540
THRESHOLD = 100                     # a generation of more changes is cut by key ...
PER_BATCH = 4                       # ... where a download batch of this many units ends inside it
TERRITORY = {i: "NSE"[i % 3] for i in range(1, PEOPLE + 1)}      # salespeople 2 and 5: E, 3: N
STORES = {"StoreN": "N", "StoreE": "E"}
DDL = {
    "sqlite": ['CREATE TABLE "Product" ("ProductID" INTEGER PRIMARY KEY, "Price" INTEGER)',
               'CREATE TABLE "SalesPerson" ("SalesPersonID" INTEGER PRIMARY KEY, "Territory" TEXT)',
               'CREATE TABLE "Customer" ("CustomerID" INTEGER PRIMARY KEY, "SalesPersonID" INTEGER NOT NULL '
               'REFERENCES "SalesPerson"("SalesPersonID"), "Email" TEXT)',
               'CREATE TABLE "Orders" ("OrderID" INTEGER PRIMARY KEY, "CustomerID" INTEGER NOT NULL '
               'REFERENCES "Customer"("CustomerID"), "Total" INTEGER)'],
    "postgresql": ['CREATE TABLE "Product" ("ProductID" integer PRIMARY KEY, "Price" integer)',
                   'CREATE TABLE "SalesPerson" ("SalesPersonID" integer PRIMARY KEY, "Territory" text)',
                   'CREATE TABLE "Customer" ("CustomerID" integer PRIMARY KEY, "SalesPersonID" integer NOT NULL '
                   'REFERENCES "SalesPerson"("SalesPersonID"), "Email" text)',
                   'CREATE TABLE "Orders" ("OrderID" integer PRIMARY KEY, "CustomerID" integer NOT NULL '
                   'REFERENCES "Customer"("CustomerID"), "Total" integer)'],
}
COLUMNS = {"Product": ("ProductID", '"Price"'), "SalesPerson": ("SalesPersonID", '"Territory"'),
           "Customer": ("CustomerID", '"SalesPersonID", "Email"'), "Orders": ("OrderID", '"CustomerID", "Total"')}
BULK = ['UPDATE "Product" SET "Price" = "Price" + 1',            # one transaction: one big generation of both
        'UPDATE "Customer" SET "Email" = "Email" || \'.\'']


def _rows(url: str) -> dict[str, dict[int, tuple]]:
    with connect(url) as r:
        return {t: {int(x[0]): tuple(x[1:]) for x in r.query(f'SELECT "{key}", {cols} FROM "{t}"')}
                for t, (key, cols) in COLUMNS.items()}


def _partition(hq: dict[str, dict[int, tuple]], territory: str) -> dict[str, set[int]]:
    """A store's rows of the Stores publication, computed by hand from the publisher's."""
    people = {i for i, (t,) in hq["SalesPerson"].items() if t == territory}
    customers = {i for i, (s, _) in hq["Customer"].items() if s in people}
    return {"SalesPerson": people, "Customer": customers,
            "Orders": {i for i, (c, _) in hq["Orders"].items() if c in customers}}


def _differences(pub_url: str, urls: dict[str, str]) -> list[str]:
    """Every way a store differs from its partition of the publisher's rows, and from its products."""
    hq, out = _rows(pub_url), []
    for store_name, url in urls.items():
        have = _rows(url)
        if have["Product"] != hq["Product"]:
            out.append(f"{store_name}.Product: {sum(have['Product'].get(k) != v for k, v in hq['Product'].items())} "
                       "row(s) differ from the publisher's")
        for t, want in _partition(hq, STORES[store_name]).items():
            if set(have[t]) != want:
                out.append(f"{store_name}.{t}: missing {sorted(want - set(have[t]))[:5]}, "
                           f"extra {sorted(set(have[t]) - want)[:5]}")
            out += [f"{store_name}.{t} {k}: {have[t][k]}, publisher {hq[t][k]}"
                    for k in sorted(want & set(have[t])) if have[t][k] != hq[t][k]][:5]
    return out


class World:
    """The topology of one publisher dialect and what each step of its scenario left."""

    def __init__(self, spark, dbs, tmp, kind: str):
        self.spark, self.kind = spark, kind
        self.pub_url = dbs.url(kind, "hq")
        with connect(self.pub_url) as r, r.transaction():
            for stmt in DDL[kind]:
                r.execute(stmt)
            p = r.p
            r.executemany(f'INSERT INTO "Product" VALUES ({p}, 1)', [(i,) for i in range(1, PRODUCTS + 1)])
            r.executemany(f'INSERT INTO "SalesPerson" VALUES ({p}, {p})', list(TERRITORY.items()))
            r.executemany(f'INSERT INTO "Customer" VALUES ({p}, {p}, {p})',
                          [(i, 1 + i % PEOPLE, f"c{i}@example.com") for i in range(1, CUSTOMERS + 1)])
            r.executemany(f'INSERT INTO "Orders" VALUES ({p}, {p}, 1)', [(i, 1 + i % CUSTOMERS)
                                                                          for i in range(1, ORDERS + 1)])
        self.urls = {n: dbs.url("sqlite", n.lower()) for n in STORES}
        leveled = {"generation_leveling_threshold": THRESHOLD}
        self.topology = parse_topology({
            "publisher": {"name": "HQ", "database": self.pub_url, "snapshot_dir": str(tmp / "snap")},
            "publications": [
                {"name": "Catalog", **leveled, "articles": [{"table": "Product"}]},
                {"name": "Stores", **leveled, "articles": [
                    {"table": "SalesPerson", "filter": "Territory = HOST_NAME()"},
                    {"table": "Customer", "join_filters": [{
                        "parent": "SalesPerson", "unique_key": True,
                        "clause": "Customer.SalesPersonID = SalesPerson.SalesPersonID"}]},
                    {"table": "Orders", "join_filters": [{"parent": "Customer", "unique_key": True,
                                                          "clause": "Orders.CustomerID = Customer.CustomerID"}]}]}],
            "subscriptions": [
                *({"name": n, "publication": "Stores", "database": u, "host_name": STORES[n]}
                  for n, u in self.urls.items()),
                *({"name": f"Catalog{n}", "publication": "Catalog", "database": u} for n, u in self.urls.items())],
        }, tmp)
        setup(self.topology, lambda: spark)
        self.reports: list[str] = []
        self.agent = MergeAgent(self.topology, spark, report=self.reports.append)
        self.steps: dict[str, dict] = {}

    def sql(self, url: str, *statements: str) -> None:
        with connect(url) as r, r.transaction():
            for s in statements:
                r.execute(s)

    def merge(self, step: str, driver_round_changes: int) -> None:
        """One ``sparksync merge`` of both publications; what it left is recorded under ``step``."""
        self.reports.clear()
        summary = self.agent.run(MergeOptions(download_generations_per_batch=PER_BATCH,
                                              driver_round_changes=driver_round_changes))
        # "download StoreN: generations (lo, hi], k to send in m batch(es)"
        plans = {m[1]: (int(m[2]), int(m[3])) for m in
                 (re.match(r"download (\w+): generations \S+ \S+ (\d+) to send in (\d+) batch", x) for x in self.reports)
                 if m}
        self.steps[step] = {
            "ok": summary.ok, "errors": [(s.subscription, s.errors) for s in summary.subscriptions if s.errors],
            "plans": plans, "differences": _differences(self.pub_url, self.urls),
            "failed": [(f["where"], f["article"], f["reason"]) for f in list_failed_changes(self.topology)]}

    def move(self, step: str, person: int, territory: str, driver_round_changes: int) -> None:
        """The bulk transaction of both publications, then a salesperson moved, then a merge."""
        self.sql(self.pub_url, *BULK)
        self.sql(self.pub_url, f'UPDATE "SalesPerson" SET "Territory" = \'{territory}\' '
                               f'WHERE "SalesPersonID" = {person}')
        self.merge(step, driver_round_changes)


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    """A SQLite publisher: the move in the agent's process, on Spark, then the damage and the repair."""
    tmp = tmp_path_factory.mktemp("one_publisher")
    with databases(tmp) as dbs:
        w = World(spark, dbs, tmp, "sqlite")
        # 1. in the agent's process: salesperson 2 moves from E to N after the bulk transaction
        w.move("in_process", 2, "N", 10**9)
        # 2. on Spark: it moves back, and salesperson 5 (E) goes to N
        w.sql(w.pub_url, *BULK)
        w.sql(w.pub_url, 'UPDATE "SalesPerson" SET "Territory" = \'E\' WHERE "SalesPersonID" = 2',
              'UPDATE "SalesPerson" SET "Territory" = \'N\' WHERE "SalesPersonID" = 5')
        w.merge("on_spark", 0)
        # 3. StoreN loses a customer and its orders behind the triggers' back; HQ gives the customer a new
        #    order, which fails at StoreN (its customer is not there); validate --repair writes them all
        customer = min(_partition(_rows(w.pub_url), "N")["Customer"])
        with connect(w.urls["StoreN"]) as r, r.transaction(), agent_writes(r):
            gone = r.execute(f'DELETE FROM "Orders" WHERE "CustomerID" = {customer}').rowcount
            r.execute(f'DELETE FROM "Customer" WHERE "CustomerID" = {customer}')
        w.lost = 1 + gone + 1            # the customer, its orders, the new order
        w.sql(w.pub_url, f'INSERT INTO "Orders" ("OrderID", "CustomerID", "Total") VALUES ({ORDERS + 1}, {customer}, 7)')
        w.merge("damaged", 10**9)
        w.validated = validate(w.topology, lambda: spark, subscriptions=["StoreN"], checksum=True)
        w.repaired = repair(w.topology, w.validated)
        w.failed_after_repair = list_failed_changes(w.topology)
        w.merge("after_repair", 10**9)
        yield w


@pytest.fixture(scope="module")
def pg_world(spark, tmp_path_factory, pg_admin_url):
    """A PostgreSQL publisher: the move in the agent's process."""
    tmp = tmp_path_factory.mktemp("one_pg_publisher")
    with databases(tmp, pg_admin_url) as dbs:
        w = World(spark, dbs, tmp, "postgresql")
        w.move("in_process", 2, "N", 10**9)
        yield w


@pytest.mark.parametrize("step", ["in_process", "on_spark"])
def test_a_move_after_a_bulk_transaction_of_another_publication_reaches_its_store(world, step):
    s = world.steps[step]
    assert s["ok"], s["errors"]
    assert s["differences"] == []
    assert s["failed"] == []


def test_the_same_at_a_postgresql_publisher(pg_world):
    s = pg_world.steps["in_process"]
    assert s["ok"] and s["differences"] == [] and s["failed"] == [], s
    assert _nicknames(pg_world.pub_url) == 4


@pytest.mark.parametrize("step", ["in_process", "on_spark"])
def test_the_shared_generation_was_cut_by_key_in_the_stores_download(world, step):
    gens, batches = world.steps[step]["plans"]["StoreN"]
    assert batches > gens, world.steps[step]["plans"]       # a generation's parts went in several batches


def _nicknames(url: str) -> int:
    """How many distinct nicknames the database's articles have (a table in two publications has one)."""
    with connect(url) as r:
        return len({a.nickname for a in store.select(r, ArticleRow)})


def test_every_table_of_the_publisher_has_a_nickname_of_its_own(world):
    with connect(world.pub_url) as r:
        assert len({a.source_table for a in store.select(r, ArticleRow)}) == 4
        for p in store.select(r, PublicationRow):
            assert replica_problems(r, p.pubid) == []
    assert _nicknames(world.pub_url) == 4
    assert [_nicknames(u) for u in world.urls.values()] == [4, 4]   # a store holds the articles of both


def test_the_download_failed_at_the_damaged_store_only(world):
    failed = world.steps["damaged"]["failed"]
    # one failed change, the new order, listed for both subscriptions of StoreN's database
    assert {(where, article) for where, article, _ in failed} == {("StoreN", "Orders"), ("CatalogStoreN", "Orders")}
    (s,) = world.validated.subscriptions
    assert sorted((a.article, a.count("missing")) for a in s.articles if not a.ok) == [
        ("Customer", 1), ("Orders", world.lost - 1)]


def test_repair_clears_the_failed_changes_it_made_moot(world):
    assert {s.subscription: s.repaired for s in world.repaired.subscriptions} == {"StoreN": world.lost}
    assert world.failed_after_repair == []
    s = world.steps["after_repair"]
    assert s["ok"] and s["differences"] == [] and s["failed"] == []


def test_a_nickname_shared_by_two_tables_is_damage(world):
    """A publisher published before nicknames were given per database: two tables under one nickname
    (their triggers too) are named by every merge and by status (the changes of one were not recorded)."""
    with connect(world.pub_url) as r:
        arts = {a.source_table: a for a in store.select(r, ArticleRow)}
        pubs = {p.name: p.pubid for p in store.select(r, PublicationRow)}

        def renumber(nickname: int) -> None:
            with r.transaction():
                store.update(r, ArticleRow, {"nickname": nickname}, {"artid": arts["Product"].artid})
                (row,) = store.select(r, ArticleRow, {"artid": arts["Product"].artid})
                install_tracking(r, tracked_article(row), 1)

        renumber(arts["SalesPerson"].nickname)
        try:
            problems = replica_problems(r, pubs["Catalog"])
            status = gather_status(world.topology)
        finally:
            renumber(arts["Product"].nickname)
    assert len(problems) == 1 and re.search(r"table Product shares article nickname \d+ with table SalesPerson of "
                                            r"publication Stores", problems[0]), problems
    assert not status["ok"] and any("shares article nickname" in p for p in status["problems"]), status["problems"]
