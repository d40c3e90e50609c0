"""Distribution agent bookkeeping under failure (issue 9, case 15): a failed durability flush is an
error (not a success that claims a position), and a delivery whose set-up fails is that
subscription's error, leaves no connection open and is delivered by the next run."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.transactional.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.logreader import run_logreader
from tests.support.transactional import build, replicate, setup_topology

pytestmark = pytest.mark.spark


def _connections(admin_url: str, db_url: str) -> int:
    with connect(admin_url) as r:
        return r.scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (db_url.rsplit("/", 1)[1],))


def test_a_failed_durability_flush_is_an_error_and_the_next_run_delivers(spark, dbs, tmp_path, pg_admin_url,
                                                                          failpoints):
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql"}, seed_ids=range(1, 4))
    setup_topology(tx, spark)
    tx.publish('UPDATE "Purchasing"."Vendor" SET "Name" = \'n1\' WHERE "VendorID" = 1')
    run_logreader(tx.topology)
    failpoints("distribute.make_durable S")
    summary = DistributionAgent(tx.topology, spark).run(DistributeOptions())
    (s,) = summary.subscriptions
    assert s.status == "error" and "could not be made durable" in s.message
    again = DistributionAgent(tx.topology, spark).run(DistributeOptions())
    assert again.ok
    assert tx.subscriber_rows("S") == tx.publisher_rows()


def test_a_delivery_whose_setup_fails_is_reported_and_delivered_by_the_next_run(spark, dbs, tmp_path, pg_admin_url,
                                                                                 failpoints):
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql"}, seed_ids=range(1, 4))
    setup_topology(tx, spark)
    tx.publish('UPDATE "Purchasing"."Vendor" SET "Name" = \'n2\' WHERE "VendorID" = 2')
    run_logreader(tx.topology)
    before = _connections(pg_admin_url, tx.subscriber_urls["S"])
    failpoints("distribute.setup S")
    summary = DistributionAgent(tx.topology, spark).run(DistributeOptions())
    assert not summary.ok
    assert _connections(pg_admin_url, tx.subscriber_urls["S"]) == before
    assert DistributionAgent(tx.topology, spark).run(DistributeOptions()).ok
    assert tx.subscriber_rows("S") == tx.publisher_rows()


LOWER_VENDOR = ['CREATE SCHEMA IF NOT EXISTS purchasing',
                'CREATE TABLE purchasing.vendor (vendorid integer PRIMARY KEY, name text NOT NULL)',
                "INSERT INTO purchasing.vendor VALUES (1, 'one'), (2, 'two'), (3, 'three')"]


def test_procedure_names_follow_postgresql_identifier_rules(spark, dbs, tmp_path, pg_admin_url):
    """Issue 9, case 16: the seed's name written for table purchasing.vendor is the generated procedure;
    an unqualified custom procedure created in public is found through the subscriber's search_path."""
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql"}, seed_ids=None, extra_tables=LOWER_VENDOR,
               articles=[{"table": "purchasing.vendor", "upd_cmd": "XCALL sp_MSupd_PurchasingVendor",
                          "del_cmd": "CALL My_Delete"}])
    sub_url = tx.subscriber_urls["S"]
    with connect(sub_url) as r:
        r.execute("CREATE TABLE public.deleted_log (vendorid integer)")
        r.execute("CREATE PROCEDURE public.my_delete(pkc1 integer) LANGUAGE plpgsql AS $$ BEGIN "
                  "DELETE FROM purchasing.vendor WHERE vendorid = pkc1; INSERT INTO public.deleted_log VALUES (pkc1); "
                  "END $$")
    setup_topology(tx, spark)
    with connect(sub_url) as r:
        assert r.scalar("SELECT count(*) FROM pg_proc WHERE proname = 'sp_MSupd_purchasingvendor'") == 1
    tx.publish("UPDATE purchasing.vendor SET name = 'TWO' WHERE vendorid = 2",
               "DELETE FROM purchasing.vendor WHERE vendorid = 3")
    assert replicate(tx, spark).ok
    assert tx.rows(sub_url, "purchasing.vendor", "vendorid, name") == [(1, "one"), (2, "TWO")]
    assert tx.rows(sub_url, "public.deleted_log", "vendorid") == [(3,)]
