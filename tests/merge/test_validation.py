"""Validation of merge subscriptions (row counts, checksums on Spark, the rows that differ) and repair,
on a filtered publication (each store is validated against its partition) with SQLite and PostgreSQL
replicas. The subscribers are damaged *without* tracking (as a restore or a hand edit under the
agent's flag would), so nothing is pending and only validation can see it.

One topology per publisher dialect; the named checks read what the scenario recorded.
"""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.errors import ConfigurationError
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.merge.tracking.articles import agent_writes, upsert_by_rowguid
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow
from sparksync.provision import setup
from sparksync.validation.repair import repair
from sparksync.validation.report import RepairRefused
from sparksync.validation.subscriptions import validate
from tests.support.databases import databases
from tests.support.filtered import Scenario, build
from tests.support.publishing import rows_of

PAIRS = {
    "sqlite_publisher": ("sqlite", {"StoreN": "postgresql", "StoreS": "sqlite", "StoreN2": "sqlite"}),
    "postgresql_publisher": ("postgresql", {"StoreN": "sqlite", "StoreS": "postgresql", "StoreN2": "postgresql"}),
}


def untracked(url: str, *statements: str) -> None:
    """Change a subscriber behind the merge triggers' back (nothing is recorded, nothing pending)."""
    with connect(url) as r, r.transaction(), agent_writes(r):
        for s in statements:
            r.execute(s)


def by_article(result, subscription: str) -> dict:
    (s,) = [x for x in result.subscriptions if x.subscription == subscription]
    return {a.article.split(".")[-1]: a for a in s.articles}      # public.Orders at a PostgreSQL publisher


