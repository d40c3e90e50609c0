"""Schema change commands: a column added or dropped at the publisher reaches every subscriber in
order with the data, and the generated procedures are regenerated for the new layout."""

from __future__ import annotations

import pytest

from sparksync import api
from sparksync.dialects import connect
from sparksync.errors import SchemaError
from sparksync.names import TableName
from sparksync.transactional.publish.schema_change import change
from tests.support.transactional import build, replicate, setup_topology, vendor_article, vendor_rows, vendor_table

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("publisher", ["postgresql", "sqlite"])
def test_add_and_drop_a_column(spark, dbs, tmp_path, pg_admin_url, publisher):
    tx = build(dbs, tmp_path, publisher, {"R": "postgresql", "L": "sqlite"})
    setup_topology(tx, spark)
    t = vendor_table(publisher)
    tx.publish(f'UPDATE {t} SET "Name" = \'before\' WHERE "VendorID" = 1')          # old columns
    change(tx.topology, "Purchasing", vendor_article(publisher), add="Email varchar(100)")
    tx.publish(f'UPDATE {t} SET "Email" = \'a@b.c\', "Name" = \'after\' WHERE "VendorID" = 2',
               vendor_rows(publisher, [30]), f'UPDATE {t} SET "Email" = \'x@y.z\' WHERE "VendorID" = 30')
    change(tx.topology, "Purchasing", vendor_article(publisher), drop="PurchasingWebServiceURL")
    tx.publish(f'UPDATE {t} SET "CreditRating" = 5 WHERE "VendorID" = 3')
    summary = replicate(tx, spark)
    assert summary.ok, summary.to_dict()
    cols = '"VendorID", "Name", "CreditRating", "Email"'
    assert tx.subscriber_rows("R", cols) == tx.publisher_rows(cols) == tx.subscriber_rows("L", cols)
    for name in ("R", "L"):
        with connect(tx.subscriber_urls[name]) as r:
            info = r.reflect(TableName("Purchasing", "Vendor") if tx.sub_table(name).startswith('"Purchasing"')
                             else TableName(None, "Vendor"))
            assert "Email" in info.column_names and "PurchasingWebServiceURL" not in info.column_names
    with connect(tx.subscriber_urls["R"]) as r:        # SCALL regenerated: 8 columns + pkc1 + bitmap
        if publisher == "postgresql":
            assert r.scalar("SELECT pronargs FROM pg_proc WHERE proname = 'sp_MSupd_PurchasingVendor'") == 10
    tx.publish(f'UPDATE {t} SET "Email" = \'later\' WHERE "VendorID" = 4')     # and it keeps working
    assert replicate(tx, spark).ok
    assert tx.subscriber_rows("R", cols) == tx.publisher_rows(cols)


def test_bad_schema_changes_change_nothing(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"R": "sqlite"}, article={"filter": "ActiveFlag = 1"})
    setup_topology(tx, spark)
    for kw, msg in [({"drop": "VendorID"}, "primary key"), ({"drop": "ActiveFlag"}, "row filter reads ActiveFlag"),
                    ({"drop": "Nope"}, "no published column Nope"), ({"add": "Name text"}, "already exists"),
                    ({"add": "Bad\"Name text"}, "not allowed")]:
        with pytest.raises(Exception, match=msg):
            change(tx.topology, "Purchasing", "Purchasing.Vendor", **kw)
    with pytest.raises(SchemaError, match="has no article"):
        change(tx.topology, "Purchasing", "Purchasing.Nope", add="x int")
    with connect(tx.publisher_url) as r:
        assert len(r.reflect(TableName("Purchasing", "Vendor")).columns) == 8


def _column(url: str, table: TableName, name: str):
    with connect(url) as r:
        info = r.reflect(table)
        assert info is not None
        return info.column(name)


