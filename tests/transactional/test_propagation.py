"""Every propagation method and call syntax through the whole path (log reader, distribution
database, distribution agent on Spark) into a real PostgreSQL subscriber; SQL into SQLite."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from tests.support.transactional import build, replicate, setup_topology, vendor_rows

pytestmark = pytest.mark.spark

COLS = '"VendorID", "Name", "CreditRating", "ActiveFlag"'
CHANGES = [
    vendor_rows("postgresql", [20]),
    'UPDATE "Purchasing"."Vendor" SET "Name" = \'renamed\' WHERE "VendorID" = 2',
    'UPDATE "Purchasing"."Vendor" SET "VendorID" = 30 WHERE "VendorID" = 3',        # a key update
    'DELETE FROM "Purchasing"."Vendor" WHERE "VendorID" = 4',
]


@pytest.mark.parametrize("ins,upd,dele", [
    (None, None, None),                                                     # CALL / SCALL / CALL (generated)
    ("CALL sp_MSins_PurchasingVendor", "MCALL sp_MSupd_PurchasingVendor", "XCALL sp_MSdel_PurchasingVendor"),
    (None, "XCALL sp_MSupd_PurchasingVendor", None),
    (None, "CALL sp_MSupd_PurchasingVendor", None),
    ("SQL", "SQL", "SQL"),
])
def test_every_call_syntax_reaches_postgresql(spark, dbs, tmp_path, pg_admin_url, ins, upd, dele):
    article = {k: v for k, v in (("ins_cmd", ins), ("upd_cmd", upd), ("del_cmd", dele)) if v}
    tx = build(dbs, tmp_path, "postgresql", {"Reporting": "postgresql"}, article=article)
    setup_topology(tx, spark)
    tx.publish(*CHANGES)
    assert replicate(tx, spark).ok
    assert tx.subscriber_rows("Reporting", COLS) == tx.publisher_rows(COLS)


def test_none_leaves_operations_out(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"Reporting": "postgresql"},
               article={"upd_cmd": "NONE", "del_cmd": "NONE"})
    setup_topology(tx, spark)
    before = tx.subscriber_rows("Reporting", COLS)
    tx.publish(CHANGES[0], CHANGES[1], CHANGES[3])
    assert replicate(tx, spark).ok
    after = tx.subscriber_rows("Reporting", COLS)
    assert [r for r in after if r[0] == 20]                       # the insert arrived
    assert dict((r[0], r) for r in after)[2] == dict((r[0], r) for r in before)[2]   # not the update
    assert [r for r in after if r[0] == 4]                        # nor the delete


CUSTOM = '''
CREATE TABLE IF NOT EXISTS audit (op text, args text);
-- statement
CREATE OR REPLACE PROCEDURE "Purchasing".my_upd(c1 integer, c2 varchar(15), c3 varchar(50), c4 smallint,
  c5 boolean, c6 boolean, c7 varchar(1024), c8 timestamp, pkc1 integer, bitmap bytea)
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit VALUES ('upd', concat_ws('|', c1, c3, c4, pkc1, encode(bitmap, 'hex')));
  UPDATE "Purchasing"."Vendor" SET "Name" = CASE get_byte(bitmap, 0) & 4 WHEN 4 THEN c3 ELSE "Name" END
   WHERE "VendorID" = pkc1;
END $$;
-- statement
CREATE OR REPLACE PROCEDURE "Purchasing".my_del(pkc1 integer)
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO audit VALUES ('del', pkc1::text);
  DELETE FROM "Purchasing"."Vendor" WHERE "VendorID" = pkc1;
END $$;
'''


def test_custom_procedures_get_the_same_layout(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"Reporting": "postgresql"},
               article={"upd_cmd": "SCALL my_upd", "del_cmd": "CALL my_del"})
    with connect(tx.subscriber_urls["Reporting"]) as r:
        r.execute('CREATE SCHEMA "Purchasing"')
        for stmt in CUSTOM.split("-- statement"):
            r.execute(stmt)
    setup_topology(tx, spark)
    tx.publish(CHANGES[1], CHANGES[3])
    assert replicate(tx, spark).ok
    with connect(tx.subscriber_urls["Reporting"]) as r:
        # SCALL: only the changed column's value (c3), the original key and the bitmap (column 3: 0x04)
        assert r.query("SELECT op, args FROM audit ORDER BY op") == [("del", "4"), ("upd", "renamed|2|0400")]
    assert tx.subscriber_rows("Reporting", COLS) == tx.publisher_rows(COLS)


def test_a_missing_custom_procedure_fails_setup_for_that_subscription(spark, dbs, tmp_path, pg_admin_url):
    from sparksync.provision import SetupFailed

    tx = build(dbs, tmp_path, "postgresql", {"Reporting": "postgresql", "Other": "postgresql"},
               article={"upd_cmd": "SCALL nowhere"})
    with pytest.raises(SetupFailed, match=r"Reporting: .*custom procedure nowhere \(SCALL for upd\) does "
                                          "not exist in the subscriber's search_path or schema Purchasing"):
        setup_topology(tx, spark)
    with connect(tx.subscriber_urls["Reporting"]) as r:      # left untouched
        assert r.scalar("SELECT to_regclass('\"Purchasing\".\"Vendor\"') IS NULL")


@pytest.mark.parametrize("publisher", ["postgresql", "sqlite"])
def test_sql_statements_into_sqlite(spark, dbs, tmp_path, publisher, pg_admin_url):
    tx = build(dbs, tmp_path, publisher, {"Local": "sqlite"})
    setup_topology(tx, spark)
    t = '"Purchasing"."Vendor"' if publisher == "postgresql" else '"Vendor"'
    tx.publish(vendor_rows(publisher, [20]), f'UPDATE {t} SET "VendorID" = 30 WHERE "VendorID" = 3',
               f'UPDATE {t} SET "Name" = \'n\', "CreditRating" = 5 WHERE "VendorID" > 5',
               f'DELETE FROM {t} WHERE "VendorID" = 4')
    assert replicate(tx, spark).ok
    assert tx.subscriber_rows("Local") == tx.publisher_rows()
