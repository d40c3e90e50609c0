"""partition_options (seed 002's golden cases) on real databases: ``LoginID = SUSER_SNAME()`` with 3
(one subscription per partition), ``ProductLine = HOST_NAME()`` with 2 (non-overlapping, shared),
``ProductLine = HOST_NAME() OR ListPrice < 100`` with 0 (overlapping), and a row filter with 1
(overlapping, subscriber changes out of the partition refused). One topology per dialect pair; each
subscriber is compared with its partition, computed in Python from the publisher's rows, after every
merge."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sparksync.dialects import connect
from sparksync.errors import ConfigurationError
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.metadata import store
from sparksync.provision import setup
from sparksync.topology import parse_topology
from tests.support.databases import databases

pytestmark = pytest.mark.spark

TABLES = {
    "Employee": ("EmployeeID", ["LoginID", "JobTitle"]),
    "Product": ("ProductID", ["ProductLine", "ListPrice"]),
    "Deal": ("DealID", ["ProductLine", "ListPrice"]),
    "Route": ("RouteID", ["ProductLine", "Name"]),
}
DATA = {
    "Employee": [(1, "pamela", "rep"), (2, "mike", "rep"), (3, "mia", "rep"), (4, "nobody", "cfo")],
    "Product": [(10, "M", 500), (11, "R", 50), (12, "T", 20)],
    "Deal": [(20, "M", 500), (21, "R", 50), (22, "T", 500)],
    "Route": [(30, "M", "north"), (31, "R", "south")],
}
SUBS = {"Pamela": ("M", "pamela"), "Mike": ("R", "mike"), "Mia": ("M", "mia")}
ARTICLES = [
    {"table": "Employee", "filter": "LoginID = SUSER_SNAME()", "partition_options": 3},
    {"table": "Product", "filter": "ProductLine = HOST_NAME()", "partition_options": 2},
    {"table": "Deal", "filter": "ProductLine = HOST_NAME() OR ListPrice < 100"},
    {"table": "Route", "filter": "ProductLine = HOST_NAME()", "partition_options": 1},
]


def _ddl(kind: str, table: str) -> str:
    key, (a, b) = TABLES[table]
    num = "INTEGER" if kind == "sqlite" else "integer"
    second = "ListPrice" in (a, b)
    return (f'CREATE TABLE "{table}" ("{key}" {num} PRIMARY KEY, "{a}" text, "{b}" '
            f'{num if second else "text"})')


def build(dbs, tmp_path, pub_kind: str, sub_kinds: dict[str, str], articles=None, subs=None):
    pub_url = dbs.url(pub_kind, "pub")
    with connect(pub_url) as r, r.transaction():
        for t in TABLES:
            r.execute(_ddl(pub_kind, t))
            r.executemany(f'INSERT INTO "{t}" VALUES ({r.p}, {r.p}, {r.p})', DATA[t])
    urls = {n: dbs.url(k, n.lower()) for n, k in sub_kinds.items()}
    topology = parse_topology({
        "publisher": {"name": "HQ", "database": pub_url, "snapshot_dir": str(tmp_path / "snap")},
        "publications": [{"name": "Sales", "articles": articles or ARTICLES}],
        "subscriptions": [{"name": n, "publication": "Sales", "database": urls[n], "host_name": h, "login": lg}
                          for n, (h, lg) in (subs or SUBS).items() if n in urls],
    }, tmp_path)
    return pub_url, urls, topology


def rows(url: str) -> dict[str, dict[int, tuple]]:
    with connect(url) as r:
        return {t: {int(x[0]): tuple(x[1:]) for x in r.query(f'SELECT "{k}", "{a}", "{b}" FROM "{t}"')}
                for t, (k, (a, b)) in TABLES.items()}


def partition(hq: dict, host: str, login: str) -> dict[str, set[int]]:
    return {"Employee": {i for i, (lg, _) in hq["Employee"].items() if lg == login},
            "Product": {i for i, (line, _) in hq["Product"].items() if line == host},
            "Deal": {i for i, (line, price) in hq["Deal"].items() if line == host or price < 100},
            "Route": {i for i, (line, _) in hq["Route"].items() if line == host}}


@dataclass
class World:
    pub_url: str
    urls: dict[str, str]
    agent: MergeAgent
    states: dict = field(default_factory=dict)
    leaks: list = field(default_factory=list)

    def sql(self, who: str, *stmts: str) -> None:
        with connect(self.pub_url if who == "HQ" else self.urls[who]) as r, r.transaction():
            for s in stmts:
                r.execute(s)

    def merge(self, step: str) -> None:
        summary = self.agent.run(MergeOptions())
        assert summary.ok, [(s.subscription, s.errors) for s in summary.subscriptions if s.errors]
        state = {"HQ": rows(self.pub_url), **{n: rows(u) for n, u in self.urls.items()}}
        self.states[step] = state
        for n in self.urls:
            want = partition(state["HQ"], *SUBS[n])
            for t in TABLES:
                if set(state[n][t]) != want[t]:
                    self.leaks.append(f"after {step}: {n}.{t} holds {sorted(state[n][t])}, partition {sorted(want[t])}")


PAIRS = {"sqlite_to_sqlite": ("sqlite", {"Pamela": "sqlite", "Mike": "sqlite", "Mia": "sqlite"}),
         "postgresql_to_mixed": ("postgresql", {"Pamela": "postgresql", "Mike": "sqlite", "Mia": "sqlite"})}


@pytest.fixture(scope="module", params=list(PAIRS))
def world(request, spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    with databases(tmp, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        pub_kind, kinds = PAIRS[request.param]
        pub_url, urls, topology = build(dbs, tmp, pub_kind, kinds)
        setup(topology, lambda: spark)
        w = World(pub_url, urls, MergeAgent(topology, spark))
        w.merge("setup")
        # option 1: Pamela inserts a route of line R (Mike's) and moves route 30 to line R: both refused
        w.sql("Pamela", 'INSERT INTO "Route" ("RouteID", "ProductLine", "Name") VALUES (32, \'R\', \'new\')',
              'UPDATE "Route" SET "ProductLine" = \'R\' WHERE "RouteID" = 30')
        # option 2: Pamela inserts a product of line R: kept at HQ, goes to Mike, leaves Pamela
        w.sql("Pamela", 'INSERT INTO "Product" ("ProductID", "ProductLine", "ListPrice") VALUES (13, \'R\', 70)')
        # option 0: a deal becomes cheap: it enters every partition
        w.sql("HQ", 'UPDATE "Deal" SET "ListPrice" = 60 WHERE "DealID" = 22')
        w.merge("subscriber_changes")
        with connect(pub_url) as r:
            w.conflicts = store.select_rows(r, "MSmerge_conflicts_info")
        w.merge("again")
        # option 3 (no mapping tables: membership evaluated at sync): HQ moves employee 2 from Mike's login
        # to Pamela's, deletes Mia's and hires one for her; Pamela changes her own row; Mike inserts an
        # employee of Pamela's login (refused)
        w.sql("HQ", 'UPDATE "Employee" SET "LoginID" = \'pamela\' WHERE "EmployeeID" = 2',
              'DELETE FROM "Employee" WHERE "EmployeeID" = 3',
              'INSERT INTO "Employee" ("EmployeeID", "LoginID", "JobTitle") VALUES (5, \'mia\', \'new\')')
        w.sql("Pamela", 'UPDATE "Employee" SET "JobTitle" = \'lead\' WHERE "EmployeeID" = 1')
        w.sql("Mike", 'INSERT INTO "Employee" ("EmployeeID", "LoginID", "JobTitle") VALUES (6, \'pamela\', \'x\')')
        w.merge("option_3")
        w.merge("option_3_again")
        with connect(pub_url) as r:
            w.conflicts_3 = store.select_rows(r, "MSmerge_conflicts_info")
            nick = {a["source_table"]: a["nickname"] for a in store.select_rows(r, "sysmergearticles")}
            w.employee_mappings = sum(len(store.select_rows(r, t, {"tablenick": nick["Employee"]}))
                                      for t in ("MSmerge_current_partition_mappings", "MSmerge_past_partition_mappings"))
            w.product_mappings = len(store.select_rows(r, "MSmerge_current_partition_mappings",
                                                       {"tablenick": nick["Product"]}))
        yield w


def test_every_subscriber_holds_its_partition_after_every_merge(world):
    assert world.leaks == []


def test_login_partition_holds_one_employee_each(world):
    s = world.states["setup"]
    assert set(s["Pamela"]["Employee"]) == {1} and set(s["Mike"]["Employee"]) == {2} and set(s["Mia"]["Employee"]) == {3}


def test_product_line_partition_is_shared_by_both_m_subscriptions(world):
    s = world.states["setup"]
    assert set(s["Pamela"]["Product"]) == set(s["Mia"]["Product"]) == {10} and set(s["Mike"]["Product"]) == {11}


def test_overlapping_filter_sends_a_cheap_deal_to_everyone(world):
    s = world.states["subscriber_changes"]
    assert all({21, 22} <= set(s[n]["Deal"]) for n in SUBS) and 20 not in s["Mike"]["Deal"]


def test_option_1_refuses_an_insert_out_of_the_partition(world):
    s = world.states["subscriber_changes"]
    assert 32 not in s["HQ"]["Route"] and 32 not in s["Pamela"]["Route"] and 32 not in s["Mike"]["Route"]


def test_option_1_refuses_an_update_out_of_the_partition_and_sends_the_publishers_version_back(world):
    s = world.states["subscriber_changes"]
    assert s["HQ"]["Route"][30] == ("M", "north") and s["Pamela"]["Route"][30] == ("M", "north")
    assert 30 not in s["Mike"]["Route"] and s["Mia"]["Route"][30] == ("M", "north")


def test_refused_changes_are_listed_as_conflicts_with_the_reason(world):
    refused = [c for c in world.conflicts if c["reason_code"] == "out_of_partition"]
    assert len(refused) == 2 and all("Pamela" in c["origin_datasource"] for c in refused)
    assert any("insert refused" in c["reason_text"] for c in refused)
    assert any("update refused" in c["reason_text"] for c in refused)


def test_option_2_subscriber_insert_out_of_partition_is_kept_and_moved(world):
    s = world.states["subscriber_changes"]
    assert s["HQ"]["Product"][13] == ("R", 70) and 13 in s["Mike"]["Product"] and 13 not in s["Pamela"]["Product"]


def test_nothing_comes_back_on_the_next_merge(world):
    assert world.states["again"] == world.states["subscriber_changes"]


def test_a_row_in_two_non_overlapping_partitions_stops_the_download_with_its_key(spark, dbs, tmp_path):
    arts = [dict(a) for a in ARTICLES]
    arts[2] = {**arts[2], "partition_options": 2}      # Deal: an OR filter declared non-overlapping
    pub_url, urls, topology = build(dbs, tmp_path, "sqlite", {"Pamela": "sqlite", "Mike": "sqlite"}, arts)
    with connect(pub_url) as r:
        r.execute('UPDATE "Deal" SET "ListPrice" = 500 WHERE "DealID" = 21')       # no overlap yet
    setup(topology, lambda: spark)
    with connect(pub_url) as r:
        r.execute('UPDATE "Deal" SET "ListPrice" = 10 WHERE "DealID" = 20')        # now in M and in R
    summary = MergeAgent(topology, spark).run(MergeOptions())
    errors = [e for s in summary.subscriptions for e in s.errors]
    assert len(errors) == 2 and all("DealID=20" in e and "partition_options = 2" in e for e in errors)
    assert 20 not in rows(urls["Mike"])["Deal"]                                    # nothing leaked


def test_option_3_with_two_subscriptions_in_one_partition_is_refused_naming_both(dbs, tmp_path):
    subs = {"Pamela": ("M", "pamela"), "Mia": ("R", "pamela")}          # one login: one Employee partition
    pub_url, _, topology = build(dbs, tmp_path, "sqlite", {"Pamela": "sqlite", "Mia": "sqlite"}, subs=subs)
    with pytest.raises(ConfigurationError) as e:
        setup(topology, lambda: pytest.fail("Spark must not start"))
    text = " ".join(e.value.problems)
    assert "Mia and Pamela" in text and "Employee" in text and "login = 'pamela'" in text
    with connect(pub_url) as r:
        assert store.metadata_version(r) is None          # the publishing transaction rolled back whole


def test_option_3_keeps_no_partition_mappings(world):
    assert world.employee_mappings == 0
    assert world.product_mappings > 0               # option 2 does


def test_option_3_row_moved_to_another_login_moves_between_subscribers(world):
    s = world.states["option_3"]
    assert set(s["Pamela"]["Employee"]) == {1, 2} and set(s["Mike"]["Employee"]) == set()
    assert set(s["Mia"]["Employee"]) == {5} and s["Pamela"]["Employee"][1] == ("pamela", "lead")
    assert s["HQ"]["Employee"][1] == ("pamela", "lead")


def test_option_3_refuses_an_insert_for_another_login(world):
    s = world.states["option_3"]
    assert 6 not in s["HQ"]["Employee"] and 6 not in s["Mike"]["Employee"] and 6 not in s["Pamela"]["Employee"]
    refused = [c for c in world.conflicts_3 if c["reason_code"] == "out_of_partition" and "Mike" in
               c["origin_datasource"]]
    assert len(refused) == 1 and "insert refused" in refused[0]["reason_text"]
    assert world.states["option_3_again"] == world.states["option_3"]


def test_option_3_row_in_two_partitions_stops_the_download_with_its_key(spark, dbs, tmp_path):
    arts = [dict(a) for a in ARTICLES]
    arts[0] = {**arts[0], "filter": "LoginID = SUSER_SNAME() OR JobTitle = 'cfo'"}
    pub_url, urls, topology = build(dbs, tmp_path, "postgresql", {"Pamela": "sqlite", "Mike": "sqlite"}, arts)
    with connect(pub_url) as r:
        r.execute('UPDATE "Employee" SET "JobTitle" = \'ceo\' WHERE "EmployeeID" = 4')    # no overlap yet
    setup(topology, lambda: spark)
    with connect(pub_url) as r:
        r.execute('UPDATE "Employee" SET "JobTitle" = \'cfo\' WHERE "EmployeeID" = 4')    # now everyone's
    summary = MergeAgent(topology, spark).run(MergeOptions())
    errors = [e for s in summary.subscriptions for e in s.errors]
    assert len(errors) == 2 and all("EmployeeID=4" in e and "partition_options = 3" in e for e in errors)
    assert 4 not in rows(urls["Mike"])["Employee"] and 4 not in rows(urls["Pamela"])["Employee"]


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_an_option_3_parent_above_overlapping_children(spark, dbs, tmp_path, pub_kind):
    """SQL Server's canonical device topology (seed 002): employees filtered by login with option 3, one
    subscription each, and below them a join-filter child of the default option. The parent then keeps
    mappings (like option 2), so its child's membership follows it: an employee moved to another login
    takes its deals along."""
    arts = [ARTICLES[0], {"table": "Deal", "join_filters": [{"parent": "Employee",
                                                             "clause": "Deal.DealID = Employee.EmployeeID"}]}]
    pub_url, urls, topology = build(dbs, tmp_path, pub_kind, {"Pamela": "sqlite", "Mike": "postgresql"}, arts)
    with connect(pub_url) as r:
        r.executemany(f'INSERT INTO "Deal" VALUES ({r.p}, {r.p}, {r.p})', [(1, "M", 5), (2, "R", 6), (3, "T", 7)])
    setup(topology, lambda: spark)

    def held(who: str) -> tuple[set[int], set[int]]:
        with connect(urls[who]) as r:
            return ({i for (i,) in r.query('SELECT "EmployeeID" FROM "Employee"')},
                    {i for (i,) in r.query('SELECT "DealID" FROM "Deal"')})

    assert held("Pamela") == ({1}, {1}) and held("Mike") == ({2}, {2})
    with connect(pub_url) as r:
        r.execute('UPDATE "Employee" SET "LoginID" = \'pamela\' WHERE "EmployeeID" = 2')
        r.execute('INSERT INTO "Deal" ("DealID", "ProductLine", "ListPrice") VALUES (101, \'M\', 1)')
    with connect(urls["Pamela"]) as r:
        r.execute('UPDATE "Deal" SET "ListPrice" = 55 WHERE "DealID" = 1')
    summary = MergeAgent(topology, spark).run(MergeOptions())
    assert summary.ok, summary.to_dict()
    assert held("Pamela") == ({1, 2}, {1, 2}) and held("Mike") == (set(), set())
    with connect(pub_url) as r:
        assert r.scalar('SELECT "ListPrice" FROM "Deal" WHERE "DealID" = 1') == 55
