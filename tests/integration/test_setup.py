"""setup end to end on real databases: publish, snapshot (Spark), initialize subscribers (Spark tasks)."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.dialects.model import from_table_dict
from sparksync.merge.tracking import identity, pending
from sparksync.merge.tracking.generations import enumeration_bound
from sparksync.metadata import store
from sparksync.names import TableName
from sparksync.provision import SetupFailed, setup
from sparksync.snapshot.manifest import current_snapshot
from sparksync.topology import parse_topology
from sparksync.types import arrow_converter
from tests.support.demo_topology import build

pytestmark = pytest.mark.spark

TOPOLOGIES = [
    ("sqlite", ["sqlite", "postgresql"]),
    ("postgresql", ["sqlite", "postgresql"]),
]


def normalized_rows(r, table: TableName, info) -> dict[str, tuple]:
    cols = [c.name for c in info.columns]
    convs = [arrow_converter(c.type) for c in info.columns]
    rg = cols.index("rowguid")
    q = ", ".join(r.dialect.quote(c) for c in cols)
    out = {}
    for row in r.query(f"SELECT {q} FROM {identity.rows_of_table(r, table)} AS t"):
        vals = tuple(conv(v) for conv, v in zip(convs, row))
        out[str(vals[rg])] = vals
    return out


def assert_same_data(pub_url: str, sub_url: str, manifest) -> None:
    with connect(pub_url) as p, connect(sub_url) as s:
        for a in manifest.articles:
            info = from_table_dict(a.table_schema)
            src = normalized_rows(p, TableName(a.schema, a.table), info)
            dst_name = TableName(a.schema, a.table) if s.dialect.capabilities.supports_schemas else TableName(None, a.table)
            dst = normalized_rows(s, dst_name, info)
            assert src == dst, f"{a.name} differs at {sub_url}"
            assert len(src) == a.rows


@pytest.mark.parametrize("pub_kind,sub_kinds", TOPOLOGIES, ids=lambda v: v if isinstance(v, str) else "+".join(v))
def test_setup_initializes_mixed_subscribers(spark, dbs, tmp_path, pub_kind, sub_kinds):
    data, topo = build(dbs, tmp_path, pub_kind, sub_kinds)
    # a change before publishing is just data; a change after publishing carries lineage into the snapshot
    summary = setup(topo, lambda: spark)
    assert [r.ok for r in summary.initialized] == [True, True]
    snap_dir, manifest = current_snapshot(topo.snapshots, "Sales")
    assert len(manifest.articles) == 6
    nicks = [a.nickname for a in manifest.articles]
    by_name = {a.table: a.nickname for a in manifest.articles}
    assert by_name["Customer"] < by_name["SalesOrderHeader"] < by_name["SalesOrderDetail"]
    assert by_name["Product"] < by_name["SalesOrderDetail"]
    assert len(set(nicks)) == 6
    with connect(topo.publisher_url) as p:
        pub_subs = {r["name"]: r for r in store.select_rows(p, "sysmergesubscriptions")}
        assert pub_subs["HQ"]["replnickname"] == 1
    for s in topo.subscriptions:
        url = topo.resolve_url(s.database)
        assert_same_data(topo.publisher_url, url, manifest)
        with connect(url) as sub:
            ident = store.replica_identity(sub)
            assert ident.nickname == pub_subs[s.name]["replnickname"] and ident.nickname >= 2
            prow = store.select_rows(sub, "sysmergesubscriptions", {"role": "publisher"})[0]
            assert prow["recgen"] == manifest.snapshot_generation == pub_subs[s.name]["sentgen"]
            assert prow["sentgen"] == pub_subs[s.name]["recgen"]
            assert pub_subs[s.name]["status"] == 1
            baseline = store.select_rows(sub, "MSmerge_genhistory", {"generation": prow["sentgen"]})[0]
            assert baseline["genstatus"] == 2 and sorted(baseline["nicknames"]) == sorted([1, ident.nickname])
            # foreign keys were created between the subscriber's copies
            detail = sub.reflect(TableName(None, "SalesOrderDetail"))
            assert {fk.ref_table.name for fk in detail.foreign_keys} == {"SalesOrderHeader", "Product"}
            # tracking is installed: a local change is recorded with this replica's nickname
            sub.execute('UPDATE "Customer" SET "Territory" = \'Mars\' WHERE "CustomerID" = 1')
            nick_c = by_name["Customer"]
            pending.flush(sub)
            rows = [c for c in store.select_rows(sub, "MSmerge_contents", {"tablenick": nick_c})
                    if c["generation"] != baseline["generation"]]
            assert len(rows) == 1 and rows[0]["lineage"].get(str(ident.nickname)) == 1
            assert rows[0]["generation"] > baseline["generation"]


def test_setup_is_idempotent_and_adds_a_new_subscription(spark, dbs, tmp_path):
    data, topo = build(dbs, tmp_path, "sqlite", ["sqlite"])
    setup(topo, lambda: spark)
    snap_dir, manifest = current_snapshot(topo.snapshots, "Sales")

    def no_spark():
        raise AssertionError("an idempotent setup must not need Spark")

    again = setup(topo, no_spark)
    assert again.snapshots == {} and again.initialized == []
    data["subscriptions"].append({"name": "Late", "publication": "Sales", "database": dbs.url("postgresql", "late")})
    topo2 = parse_topology(data, tmp_path)
    third = setup(topo2, lambda: spark)
    assert third.snapshots == {}  # the current snapshot is reused
    assert [r.subscription for r in third.initialized] == ["Late"]
    assert_same_data(topo2.publisher_url, topo2.resolve_url(data["subscriptions"][-1]["database"]), manifest)


def test_changes_around_the_snapshot_are_neither_missed_nor_torn(spark, dbs, tmp_path, monkeypatch, kind):
    """Writes during the snapshot are not in it (consistent view) and sit above the snapshot generation."""
    import sparksync.merge.snapshot.writer as writer

    data, topo = build(dbs, tmp_path, kind, ["sqlite"])
    real_write = writer.write_parquet
    calls = []

    def write_then_change(spark_, plan, folder, key, split_by=None):
        written = real_write(spark_, plan, folder, key, split_by)
        if not calls:  # after the first article: a new order with its lines arrives at the publisher
            with connect(topo.publisher_url) as p:
                p.execute('INSERT INTO "SalesOrderHeader" ("SalesOrderID", "CustomerID", "OrderDate", "Status", '
                          '"SubTotal", "ModifiedDate") VALUES (5000, 1, \'2026-01-01 00:00:00\', 1, 10, '
                          '\'2026-01-01 00:00:00\')')
                p.execute('INSERT INTO "SalesOrderDetail" ("SalesOrderDetailID", "SalesOrderID", "ProductID", '
                          '"OrderQty", "UnitPrice", "ModifiedDate") VALUES (50000, 5000, 1, 1, 10, \'2026-01-01 00:00:00\')')
        calls.append(folder)
        return written

    monkeypatch.setattr(writer, "write_parquet", write_then_change)
    setup(topo, lambda: spark)
    snap_dir, manifest = current_snapshot(topo.snapshots, "Sales")
    sub_url = topo.resolve_url(topo.subscriptions[0].database)
    with connect(sub_url) as s:
        assert s.scalar('SELECT count(*) FROM "SalesOrderHeader" WHERE "SalesOrderID" = 5000') == 0
        assert s.scalar('SELECT count(*) FROM "SalesOrderDetail" WHERE "SalesOrderID" = 5000') == 0
    with connect(topo.publisher_url) as p:
        from sparksync.merge.tracking.generations import make_generation

        make_generation(p, 1)
        gens = [c["generation"] for c in store.select_rows(p, "MSmerge_contents")]
        assert len(gens) == 2 and all(g > manifest.snapshot_generation for g in gens)
        assert enumeration_bound(p) >= max(gens)


def test_a_failing_subscriber_is_reported_and_left_untouched(spark, dbs, tmp_path):
    data, topo = build(dbs, tmp_path, "sqlite", ["sqlite", "sqlite"])
    bad_url = topo.resolve_url(topo.subscriptions[1].database)
    with connect(bad_url) as b:  # a table in the way, of another shape, and pre_creation_cmd = none
        b.execute('CREATE TABLE "Customer" ("CustomerID" INTEGER PRIMARY KEY, "Other" TEXT)')
    data["subscriptions"][1]["pre_creation_cmd"] = "none"
    topo = parse_topology(data, tmp_path)
    with pytest.raises(SetupFailed) as e:
        setup(topo, lambda: spark)
    assert "S2" in e.value.message and "Customer" in e.value.message
    with connect(bad_url) as b:
        assert store.metadata_version(b) is None
        assert [n for (n,) in b.query("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["Customer"]
    with connect(topo.publisher_url) as p:
        rows = {r["name"]: r["status"] for r in store.select_rows(p, "sysmergesubscriptions")}
        assert rows["S1"] == 1 and rows["S2"] == 0
    # fix the subscriber and run setup again: only S2 is initialized now
    data["subscriptions"][1]["pre_creation_cmd"] = "drop"
    again = setup(parse_topology(data, tmp_path), lambda: spark)
    assert [(r.subscription, r.ok) for r in again.initialized] == [("S2", True)]


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_a_subscription_removed_from_the_configuration_is_dropped_at_the_next_setup(pub_kind, spark, dbs, tmp_path):
    from sparksync.merge.session.agent import MergeAgent
    from sparksync.merge.session.summary import MergeOptions
    from sparksync.status import gather_status

    data, topology = build(dbs, tmp_path, pub_kind, ["sqlite", "sqlite"])
    setup(topology, lambda: spark)
    S2 = data["subscriptions"][1]
    with connect(S2["database"]) as s2:
        s2.execute('UPDATE "Customer" SET "FirstName" = \'never sent\' WHERE "CustomerID" = 1')
    data["subscriptions"] = data["subscriptions"][:1]
    smaller = parse_topology(data, tmp_path)
    messages: list[str] = []
    setup(smaller, lambda: pytest.fail("nothing to initialize"), messages.append)
    assert any("S2 no longer configured: dropped at the publisher" in m for m in messages)
    with connect(data["publisher"]["database"]) as r:
        names = {x["name"] for x in store.select_rows(r, "sysmergesubscriptions") if x["role"] == "subscriber"}
    assert names == {"S1"}
    assert [s["name"] for s in gather_status(smaller)["subscriptions"]] == ["S1"]
    assert MergeAgent(smaller, spark).run(MergeOptions()).ok
    with connect(data["publisher"]["database"]) as r:
        assert r.scalar('SELECT "FirstName" FROM "Customer" WHERE "CustomerID" = 1') != "never sent"
    messages.clear()
    setup(smaller, lambda: pytest.fail("nothing to initialize"), messages.append)   # idempotent
    assert not any("no longer configured" in m for m in messages)


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_a_database_that_belonged_to_a_dropped_subscription_gets_a_fresh_identity(pub_kind, spark, dbs, tmp_path):
    """S2 uploads rows, is removed from the configuration; S3 subscribes with S2's database: it must not
    inherit S2's nickname (the generations S2 uploaded would count as already there) and must end with
    every row."""
    from sparksync.merge.session.agent import MergeAgent
    from sparksync.merge.session.summary import MergeOptions
    from sparksync.validation.subscriptions import validate

    data, topology = build(dbs, tmp_path, pub_kind, ["sqlite", "sqlite"])
    setup(topology, lambda: spark)
    s2_url = data["subscriptions"][1]["database"]
    with connect(s2_url) as s2:
        s2.executemany('UPDATE "Customer" SET "FirstName" = ? WHERE "CustomerID" = ?',
                       [(f"from S2 {i}", i) for i in range(1, 11)])
    assert MergeAgent(topology, spark).run(MergeOptions()).ok
    with connect(data["publisher"]["database"]) as r:
        old = {x["name"]: x["replnickname"] for x in store.select_rows(r, "sysmergesubscriptions")}
        r.execute('UPDATE "Customer" SET "LastName" = \'later\' WHERE "CustomerID" <= 5')
    data["subscriptions"] = [data["subscriptions"][0],
                             {**data["subscriptions"][1], "name": "S3", "database": s2_url}]
    moved = parse_topology(data, tmp_path)
    with connect(s2_url) as s2:      # the database is reset to an older state, as a replaced file would be
        s2.execute('UPDATE "Customer" SET "FirstName" = \'stale\'')
    setup(moved, lambda: spark)
    with connect(data["publisher"]["database"]) as r:
        new = {x["name"]: x["replnickname"] for x in store.select_rows(r, "sysmergesubscriptions")}
    assert "S2" not in new and new["S3"] not in old.values()
    assert MergeAgent(moved, spark).run(MergeOptions()).ok
    report = validate(moved, lambda: spark, checksum=True)
    assert report.ok, [(s.subscription, [(a.article, a.differences[:3]) for a in s.articles if not a.ok])
                       for s in report.subscriptions]

