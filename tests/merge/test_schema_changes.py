"""Schema changes of merge articles on real databases: a column added at the publisher with any client
(with a default that fills the existing rows everywhere), columns added and dropped with
'sparksync schema-change', a subscriber behind by several changes catching up in order, SQLite and
PostgreSQL subscribers each altered in their own dialect, and changes that cannot be replicated
refused with nothing changed."""

from __future__ import annotations

import re

import pytest

from sparksync.dialects import connect
from sparksync.errors import SchemaDrift, SchemaError
from sparksync.merge.publish import schema_change as merge_schema_change
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.merge.tracking import pending
from sparksync.metadata import store
from sparksync.provision import setup
from sparksync.validation.subscriptions import validate
from tests.support.demo_topology import build

pytestmark = pytest.mark.spark


def columns(url: str, table: str) -> list[str]:
    from sparksync.names import TableName

    with connect(url) as r:
        info = r.reflect(TableName(None, table))
        assert info is not None
        return [c.name for c in info.columns]


def check(topology, spark) -> None:
    report = validate(topology, lambda: spark, checksum=True)
    assert report.ok, [(s.subscription, s.error, [(a.article, a.differences[:3]) for a in s.articles if not a.ok])
                       for s in report.subscriptions if not s.ok]


def test_columns_added_and_dropped_reach_every_subscriber_in_order(spark, dbs, tmp_path):
    """A PostgreSQL publisher with a SQLite and a PostgreSQL subscriber (a SQLite publisher: the CLI's
    demo tests and the randomized lifecycle test)."""
    data, topology = build(dbs, tmp_path, "postgresql", ["sqlite", "postgresql"])
    hq_url, s1_url, s2_url = data["publisher"]["database"], *(s["database"] for s in data["subscriptions"])
    setup(topology, lambda: spark)
    agent = MergeAgent(topology, spark)
    assert agent.run(MergeOptions()).ok
    # a client adds a column with a default: the existing rows get it at the publisher
    with connect(hq_url) as hq:
        hq.execute('ALTER TABLE "Customer" ADD COLUMN "Loyalty" integer DEFAULT 5')
    with pytest.raises(SchemaDrift, match=r"Customer \(column Loyalty was added\): run 'sparksync setup'"):
        agent.run(MergeOptions())
    with connect(s1_url) as s1:                       # meanwhile at a subscriber, without the column
        s1.execute('UPDATE "Customer" SET "FirstName" = \'s1\' WHERE "CustomerID" = 3')
    messages: list[str] = []
    setup(topology, lambda: spark, report=messages.append)
    assert any("Customer: added column Loyalty (schema version 1)" in m for m in messages), messages
    with connect(hq_url) as hq:
        hq.execute('UPDATE "Customer" SET "Loyalty" = 9 WHERE "CustomerID" = 1')
        hq.execute('INSERT INTO "Customer" ("CustomerID", "FirstName", "LastName", "ModifiedDate", "Loyalty") '
                   "VALUES (500, 'New', 'Customer', '2024-01-01 00:00:00', 7)")
    assert agent.run(MergeOptions()).ok
    for url in (s1_url, s2_url):
        assert "Loyalty" in columns(url, "Customer")
        with connect(url) as r:
            assert r.scalar('SELECT "Loyalty" FROM "Customer" WHERE "CustomerID" = 1') == 9
            assert r.scalar('SELECT "Loyalty" FROM "Customer" WHERE "CustomerID" = 2') == 5     # the default
            assert r.scalar('SELECT "Loyalty" FROM "Customer" WHERE "CustomerID" = 500') == 7
            assert store.select_rows(r, "sysmergepublications", {"name": "Sales"})[0]["schema_version"] == 1
    with connect(hq_url) as hq:
        assert hq.scalar('SELECT "FirstName" FROM "Customer" WHERE "CustomerID" = 3') == "s1"
    # the new column is tracked at a subscriber too (its triggers were regenerated)
    with connect(s2_url) as s2:
        s2.execute('UPDATE "Customer" SET "Loyalty" = 11 WHERE "CustomerID" = 4')
    assert agent.run(MergeOptions()).ok
    with connect(s1_url) as s1:
        assert s1.scalar('SELECT "Loyalty" FROM "Customer" WHERE "CustomerID" = 4') == 11
    check(topology, spark)
    # two more changes with the command; S2 does not merge in between: it catches up in order
    (line,) = merge_schema_change.change(topology, "Sales", "Customer", drop="EmailAddress")
    assert line.endswith("Customer: dropped column EmailAddress (schema version 2)")
    assert agent.run(MergeOptions(subscriptions=["S1"])).ok
    merge_schema_change.change(topology, "Sales", "Product", add="Note text")
    with connect(hq_url) as hq:
        hq.execute('UPDATE "Product" SET "Note" = \'fragile\' WHERE "ProductID" = 2')   # column-tracked article
    summary = agent.run(MergeOptions())
    assert summary.ok
    for url in (s1_url, s2_url):
        assert "EmailAddress" not in columns(url, "Customer") and "Note" in columns(url, "Product")
        with connect(url) as r:
            assert r.scalar('SELECT "Note" FROM "Product" WHERE "ProductID" = 2') == "fragile"
    check(topology, spark)
    # a dropped column of a column-tracked article leaves the column versions (colv) everywhere
    merge_schema_change.change(topology, "Sales", "Product", drop="Note")
    assert agent.run(MergeOptions()).ok
    for url in (hq_url, s1_url, s2_url):
        with connect(url) as r:
            pending.flush(r)
            colvs = [c for (c,) in r.query(f"SELECT colv FROM {r.meta('MSmerge_contents')} WHERE colv IS NOT NULL")]
            assert colvs and not any("Note" in str(c) for c in colvs), url
    # a subscriber initialized later gets the new shape from a new snapshot
    data["subscriptions"].append({"name": "S3", "publication": "Sales", "database": dbs.url("sqlite", "s3")})
    from sparksync.topology import parse_topology

    topology = parse_topology(data, tmp_path)
    messages = []
    setup(topology, lambda: spark, report=messages.append)
    assert any("predates schema change 4" in m for m in messages), messages
    assert "Note" not in columns(data["subscriptions"][2]["database"], "Product")
    assert "Loyalty" in columns(data["subscriptions"][2]["database"], "Customer")
    assert MergeAgent(topology, spark).run(MergeOptions()).ok
    check(topology, spark)


