"""Row and column filters, on the log reader side, for both publishers: only matching rows and
published columns reach subscribers; an update that moves a row into the filter inserts it, out
of the filter deletes it; the snapshot holds the same rows."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.errors import SchemaError
from sparksync.names import TableName
from tests.support.transactional import build, replicate, setup_topology, vendor_rows, vendor_table

pytestmark = pytest.mark.spark
PUBLISHED = ["VendorID", "AccountNumber", "Name", "CreditRating", "ActiveFlag"]


@pytest.mark.parametrize("publisher", ["postgresql", "sqlite"])
def test_row_and_column_filters(spark, dbs, tmp_path, pg_admin_url, publisher):
    tx = build(dbs, tmp_path, publisher, {"R": "postgresql", "L": "sqlite"},
               article={"filter": "ActiveFlag = 1 AND CreditRating < 5", "columns": PUBLISHED})
    setup_topology(tx, spark)
    true, false = ("true", "false") if publisher == "postgresql" else ("1", "0")
    where = f' WHERE "ActiveFlag" = {true} AND "CreditRating" < 5'
    cols = '"VendorID", "Name", "CreditRating"'
    assert tx.subscriber_rows("R", cols) == tx.publisher_rows(cols, where) == tx.subscriber_rows("L", cols)
    with connect(tx.subscriber_urls["L"]) as r:        # unpublished columns do not exist at the subscriber
        assert [c.name for c in r.reflect(TableName(None, "Vendor")).columns] == PUBLISHED
    t = vendor_table(publisher)
    tx.publish(f'UPDATE {t} SET "ActiveFlag" = {true} WHERE "VendorID" = 3',      # moves into the filter
               f'UPDATE {t} SET "ActiveFlag" = {false} WHERE "VendorID" = 4',     # moves out of it
               f'UPDATE {t} SET "Name" = \'renamed\' WHERE "VendorID" IN (2, 5)',  # 2 inside, 5 outside
               f'UPDATE {t} SET "PurchasingWebServiceURL" = \'u\' WHERE "VendorID" = 6',   # unpublished column
               vendor_rows(publisher, [20, 21]),                                  # 20 in, 21 out
               f'DELETE FROM {t} WHERE "VendorID" IN (8, 9)')                      # 8 in, 9 out
    assert replicate(tx, spark).ok
    expected = tx.publisher_rows(cols, where)
    assert tx.subscriber_rows("R", cols) == expected == tx.subscriber_rows("L", cols)
    ids = [r[0] for r in expected]
    assert 3 in ids and 4 not in ids and 20 in ids and 21 not in ids


def test_bad_filters_and_columns_change_nothing(spark, dbs, tmp_path, pg_admin_url):
    for article, message in [({"filter": "Actve = 1"}, "no published column Actve"),
                             ({"columns": ["Name"]}, "columns must include the primary key (VendorID is missing)"),
                             ({"columns": ["VendorID", "Nope"]}, "column Nope does not exist"),
                             ({"filter": "Name = 1 +"}, "is not a valid SQL condition"),
                             ({"filter": "ActiveFlag = 1", "columns": ["VendorID", "Name"]}, "no published column")]:
        tx = build(dbs, tmp_path, "postgresql", {"R": "sqlite"}, article=article)
        with pytest.raises(SchemaError) as ei:
            setup_topology(tx, spark)
        assert message in ei.value.message and "publication Purchasing, article Purchasing.Vendor" in ei.value.message
        with connect(tx.publisher_url) as r:
            assert r.scalar("SELECT count(*) FROM pg_publication") == 0
            assert r.scalar("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") == 0


def test_a_filter_that_does_not_run_is_refused(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"R": "sqlite"}, article={"filter": "Name > 5"})
    with pytest.raises(SchemaError, match="does not run"):
        setup_topology(tx, spark)
