"""Articles added to and dropped from a merge publication that has initialized subscriptions: an added
article reaches every subscriber from the snapshot alone (its partition of it, for a filtered one),
the rest untouched; a dropped article loses its tracking and metadata everywhere, its table stays."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.metadata import store
from sparksync.names import TableName
from sparksync.provision import setup
from sparksync.topology import parse_topology
from sparksync.validation.subscriptions import validate
from tests.support.filtered import Scenario, build, publication

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_an_article_added_later_reaches_each_subscriber_with_its_partition_only(pub_kind, spark, dbs, tmp_path):
    full = publication()
    without_visit = {**full, "articles": [a for a in full["articles"] if a["table"] != "Visit"]}
    kinds = {"StoreN": "sqlite", "StoreS": "postgresql"}
    pub_url, urls, topology = build(dbs, tmp_path, pub_kind, kinds, without_visit)
    setup(topology, lambda: spark)
    sc = Scenario(pub_url, urls, MergeAgent(topology, spark))
    assert sc.agent.run(MergeOptions()).ok
    for u in urls.values():              # the stores do not have the table yet
        with connect(u) as r:
            assert r.reflect(r.dialect.resolve_name(TableName.parse("Visit"))) is None
    sc.sql("StoreN", 'UPDATE "Orders" SET "Total" = 42 WHERE "OrderID" = 100')     # pending: must survive
    data = {"publisher": {"name": "HQ", "database": pub_url, "snapshot_dir": str(tmp_path / "snap")},
            "publications": [full],
            "subscriptions": [{"name": n, "publication": "Sales", "database": u,
                               "host_name": {"StoreN": "N", "StoreS": "S"}[n]} for n, u in urls.items()]}
    bigger = parse_topology(data, tmp_path)
    messages: list[str] = []
    setup(bigger, lambda: spark, messages.append)
    assert any("delivering new article(s) to 2 subscription(s)" in m for m in messages)
    sc.agent = MergeAgent(bigger, spark)
    sc.record("added")
    assert [x for x in sc.leaks if " holds " in x] == []          # each store holds its partition of Visit
    sc.leaks.clear()                                              # (StoreN's pending change differs, for now)
    assert set(sc.states["added"]["StoreN"]["Visit"]) == {200, 202} and set(sc.states["added"]["StoreS"]["Visit"]) \
        == {200, 201, 202}
    assert sc.states["added"]["StoreN"]["Orders"][100] == (10, 42)     # untouched, still pending
    sc.sql("HQ", 'INSERT INTO "Visit" ("VisitID", "CustomerID", "SalesPersonID") VALUES (203, 12, 3)')
    sc.sql("StoreS", 'UPDATE "Visit" SET "SalesPersonID" = 4 WHERE "VisitID" = 201')
    sc.merge("after")
    assert sc.leaks == []
    s = sc.states["after"]
    assert 203 in s["StoreN"]["Visit"] and s["HQ"]["Visit"][201] == (11, 4) and s["HQ"]["Orders"][100] == (10, 42)
    setup(bigger, lambda: pytest.fail("nothing to do"))          # idempotent: delivered once
    report = validate(bigger, lambda: spark, checksum=True)
    assert report.ok


def test_a_dropped_article_loses_tracking_everywhere_and_its_table_stays(spark, dbs, tmp_path):
    plain = {"name": "Sales", "articles": [{"table": t} for t in ("SalesPerson", "Customer", "Orders", "Visit")]}
    pub_url, urls, topology = build(dbs, tmp_path, "postgresql", {"StoreN": "sqlite", "StoreS": "postgresql"}, plain)
    setup(topology, lambda: spark)
    assert MergeAgent(topology, spark).run(MergeOptions()).ok
    data = {"publisher": {"name": "HQ", "database": pub_url, "snapshot_dir": str(tmp_path / "snap")},
            "publications": [{"name": "Sales", "articles": plain["articles"][:3]}],
            "subscriptions": [{"name": n, "publication": "Sales", "database": u} for n, u in urls.items()]}
    smaller = parse_topology(data, tmp_path)
    setup(smaller, lambda: spark)          # a new snapshot, without the article, for later subscribers
    for url in (pub_url, *urls.values()):
        with connect(url) as r:
            names = {a["source_table"] for a in store.select_rows(r, "sysmergearticles")}
            assert names == {"SalesPerson", "Customer", "Orders"}
            assert r.scalar('SELECT count(*) FROM "Visit"') == 3                  # the table stays
            assert r.dialect.list_merge_triggers(r, r.dialect.resolve_name(TableName.parse("Visit"))) == []
    with connect(urls["StoreN"]) as r:
        r.execute('UPDATE "Visit" SET "SalesPersonID" = 1 WHERE "VisitID" = 200')  # not tracked any more
    summary = MergeAgent(smaller, spark).run(MergeOptions())
    assert summary.ok and all(s.total("upload").updates == 0 for s in summary.subscriptions)
    assert validate(smaller, lambda: spark, checksum=True).ok


def test_a_delivery_that_crashes_is_finished_by_the_next_setup(spark, dbs, tmp_path, failpoints):
    from sparksync.provision import SetupFailed

    full = publication()
    without_visit = {**full, "articles": [a for a in full["articles"] if a["table"] != "Visit"]}
    pub_url, urls, topology = build(dbs, tmp_path, "sqlite", {"StoreN": "sqlite", "StoreS": "sqlite"}, without_visit)
    setup(topology, lambda: spark)
    bigger = topology.model_copy(update={"publications": parse_topology(
        {"publisher": {"name": "HQ", "database": pub_url, "snapshot_dir": str(tmp_path / "snap")},
         "publications": [full], "subscriptions": []}, tmp_path).publications})
    failpoints("deliver.before_commit StoreN")
    with pytest.raises(SetupFailed, match="StoreN"):
        setup(bigger, lambda: spark)
    with connect(urls["StoreN"]) as r:       # rolled back whole: no table, no article
        assert r.reflect(TableName.parse("Visit")) is None
        assert "Visit" not in {a["source_table"] for a in store.select_rows(r, "sysmergearticles")}
    setup(bigger, lambda: spark)
    sc = Scenario(pub_url, urls, MergeAgent(bigger, spark))
    sc.merge("finished")
    assert sc.leaks == [] and set(sc.states["finished"]["StoreN"]["Visit"]) == {200, 202}
