"""The filtered merge publication of seed 002 on real databases: salespeople with a parameterized row
filter (``Territory = HOST_NAME()``), customers, orders and visits joined to them (a 3-level join-filter
chain, and a union of two join filters), stores as subscribers, each one's partition computed
independently in Python (``oracle``) and checked after every merge (``Scenario``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sparksync.dialects import connect
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.topology import parse_topology

from .databases import Databases

DDL = {
    "sqlite": [
        'CREATE TABLE "SalesPerson" ("SalesPersonID" INTEGER PRIMARY KEY, "Territory" TEXT, "Name" TEXT)',
        'CREATE TABLE "Customer" ("CustomerID" INTEGER PRIMARY KEY, "SalesPersonID" INTEGER, "Name" TEXT)',
        'CREATE TABLE "Orders" ("OrderID" INTEGER PRIMARY KEY, "CustomerID" INTEGER NOT NULL '
        'REFERENCES "Customer"("CustomerID"), "Total" INTEGER)',
        'CREATE TABLE "Visit" ("VisitID" INTEGER PRIMARY KEY, "CustomerID" INTEGER, "SalesPersonID" INTEGER)',
    ],
    "postgresql": [
        'CREATE TABLE "SalesPerson" ("SalesPersonID" integer PRIMARY KEY, "Territory" text, "Name" text)',
        'CREATE TABLE "Customer" ("CustomerID" integer PRIMARY KEY, "SalesPersonID" integer, "Name" text)',
        'CREATE TABLE "Orders" ("OrderID" integer PRIMARY KEY, "CustomerID" integer NOT NULL '
        'REFERENCES "Customer"("CustomerID"), "Total" integer)',
        'CREATE TABLE "Visit" ("VisitID" integer PRIMARY KEY, "CustomerID" integer, "SalesPersonID" integer)',
    ],
}
PEOPLE = {1: "N", 2: "S", 3: "N", 5: "O'Hara"}
CUSTOMERS = {10: 1, 11: 2, 12: 3, 13: 2, 16: 5}
ORDERS = {100: 10, 101: 10, 102: 11, 103: 12, 104: 13, 106: 16}
# StoreQ: a quote in a partition's value; StoreX: a partition no row belongs to (yet)
STORES = {"StoreN": "N", "StoreS": "S", "StoreN2": "N", "StoreQ": "O'Hara", "StoreX": "X"}
VISITS = {200: (10, 2), 201: (11, 2), 202: (13, 3)}   # a visit: (customer, salesperson)
KEYS = {"SalesPerson": "SalesPersonID", "Customer": "CustomerID", "Orders": "OrderID", "Visit": "VisitID"}


def publication(extra: dict | None = None) -> dict:
    return {"name": "Sales", "articles": [
        {"table": "SalesPerson", "filter": "Territory = HOST_NAME()"},
        {"table": "Customer", "join_filters": [
            {"parent": "SalesPerson", "clause": "Customer.SalesPersonID = SalesPerson.SalesPersonID",
             "unique_key": True}]},
        {"table": "Orders", "join_filters": [
            {"parent": "Customer", "clause": "Orders.CustomerID = Customer.CustomerID", "unique_key": True}]},
        # two join filters: a visit belongs to the partitions of its customer and of its salesperson (union)
        {"table": "Visit", "join_filters": [
            {"parent": "Customer", "clause": "Visit.CustomerID = Customer.CustomerID"},
            {"parent": "SalesPerson", "clause": "Visit.SalesPersonID = SalesPerson.SalesPersonID"}]},
    ], **(extra or {})}


def build(dbs: Databases, tmp_path: Path, pub_kind: str, sub_kinds: dict[str, str], pub: dict | None = None,
          subs: dict[str, dict] | None = None):
    pub_url = dbs.url(pub_kind, "pub")
    with connect(pub_url) as r, r.transaction():
        for stmt in DDL[pub_kind]:
            r.execute(stmt)
        r.executemany(f'INSERT INTO "SalesPerson" VALUES ({r.p}, {r.p}, {r.p})',
                      [(i, t, f"sp{i}") for i, t in PEOPLE.items()])
        r.executemany(f'INSERT INTO "Customer" VALUES ({r.p}, {r.p}, {r.p})',
                      [(i, s, f"c{i}") for i, s in CUSTOMERS.items()])
        r.executemany(f'INSERT INTO "Orders" VALUES ({r.p}, {r.p}, 5)', list(ORDERS.items()))
        r.executemany(f'INSERT INTO "Visit" VALUES ({r.p}, {r.p}, {r.p})', [(k, *v) for k, v in VISITS.items()])
    urls = {name: dbs.url(kind, name.lower()) for name, kind in sub_kinds.items()}
    data = {
        "publisher": {"name": "HQ", "database": pub_url, "snapshot_dir": str(tmp_path / "snap")},
        "publications": [pub or publication()],
        "subscriptions": [{"name": n, "publication": "Sales", "database": urls[n],
                           **(subs or {}).get(n, {"host_name": STORES[n]})} for n in sub_kinds],
    }
    return pub_url, urls, parse_topology(data, tmp_path)


def rows(url: str) -> dict[str, dict[int, tuple]]:
    """Every row of the three tables, by key."""
    out = {}
    with connect(url) as r:
        for t, k in KEYS.items():
            cols = {"SalesPerson": '"Territory", "Name"', "Customer": '"SalesPersonID", "Name"',
                    "Orders": '"CustomerID", "Total"', "Visit": '"CustomerID", "SalesPersonID"'}[t]
            out[t] = {int(x[0]): tuple(x[1:]) for x in r.query(f'SELECT "{k}", {cols} FROM "{t}"')}
    return out


def oracle(publisher: dict[str, dict[int, tuple]], host: str) -> dict[str, set[int]]:
    """The partition of ``host``, computed by hand from the publisher's rows."""
    sp = {i for i, (territory, _) in publisher["SalesPerson"].items() if territory == host}
    cu = {i for i, (s, _) in publisher["Customer"].items() if s in sp}
    return {"SalesPerson": sp, "Customer": cu, "Orders": {i for i, (c, _) in publisher["Orders"].items() if c in cu},
            "Visit": {i for i, (c, s) in publisher["Visit"].items() if c in cu or s in sp}}


