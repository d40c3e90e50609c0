"""Partition membership (seed 002) evaluated by the database, on both dialects: a 3-level join chain
(Orders -> Customer -> SalesPerson) under a parameterized row filter, checked against membership
computed independently in Python, before and after rows move between partitions."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.filters import FilterError, parse_filter, parse_join_filter
from sparksync.merge.partitions.scheme import FilteredArticle, JoinLink, PartitionScheme
from sparksync.names import TableName

SCHEMA = {
    "sqlite": [
        'CREATE TABLE "SalesPerson" ("SalesPersonID" INTEGER PRIMARY KEY, "Territory" TEXT, "Active" BOOLEAN)',
        'CREATE TABLE "Customer" ("CustomerID" INTEGER PRIMARY KEY, "SalesPersonID" INTEGER, "Name" TEXT)',
        'CREATE TABLE "Orders" ("OrderID" INTEGER PRIMARY KEY, "CustomerID" INTEGER, "Total" REAL)',
    ],
    "postgresql": [
        'CREATE TABLE "SalesPerson" ("SalesPersonID" integer PRIMARY KEY, "Territory" text, "Active" boolean)',
        'CREATE TABLE "Customer" ("CustomerID" integer PRIMARY KEY, "SalesPersonID" integer, "Name" text)',
        'CREATE TABLE "Orders" ("OrderID" integer PRIMARY KEY, "CustomerID" integer, "Total" double precision)',
    ],
}
PEOPLE = {1: ("N", True), 2: ("S", True), 3: ("N", False), 4: ("O'Hara", True)}
CUSTOMERS = {10: 1, 11: 2, 12: 3, 13: None, 14: 4}
ORDERS = {100: 10, 101: 10, 102: 11, 103: 12, 104: 13, 105: 14}


def _oracle(people, customers, orders, host):
    """Membership by hand: salespeople of territory ``host`` that are active, their customers, their orders."""
    sp = {i for i, (t, active) in people.items() if t == host and active}
    cu = {i for i, s in customers.items() if s in sp}
    return {"SalesPerson": sp, "Customer": cu, "Orders": {i for i, c in orders.items() if c in cu}}


@pytest.fixture
def replica(kind, dbs):
    r = connect(dbs.url(kind, "parts"), "publisher")
    with r.transaction():
        for stmt in SCHEMA[kind]:
            r.execute(stmt)
        put = [(i, t, a) for i, (t, a) in PEOPLE.items()]
        r.executemany(f"INSERT INTO {r.table_sql(TableName(None, 'SalesPerson'))} VALUES ({r.p}, {r.p}, {r.p})", put)
        r.executemany(f"INSERT INTO {r.table_sql(TableName(None, 'Customer'))} VALUES ({r.p}, {r.p}, 'c')",
                      list(CUSTOMERS.items()))
        r.executemany(f"INSERT INTO {r.table_sql(TableName(None, 'Orders'))} VALUES ({r.p}, {r.p}, 1.5)",
                      list(ORDERS.items()))
    yield r
    r.close()


def _scheme(replica) -> PartitionScheme:
    info = {}
    for n in ("SalesPerson", "Customer", "Orders"):
        found = replica.reflect(replica.dialect.resolve_name(TableName(None, n)))
        assert found is not None
        info[n] = found
    names = {n: [c.name for c in i.columns] for n, i in info.items()}

    def art(name, row_filter=None, joins=()):
        return FilteredArticle(name, info[name].name, info[name].columns, row_filter, tuple(joins))

    return PartitionScheme([
        art("SalesPerson", parse_filter("Territory = HOST_NAME() AND Active = 1", names["SalesPerson"],
                                        "Sales, article SalesPerson", parameters=True)),
        art("Customer", joins=[JoinLink("SalesPerson", parse_join_filter(
            "Customer.SalesPersonID = SalesPerson.SalesPersonID", "Customer", names["Customer"], "SalesPerson",
            names["SalesPerson"], "Sales, article Customer"), unique_key=True)]),
        art("Orders", joins=[JoinLink("Customer", parse_join_filter(
            "Orders.CustomerID = Customer.CustomerID", "Orders", names["Orders"], "Customer", names["Customer"],
            "Sales, article Orders"), unique_key=True)]),
    ])


def _members(replica, scheme, host):
    key = {"SalesPerson": "SalesPersonID", "Customer": "CustomerID", "Orders": "OrderID"}
    return {n: {int(r[0]) for r in replica.query(scheme.members_sql(replica.dialect, n, [key[n]],
                                                                     {"host_name": host}))}
            for n in key}


@pytest.mark.parametrize("host", ["N", "S", "O'Hara", "nobody"])
def test_each_partition_holds_what_the_filters_say(replica, host):
    scheme = _scheme(replica)
    assert scheme.parameters("Orders") == {"host_name"}
    assert _members(replica, scheme, host) == _oracle(PEOPLE, CUSTOMERS, ORDERS, host)


def test_a_customer_moving_to_another_territory_takes_its_orders(replica):
    scheme = _scheme(replica)
    before = _members(replica, scheme, "S")
    assert 10 not in before["Customer"] and not {100, 101} & before["Orders"]
    q = replica.dialect.quote
    with replica.transaction():
        replica.execute(f"UPDATE {replica.table_sql(TableName(None, 'Customer'))} SET {q('SalesPersonID')} = 2 "
                        f"WHERE {q('CustomerID')} = 10")
    moved = {**CUSTOMERS, 10: 2}
    for host in ("N", "S"):
        assert _members(replica, scheme, host) == _oracle(PEOPLE, moved, ORDERS, host)
    assert {100, 101} <= _members(replica, scheme, "S")["Orders"]


def test_join_filter_cycles_and_unknown_parents_are_refused(replica):
    scheme = _scheme(replica)
    a, c = scheme.articles["SalesPerson"], scheme.articles["Customer"]
    back = JoinLink("Orders", parse_join_filter("SalesPerson.SalesPersonID = Orders.CustomerID", "SalesPerson",
                                                ["SalesPersonID"], "Orders", ["CustomerID"], "x"))
    cyclic = FilteredArticle(a.name, a.table, a.columns, a.row_filter, (back,))
    with pytest.raises(FilterError, match="cycle: SalesPerson -> Orders -> Customer -> SalesPerson"):
        PartitionScheme([cyclic, c, scheme.articles["Orders"]])
    with pytest.raises(FilterError, match="parent SalesPerson is not an article"):
        PartitionScheme([c])


def test_chain_joins_find_every_partition_at_once_as_the_conditions_do(replica):
    """``with_partitions`` (joins up the chain to a partitions table, the parameters as its columns)
    gives each row the partitions ``condition`` gives it one partition at a time."""
    from sparksync.filters import partition_column

    scheme = _scheme(replica)
    hosts = {1: "N", 2: "S", 3: "O'Hara", 4: "nobody"}
    with replica.transaction():
        replica.execute('CREATE TABLE "pgroups" ("partition_id" integer, "host_name" text, "login" text)')
        replica.executemany(f'INSERT INTO "pgroups" VALUES ({replica.p}, {replica.p}, NULL)', list(hosts.items()))
    key = {"SalesPerson": "SalesPersonID", "Customer": "CustomerID", "Orders": "OrderID"}
    params = {k: partition_column("pg", k) for k in ("host_name", "login")}
    for name, k in key.items():
        joined = scheme.with_partitions(replica.dialect, name, "m", '"pgroups"', "pg", params)
        assert scheme.chain(replica.dialect, name, "m", params) is not None and joined.unique
        got: dict[int, set[int]] = {}
        for row_id, pid in replica.query(f'SELECT m."{k}", pg.partition_id FROM '
                                         f'{replica.table_sql(TableName(None, name))} AS m {joined.joins}'):
            got.setdefault(int(pid), set()).add(int(row_id))
        for pid, host in hosts.items():
            assert got.get(pid, set()) == _oracle(PEOPLE, CUSTOMERS, ORDERS, host)[name], (name, host)
