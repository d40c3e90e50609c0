"""Randomized filtered publication, in both modes at once: two identical topologies, one with
precomputed partitions and one evaluating membership at sync time (SetupBelongs), get the same random
DML at the publisher and at the subscribers (rows moved between partitions, parents moved under their
children, inserts out of a subscriber's partition, deletes; some through the sqlite3 shell / psql;
bulk transactions at the publisher that change every product of another publication of the same
publisher, ``Catalog``, with the customers, so that a generation of both publications is cut by key
at the small leveling threshold, and partition moves follow them), the same random merges (subsets,
directions, batch sizes) and injected crashes (in the partition evaluation, inside and after a
batch). After every merge session that completed for a subscriber in both directions, it holds
exactly its partition, computed independently in Python from the publisher's rows (a leak check
after every merge, not only at the end), and N's database, subscribed to ``Catalog`` too, the
publisher's products; after a final round every subscriber does, and both modes hold identical rows.

SPARKSYNC_PARTITION_EXAMPLES sets how many examples run (default 4); the count is printed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksync import failpoints as fp
from sparksync.dialects import connect
from sparksync.failpoints import InjectedFault
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.provision import setup
from sparksync.topology import parse_topology
from tests.support.clients import client_exec
from tests.support.databases import Databases, databases

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("SPARKSYNC_PARTITION_EXAMPLES", "4"))
KINDS = {"P": "postgresql", "N": "sqlite", "S": "postgresql", "N2": "sqlite"}
HOSTS = {"N": "N", "S": "S", "N2": "N"}
TERRITORIES = ["N", "S", "X"]            # X: nobody's partition
PRODUCTS = 120                           # the Catalog publication's rows, all changed by one bulk transaction
LEVELING = 12                            # generation_leveling_threshold of both publications: a bulk one is cut
ids = itertools.count(1000)
ran = {"examples": 0, "merges": 0, "crashes": 0, "ops": 0, "bulk": 0, "checks": 0}

dml = st.tuples(st.sampled_from(["P", "P", "N", "S", "N2"]),
                st.sampled_from(["move_person", "add_person", "move_customer", "add_customer", "add_order",
                                 "move_order", "delete_order", "rename_customer", "add_visit", "move_visit"]),
                st.integers(0, 10_000), st.sampled_from(TERRITORIES), st.booleans())
merge = st.tuples(st.just("merge"), st.sets(st.sampled_from(["N", "S", "N2"]), min_size=1),
                  st.sampled_from(["both", "both", "upload", "download"]),
                  st.sampled_from([None, None, "partitions.before_commit", "apply.before_commit",
                                   "apply.after_commit"]),
                  st.sampled_from([0, None]),    # on Spark, or in the agent's process (a small round)
                  st.sampled_from([100, 2]),     # generations per batch (2: a bulk generation's parts in several)
                  st.booleans())                 # N's Catalog subscription merged too
bulk = st.tuples(st.just("bulk"), st.integers(0, 10_000))      # at the publisher, Catalog and Sales at once
# one_of takes a strategy once however often it is given: a copy (.map(tuple)) weighs it twice
steps = st.lists(st.one_of(dml, dml.map(tuple), merge, merge.map(tuple), bulk), min_size=6, max_size=16)

TABLES = {"SalesPerson": ("SalesPersonID", '"Territory"'), "Customer": ("CustomerID", '"SalesPersonID"'),
          "Orders": ("OrderID", '"CustomerID"'), "Visit": ("VisitID", '"CustomerID", "SalesPersonID"')}


def _world(spark, tmp, dbs: Databases, mode: str):
    urls = dbs.urls(KINDS, f"part_{mode}")
    with connect(urls["P"]) as r:
        r.execute('CREATE TABLE "SalesPerson" ("SalesPersonID" integer PRIMARY KEY, "Territory" text)')
        r.execute('CREATE TABLE "Customer" ("CustomerID" integer PRIMARY KEY, "SalesPersonID" integer, "Name" text)')
        r.execute('CREATE TABLE "Orders" ("OrderID" integer PRIMARY KEY, "CustomerID" integer)')
        r.execute('CREATE TABLE "Visit" ("VisitID" integer PRIMARY KEY, "CustomerID" integer, "SalesPersonID" integer)')
        r.execute('CREATE TABLE "Product" ("ProductID" integer PRIMARY KEY, "Price" integer)')
        r.executemany('INSERT INTO "Product" VALUES (%s, 1)', [(i,) for i in range(1, PRODUCTS + 1)])
        r.executemany('INSERT INTO "SalesPerson" VALUES (%s, %s)', [(i, TERRITORIES[i % 3]) for i in range(1, 7)])
        r.executemany('INSERT INTO "Customer" VALUES (%s, %s, %s)', [(i, 1 + i % 6, f"c{i}") for i in range(10, 30)])
        r.executemany('INSERT INTO "Orders" VALUES (%s, %s)', [(i, 10 + i % 20) for i in range(100, 160)])
        r.executemany('INSERT INTO "Visit" VALUES (%s, %s, %s)', [(i, 10 + i % 20, 1 + i % 5) for i in range(200, 220)])
    topo = parse_topology({
        "publisher": {"name": "P", "database": urls["P"], "snapshot_dir": str(tmp / f"snap_{mode}")},
        "publications": [
            {"name": "Catalog", "generation_leveling_threshold": LEVELING, "articles": [{"table": "Product"}]},
            {"name": "Sales", "use_partition_groups": mode == "precomputed", "generation_leveling_threshold": LEVELING,
             "articles": [
                {"table": "SalesPerson", "filter": "Territory = HOST_NAME()"},
                {"table": "Customer", "join_filters": [{"parent": "SalesPerson", "unique_key": True,
                                                        "clause": "Customer.SalesPersonID = SalesPerson.SalesPersonID"}]},
                {"table": "Orders", "join_filters": [{"parent": "Customer", "unique_key": True,
                                                      "clause": "Orders.CustomerID = Customer.CustomerID"}]},
                {"table": "Visit", "join_filters": [         # a union: its customer's partitions and its salesperson's
                    {"parent": "Customer", "clause": "Visit.CustomerID = Customer.CustomerID"},
                    {"parent": "SalesPerson", "clause": "Visit.SalesPersonID = SalesPerson.SalesPersonID"}]}]}],
        "subscriptions": [{"name": n, "publication": "Sales", "database": urls[n], "host_name": h}
                          for n, h in HOSTS.items()]
        + [{"name": "NC", "publication": "Catalog", "database": urls["N"]}],      # N's database: both publications
    }, tmp)
    setup(topo, lambda: spark)
    return urls, MergeAgent(topo, spark)


@pytest.fixture(scope="module")
def worlds(spark, tmp_path_factory, pg_admin_url):

    tmp = tmp_path_factory.mktemp("partition_property")
    with databases(tmp, pg_admin_url) as dbs:
        yield {mode: _world(spark, tmp, dbs, mode) for mode in ("precomputed", "setupbelongs")}
        print(f"\npartitions: {ran['examples']} examples, {ran['ops']} DML statements ({ran['bulk']} bulk "
              f"transactions of {PRODUCTS} products), {ran['merges']} merges, "
              f"{ran['crashes']} injected crashes, {ran['checks']} partition checks, both modes")


def _rows(url: str) -> dict[str, dict[int, object]]:
    with connect(url) as r:
        return {t: {int(x[0]): (x[1] if len(x) == 2 else tuple(x[1:])) for x in r.query(f'SELECT "{key}", {col} FROM "{t}"')}
                for t, (key, col) in TABLES.items()}


def _partition(publisher: dict[str, dict[int, object]], host: str) -> dict[str, set[int]]:
    people = {i for i, t in publisher["SalesPerson"].items() if t == host}
    customers = {i for i, s in publisher["Customer"].items() if s in people}
    return {"SalesPerson": people, "Customer": customers,
            "Orders": {i for i, c in publisher["Orders"].items() if c in customers},
            "Visit": {i for i, (c, p) in publisher["Visit"].items() if c in customers or p in people}}


def _check(urls: dict[str, str], subs, when: str) -> None:
    publisher = _rows(urls["P"])
    for s in subs:
        want, have = _partition(publisher, HOSTS[s]), _rows(urls[s])
        for t in TABLES:
            assert set(have[t]) == want[t], (f"{when}: {s}.{t} holds {sorted(have[t])}, its partition at the "
                                              f"publisher is {sorted(want[t])}")
        ran["checks"] += 1


def _products(url: str) -> dict[int, int]:
    with connect(url) as r:
        return {int(i): int(p) for i, p in r.query('SELECT "ProductID", "Price" FROM "Product"')}


def _check_products(urls: dict[str, str], when: str) -> None:
    """N's database, subscribed to Catalog, holds the publisher's products (only the publisher changes them)."""
    assert _products(urls["N"]) == _products(urls["P"]), f"{when}: N's products differ from the publisher's"
    ran["checks"] += 1


def _bulk(urls: list[dict[str, str]], pick: int) -> None:
    """One transaction at the publisher: every product of Catalog and every customer of Sales (one
    generation of both publications, bigger than the leveling threshold)."""
    ran["bulk"] += 1
    for u in urls:
        with connect(u["P"]) as r, r.transaction():
            r.execute('UPDATE "Product" SET "Price" = "Price" + 1')
            r.execute(f'UPDATE "Customer" SET "Name" = \'bulk{pick}\'')


def _dml(urls: dict[str, str], who: str, op: str, pick: int, territory: str, via_client: bool,
         also: list[dict[str, str]] = ()) -> None:
    """One statement chosen from ``urls``' rows at ``who``, run there and at ``who`` of each of ``also``."""
    held = _rows(urls[who])

    def run(sql: str, via: bool) -> None:
        for u in [urls, *also]:
            client_exec(u[who], sql, via)

    people, customers, orders, visits = (sorted(held[t]) for t in TABLES)
    ran["ops"] += 1
    if op == "add_person":
        run(f'INSERT INTO "SalesPerson" ("SalesPersonID", "Territory") VALUES ({next(ids)}, \'{territory}\')',
              via_client)
    elif op == "move_person" and people:
        run(f'UPDATE "SalesPerson" SET "Territory" = \'{territory}\' WHERE "SalesPersonID" = '
                   f'{people[pick % len(people)]}', via_client)
    elif op in ("add_customer", "move_customer") and people:
        person = people[pick % len(people)] if who != "P" or pick % 4 else 1 + pick % 6
        if op == "add_customer":
            run(f'INSERT INTO "Customer" ("CustomerID", "SalesPersonID", "Name") VALUES ({next(ids)}, '
                       f'{person}, \'new\')', via_client)
        elif customers:
            run(f'UPDATE "Customer" SET "SalesPersonID" = {person} WHERE "CustomerID" = '
                       f'{customers[pick % len(customers)]}', via_client)
    elif op == "rename_customer" and customers:
        run(f'UPDATE "Customer" SET "Name" = \'{who}{pick}\' WHERE "CustomerID" = '
                   f'{customers[pick % len(customers)]}', via_client)
    elif op in ("add_order", "move_order") and customers:
        customer = customers[pick % len(customers)]
        if op == "add_order":
            run(f'INSERT INTO "Orders" ("OrderID", "CustomerID") VALUES ({next(ids)}, {customer})', via_client)
        elif orders:
            run(f'UPDATE "Orders" SET "CustomerID" = {customer} WHERE "OrderID" = {orders[pick % len(orders)]}',
                  via_client)
    elif op == "add_visit" and customers and people:
        run(f'INSERT INTO "Visit" ("VisitID", "CustomerID", "SalesPersonID") VALUES ({next(ids)}, '
                   f'{customers[pick % len(customers)]}, {people[pick % len(people)]})', via_client)
    elif op == "move_visit" and visits and people:
        run(f'UPDATE "Visit" SET "SalesPersonID" = {people[pick % len(people)] if pick % 3 else 1 + pick % 6} '
                   f'WHERE "VisitID" = {visits[pick % len(visits)]}', via_client)
    elif op == "delete_order" and orders:
        run(f'DELETE FROM "Orders" WHERE "OrderID" = {orders[pick % len(orders)]}', via_client)
    else:
        ran["ops"] -= 1


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(plan=steps)
def test_every_subscriber_holds_exactly_its_partition_in_both_modes(worlds, plan):
    fp_file = os.environ["SPARKSYNC_FAILPOINTS"]
    ran["examples"] += 1
    (first, _), *rest = worlds.values()
    for step in plan:
        if step[0] == "bulk":
            _bulk([u for u, _ in worlds.values()], step[1])
            continue
        if step[0] != "merge":
            _dml(first, *step, also=[u for u, _ in rest])
            continue
        _, subs, exchange, crash, in_driver, per_batch, catalog = step
        target = sorted(subs)[0]
        with_catalog = sorted(subs | ({"NC"} if catalog and "N" in subs else set()))
        for mode, (urls, agent) in worlds.items():
            armed = crash and not (crash.startswith("partitions") and mode == "setupbelongs")   # no evaluation there
            if armed:
                fp.arm(fp_file, crash if crash.startswith("partitions") else
                       f"{crash} {'P' if exchange == 'upload' else target}:0")
            summary = None
            with contextlib.suppress(InjectedFault):
                summary = agent.run(MergeOptions(exchange, per_batch, per_batch, subscriptions=with_catalog,
                                                 driver_round_changes=in_driver))
            ran["merges"] += 1
            ran["crashes"] += bool(armed) and not (os.path.exists(fp_file) and Path(fp_file).read_text().strip())
            if os.path.exists(fp_file):
                os.remove(fp_file)
            if summary is not None and exchange == "both":
                done = [s.subscription for s in summary.subscriptions if s.ok]
                _check(urls, [s for s in done if s in HOSTS], f"{mode}: after a merge of {sorted(subs)}")
                if "NC" in done:
                    _check_products(urls, f"{mode}: after a merge of {with_catalog}")
    final = {}
    for mode, (urls, agent) in worlds.items():
        for _ in range(2):
            summary = agent.run(MergeOptions())
            assert summary.ok, summary.to_dict()
        _check(urls, HOSTS, f"{mode}: after the final rounds")
        _check_products(urls, f"{mode}: after the final rounds")
        final[mode] = {who: _rows(u) for who, u in urls.items()}
    assert final["precomputed"] == final["setupbelongs"], "the two modes disagree"