@pytest.fixture(scope="module", params=list(PAIRS))
def world(request, spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    with databases(tmp, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        pub_kind, sub_kinds = PAIRS[request.param]
        pub_url, urls, topology = build(dbs, tmp, pub_kind, sub_kinds)
        setup(topology, lambda: spark)
        sc = Scenario(pub_url, urls, MergeAgent(topology, spark))
        sc.merge("initial")
        assert sc.leaks == []
        w = {"sc": sc, "topology": topology, "kind": pub_kind}
        w["clean_counts"] = validate(topology, lambda: spark)
        w["clean"] = validate(topology, lambda: spark, checksum=True)
        # damage, untracked: StoreN loses order 100 (missing), gets customer 11 of partition S (extra, a
        # leak) and a changed name; StoreS gets an order total changed
        guid11 = None
        with connect(pub_url) as p:
            guid11 = str(p.scalar(f'SELECT "rowguid" FROM {rows_of(p, "Customer")} AS t WHERE "CustomerID" = 11'))
        untracked(urls["StoreN"], 'DELETE FROM "Orders" WHERE "OrderID" = 100',
                  'UPDATE "Customer" SET "Name" = \'damaged\' WHERE "CustomerID" = 12')
        with connect(urls["StoreN"]) as r, r.transaction(), agent_writes(r):
            customer = next(tracked_article(a) for a in store.select(r, ArticleRow) if a.source_table == "Customer")
            upsert_by_rowguid(r, customer, {"CustomerID": 11, "SalesPersonID": 2, "Name": "c11", "rowguid": guid11})
        untracked(urls["StoreS"], 'UPDATE "Orders" SET "Total" = 999 WHERE "OrderID" = 102')
        w["damaged_counts"] = validate(topology, lambda: spark)
        w["damaged"] = validate(topology, lambda: spark, checksum=True)
        # a tracked change at StoreS: pending, so its repair is refused until it is merged
        sc.sql("StoreS", 'UPDATE "SalesPerson" SET "Name" = \'pending\' WHERE "SalesPersonID" = 2')
        pending = validate(topology, lambda: spark, checksum=True)
        w["pending"] = pending
        with pytest.raises(RepairRefused) as refused:
            repair(topology, pending)
        w["refused"] = refused.value
        sc.merge("pending_merged")
        w["before_repair"] = validate(topology, lambda: spark, checksum=True)
        w["repaired"] = repair(topology, w["before_repair"])
        w["after_repair"] = validate(topology, lambda: spark, checksum=True)
        summary = sc.agent.run(MergeOptions())
        w["merge_after_repair"] = summary
        sc.leaks = []                  # the damage was seen by the merges in between: only the end state counts
        sc.record("after_repair_merge")
        yield w


def test_clean_replicas_validate_by_count_and_checksum(world):
    for report in (world["clean_counts"], world["clean"]):
        assert report.ok and {s.subscription for s in report.subscriptions} == {"StoreN", "StoreS", "StoreN2"}
    n = by_article(world["clean"], "StoreN")
    # StoreN is validated against its partition (salespeople 1 and 3 of territory N), not the whole table
    assert n["SalesPerson"].publisher_rows == n["SalesPerson"].subscriber_rows == 2
    assert n["Orders"].publisher_checksum == n["Orders"].subscriber_checksum != "0"
    assert by_article(world["clean"], "StoreN")["Orders"].publisher_checksum == \
        by_article(world["clean"], "StoreN2")["Orders"].subscriber_checksum


def test_mixed_dialect_replicas_of_the_same_rows_have_the_same_checksum(world):
    # StoreN and StoreN2 are different dialects in both topologies, with the same partition
    a, b = by_article(world["clean"], "StoreN"), by_article(world["clean"], "StoreN2")
    assert {k: v.subscriber_checksum for k, v in a.items()} == {k: v.subscriber_checksum for k, v in b.items()}


def test_row_counts_see_a_missing_and_an_extra_row(world):
    n = by_article(world["damaged_counts"], "StoreN")
    assert not world["damaged_counts"].ok
    assert (n["Orders"].publisher_rows, n["Orders"].subscriber_rows) == (3, 2)
    assert (n["Customer"].publisher_rows, n["Customer"].subscriber_rows) == (2, 3)
    # a changed value keeps the count: StoreS passes a count-only validation
    assert all(a.ok for a in by_article(world["damaged_counts"], "StoreS").values())


def test_checksums_name_each_row_that_differs(world):
    report = world["damaged"]
    n, s = by_article(report, "StoreN"), by_article(report, "StoreS")
    assert [(d.kind, d.key) for d in n["Orders"].differences] == [("missing", "OrderID=100")]
    assert sorted((d.kind, d.key) for d in n["Customer"].differences) == [("changed", "CustomerID=12"),
                                                                          ("extra", "CustomerID=11")]
    assert [(d.kind, d.key) for d in s["Orders"].differences] == [("changed", "OrderID=102")]
    assert s["Orders"].publisher_rows == s["Orders"].subscriber_rows
    assert s["Orders"].publisher_checksum != s["Orders"].subscriber_checksum
    assert all(a.ok for a in by_article(report, "StoreN2").values())
    assert report.to_dict()["subscriptions"][0]["articles"][0].keys() >= {"missing", "extra", "changed", "differences"}


def test_repair_is_refused_while_changes_are_pending(world):
    (s,) = [x for x in world["pending"].subscriptions if x.subscription == "StoreS"]
    assert s.pending_upload == 1
    assert "StoreS" in world["refused"].message and "run 'sparksync merge' first" in world["refused"].message


def test_repair_writes_the_publishers_rows_and_removes_extra_ones(world):
    done = {s.subscription: s.repaired for s in world["repaired"].subscriptions}
    assert done == {"StoreN": 3, "StoreS": 1, "StoreN2": 0}
    assert world["after_repair"].ok
    state = world["sc"].states["after_repair_merge"]
    assert state["StoreN"]["Orders"][100] == state["HQ"]["Orders"][100]
    assert 11 not in state["StoreN"]["Customer"] and state["StoreN"]["Customer"][12] == state["HQ"]["Customer"][12]
    assert state["StoreS"]["Orders"][102] == state["HQ"]["Orders"][102]


def test_repaired_rows_are_not_uploaded_back(world):
    summary = world["merge_after_repair"]
    assert summary.ok
    assert all(sum(vars(s.total("upload")).get(k, 0) for k in ("inserts", "updates", "deletes")) == 0
               for s in summary.subscriptions)
    state = world["sc"].states["after_repair_merge"]
    assert state["HQ"]["Customer"][11] == (2, "c11") and state["HQ"]["Orders"][102][1] == 5
    assert world["sc"].leaks == []


def test_an_unknown_subscription_is_refused(world):
    with pytest.raises(ConfigurationError, match="no subscription named 'Nope'"):
        validate(world["topology"], lambda: None, subscriptions=["Nope"])


def test_an_unreachable_subscriber_is_its_own_error(world, spark, tmp_path):
    topo = world["topology"]
    broken = [s.model_copy(update={"database": f"sqlite:///{tmp_path}/missing/dir/x.db"}) if s.name == "StoreS" else s
              for s in topo.subscriptions]
    report = validate(topo.model_copy(update={"subscriptions": broken}), lambda: spark, checksum=True)
    errors = {s.subscription: s.error for s in report.subscriptions}
    assert errors["StoreN"] is None and errors["StoreN2"] is None and errors["StoreS"]
    assert not report.ok and report.subscriptions[0].articles


def test_a_value_that_does_not_fit_its_column_fails_only_its_replica(world, spark):
    """A SQLite replica holding text in an INTEGER column (a hand edit, a damaged import): that
    subscription fails with the row and the column named, the others are validated; a bad value at
    the publisher fails the subscriptions whose partition holds the row, with the same message.
    Never an exception, never a pass."""
    topo, sc = world["topology"], world["sc"]
    sqlite_sub = next(n for n in ("StoreN", "StoreS", "StoreN2") if sc.urls[n].startswith("sqlite"))

    def with_bad_value(url: str):
        with connect(url) as r:
            key, before = r.query('SELECT "OrderID", "Total" FROM "Orders" ORDER BY 1 LIMIT 1')[0]
        untracked(url, f'UPDATE "Orders" SET "Total" = \'lots\' WHERE "OrderID" = {key}')
        try:
            return key, validate(topo, lambda: spark, checksum=True)
        finally:
            untracked(url, f'UPDATE "Orders" SET "Total" = {int(before)} WHERE "OrderID" = {key}')

    other = next(n for n in ("StoreN", "StoreS", "StoreN2") if n != sqlite_sub)    # and a table gone there
    untracked(sc.urls[other], 'ALTER TABLE "Visit" RENAME TO "Visit_moved"')
    try:
        key, report = with_bad_value(sc.urls[sqlite_sub])
    finally:
        untracked(sc.urls[other], 'ALTER TABLE "Visit_moved" RENAME TO "Visit"')
    errors = {s.subscription: s.error for s in report.subscriptions}
    assert f"OrderID={key}" in errors[sqlite_sub] and "Total" in errors[sqlite_sub]
    assert "'lots'" in errors[sqlite_sub] and not report.ok
    assert errors[other].startswith(f"{other}, article ") and "Visit" in errors[other]
    assert "no such table" in errors[other] or "does not exist" in errors[other]
    for s in report.subscriptions:
        if s.subscription not in (sqlite_sub, other):
            assert s.error is None and s.ok and s.articles, s.to_dict()
        else:               # its other articles were compared
            assert {a.article.split(".")[-1] for a in s.articles} >= {"SalesPerson", "Customer"}, s.to_dict()
    if world["kind"] != "sqlite":
        return
    key, report = with_bad_value(sc.pub_url)       # read once per partition: only its partition's subscribers fail
    holders = set()
    for name, url in sc.urls.items():
        with connect(url) as r:
            if r.scalar(f'SELECT count(*) FROM "Orders" WHERE "OrderID" = {key}'):
                holders.add(name)
    assert holders and not report.ok
    for s in report.subscriptions:
        assert (f"OrderID={key}" in (s.error or "")) == (s.subscription in holders), s.to_dict()