@pytest.mark.parametrize("publisher", ["postgresql", "sqlite"])
def test_alter_and_rename_reach_each_subscriber_before_the_data_that_needs_them(spark, dbs, tmp_path, pg_admin_url,
                                                                                 publisher):
    """A type widened, a column made NOT NULL with a default, a column renamed, each between changes that need
    it: a subscriber gets every change before the commands after it (a PostgreSQL subscriber would refuse a
    value too long, a NULL, or an unknown column otherwise)."""
    tx = build(dbs, tmp_path, publisher, {"R": "postgresql", "L": "sqlite"})
    setup_topology(tx, spark)
    t, art = vendor_table(publisher), vendor_article(publisher)
    tx.publish(f'UPDATE {t} SET "Name" = \'short\' WHERE "VendorID" = 1')
    (line,) = api.schema_change(tx.topology, "Purchasing", art, alter_column='Name varchar(120)')
    assert "Name altered" in line and "text(120)" in line
    long_name = "N" * 100                                   # fits only the widened column
    tx.publish(f'UPDATE {t} SET "Name" = \'{long_name}\' WHERE "VendorID" = 2')
    tx.publish(f'UPDATE {t} SET "PurchasingWebServiceURL" = \'http://x\' WHERE "PurchasingWebServiceURL" IS NULL')
    api.schema_change(tx.topology, "Purchasing", art, alter_column="PurchasingWebServiceURL NOT NULL DEFAULT 'none'")
    api.schema_change(tx.topology, "Purchasing", art, rename_column="PurchasingWebServiceURL ServiceURL")
    true = "true" if publisher == "postgresql" else "1"
    tx.publish(f'UPDATE {t} SET "ServiceURL" = \'http://renamed\' WHERE "VendorID" = 3',
               f'INSERT INTO {t} ("VendorID", "AccountNumber", "Name", "CreditRating", "PreferredVendorStatus", '
               f'"ActiveFlag", "ModifiedDate") VALUES (40, \'AW40\', \'{long_name}\', 1, {true}, {true}, '
               "'2024-01-01 00:00:00')")
    summary = replicate(tx, spark)
    assert summary.ok, summary.to_dict()
    cols = '"VendorID", "Name", "ServiceURL"'
    assert tx.subscriber_rows("R", cols) == tx.publisher_rows(cols) == tx.subscriber_rows("L", cols)
    assert dict((r[0], r[1]) for r in tx.publisher_rows(cols))[2] == long_name
    for name in ("R", "L"):
        table = TableName("Purchasing", "Vendor") if tx.sub_table(name).startswith('"Purchasing"') \
            else TableName(None, "Vendor")
        url = tx.subscriber_urls[name]
        assert _column(url, table, "PurchasingWebServiceURL") is None
        url_col, name_col = _column(url, table, "ServiceURL"), _column(url, table, "Name")
        assert url_col is not None and not url_col.nullable and "none" in str(url_col.default), (name, url_col)
        assert name_col.type.length == 120, (name, name_col)
        with connect(url) as r:           # the new default at the subscriber too
            r.execute(f"INSERT INTO {tx.sub_table(name)} (\"VendorID\", \"AccountNumber\", \"Name\", \"CreditRating\", "
                      "\"PreferredVendorStatus\", \"ActiveFlag\", \"ModifiedDate\") VALUES (9001, 'A', 'n', 1, "
                      f"{'TRUE' if name == 'R' else 1}, {'TRUE' if name == 'R' else 1}, '2024-01-01 00:00:00')")
            assert r.scalar(f'SELECT "ServiceURL" FROM {tx.sub_table(name)} WHERE "VendorID" = 9001') == "none"
            r.execute(f'DELETE FROM {tx.sub_table(name)} WHERE "VendorID" = 9001')
    with connect(tx.subscriber_urls["R"]) as r:         # generated procedures take the new name
        if publisher == "postgresql":
            src = r.scalar("SELECT prosrc FROM pg_proc WHERE proname = 'sp_MSupd_PurchasingVendor'")
            assert "ServiceURL" in src and "PurchasingWebServiceURL" not in src
    tx.publish(f'UPDATE {t} SET "ServiceURL" = \'later\' WHERE "VendorID" = 4')     # and it keeps working
    assert replicate(tx, spark).ok
    assert tx.subscriber_rows("R", cols) == tx.publisher_rows(cols)


def test_a_narrowing_is_refused_while_a_publisher_value_does_not_fit(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"R": "sqlite"})
    setup_topology(tx, spark)
    tx.publish('UPDATE "Purchasing"."Vendor" SET "Name" = \'a name of thirty characters...\' WHERE "VendorID" = 1')
    with pytest.raises(SchemaError, match=r"column Name cannot become text\(20\) NOT NULL: 1 row\(s\) at the "
                                          r"publisher hold a value that does not fit"):
        change(tx.topology, "Purchasing", "Purchasing.Vendor", alter="Name varchar(20)")
    with pytest.raises(SchemaError, match="not of one family"):
        change(tx.topology, "Purchasing", "Purchasing.Vendor", alter="Name integer")
    assert _column(tx.publisher_url, TableName("Purchasing", "Vendor"), "Name").type.length == 50
    change(tx.topology, "Purchasing", "Purchasing.Vendor", alter="Name varchar(40)")       # every value fits
    assert replicate(tx, spark).ok
    assert _column(tx.subscriber_urls["R"], TableName(None, "Vendor"), "Name").type.length == 40