@dataclass
class Scenario:
    pub_url: str
    urls: dict[str, str]
    agent: MergeAgent
    states: dict[str, dict] = field(default_factory=dict)      # step -> {who: rows}
    summaries: dict[str, object] = field(default_factory=dict)
    leaks: list[str] = field(default_factory=list)              # every difference found after any merge

    def sql(self, who: str, *statements: str) -> None:
        with connect(self.pub_url if who == "HQ" else self.urls[who]) as r, r.transaction():
            for s in statements:
                r.execute(s)

    def merge(self, step: str) -> None:
        summary = self.agent.run(MergeOptions())
        self.summaries[step] = summary
        assert summary.ok, [(s.subscription, s.errors) for s in summary.subscriptions if s.errors]
        self.record(step)

    def record(self, step: str) -> None:
        state = {"HQ": rows(self.pub_url), **{n: rows(u) for n, u in self.urls.items()}}
        self.states[step] = state
        for n in self.urls:
            want = oracle(state["HQ"], STORES[n])
            for t in KEYS:
                got = state[n][t]
                if set(got) != want[t]:
                    self.leaks.append(f"after {step}: {n}.{t} holds {sorted(got)}, its partition is {sorted(want[t])}")
                for k in set(got) & want[t]:
                    if got[k] != state["HQ"][t][k]:
                        self.leaks.append(f"after {step}: {n}.{t} {k} = {got[k]}, publisher {state['HQ'][t][k]}")