def test_changes_that_cannot_be_replicated_are_refused_and_change_nothing(spark, dbs, tmp_path):
    data, topology = build(dbs, tmp_path, "postgresql", ["sqlite"])
    hq_url = data["publisher"]["database"]
    setup(topology, lambda: spark)
    for statement, expected, undo in (
            ('ALTER TABLE "Customer" ALTER COLUMN "FirstName" TYPE varchar(10)', "FirstName changed type",
             'ALTER TABLE "Customer" ALTER COLUMN "FirstName" TYPE varchar(50)'),
            ('ALTER TABLE "Customer" ADD COLUMN "Seen" timestamptz DEFAULT now()', "the default now() is not a constant",
             'ALTER TABLE "Customer" DROP COLUMN "Seen"'),
    ):
        with connect(hq_url) as hq:
            hq.execute(statement)
        with pytest.raises(SchemaError, match=re.escape(expected) + ".*drop the article from the publication"):
            setup(topology, lambda: spark)
        with connect(hq_url) as hq:
            assert store.select_rows(hq, "sysmergeschemachange") == []
            hq.execute(undo)
    with pytest.raises(SchemaError, match="CustomerID was dropped but it is in the primary key"):
        merge_schema_change.change(topology, "Sales", "Customer", drop="CustomerID")
    with pytest.raises(SchemaError, match="CustomerID was dropped but it is in a foreign key"):
        merge_schema_change.change(topology, "Sales", "SalesOrderHeader", drop="CustomerID")
    with pytest.raises(SchemaError, match="column FirstName already exists"):
        merge_schema_change.change(topology, "Sales", "Customer", add="FirstName text")
    assert "FirstName" in columns(data["subscriptions"][0]["database"], "Customer")
    assert MergeAgent(topology, spark).run(MergeOptions()).ok


def test_a_schema_change_of_a_filtered_article_reaches_each_partition(spark, dbs, tmp_path):
    from sparksync.topology import parse_topology

    data, _ = build(dbs, tmp_path, "postgresql", ["sqlite", "postgresql"])
    data["publications"][0]["articles"][:4] = [
        {"table": "Customer", "filter": "Territory = HOST_NAME()"},
        {"table": "Product", "column_tracking": True},
        {"table": "SalesOrderHeader", "join_filters": [
            {"parent": "Customer", "clause": "SalesOrderHeader.CustomerID = Customer.CustomerID", "unique_key": True}]},
        {"table": "SalesOrderDetail", "join_filters": [
            {"parent": "SalesOrderHeader", "clause": "SalesOrderDetail.SalesOrderID = SalesOrderHeader.SalesOrderID",
             "unique_key": True}]}]
    data["subscriptions"][0]["host_name"], data["subscriptions"][1]["host_name"] = "Canada", "France"
    topology = parse_topology(data, tmp_path)
    hq_url, s1_url, s2_url = data["publisher"]["database"], *(s["database"] for s in data["subscriptions"])
    setup(topology, lambda: spark)
    agent = MergeAgent(topology, spark)
    assert agent.run(MergeOptions()).ok
    with connect(hq_url) as hq:
        hq.execute('ALTER TABLE "Customer" ADD COLUMN "Segment" text DEFAULT \'retail\'')
    setup(topology, lambda: spark)
    with connect(hq_url) as hq:
        moving = hq.scalar('SELECT min("CustomerID") FROM "Customer" WHERE "Territory" = \'Canada\'')
        hq.execute(f'UPDATE "Customer" SET "Territory" = \'France\', "Segment" = \'vip\' WHERE "CustomerID" = {moving}')
    assert agent.run(MergeOptions()).ok
    with connect(s1_url) as s1, connect(s2_url) as s2:
        assert s1.scalar(f'SELECT count(*) FROM "Customer" WHERE "CustomerID" = {moving}') == 0
        assert s2.scalar(f'SELECT "Segment" FROM "Customer" WHERE "CustomerID" = {moving}') == "vip"
        assert s1.scalar('SELECT count(*) FROM "Customer" WHERE "Segment" = \'retail\'') == s1.scalar(
            'SELECT count(*) FROM "Customer"') > 0
    check(topology, spark)
