"""Schema change commands: a column added or dropped at the publisher reaches every subscriber in
order with the data, and the generated procedures are regenerated for the new layout."""

from __future__ import annotations

import pytest

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
