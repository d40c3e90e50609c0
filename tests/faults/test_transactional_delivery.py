"""Distribution agent bookkeeping under failure (issue 9, case 15): a failed durability flush is an
error (not a success that claims a position), and a delivery whose set-up fails is that
subscription's error, leaves no connection open and is delivered by the next run."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.distribution.logreader import run_logreader
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


@pytest.mark.parametrize("damage", ["chunk", "message"])
@pytest.mark.parametrize("in_driver", [0, None], ids=["spark", "driver"])
def test_a_damaged_stored_change_stops_its_subscription_by_name(spark, dbs, tmp_path, pg_admin_url, damage, in_driver):
    """A PostgreSQL publisher's stored row changes damaged at the distributor (a chunk cut short, a message
    with a byte changed): the subscription stops at that command, naming it; what came before it is
    delivered, nothing after it, nothing is guessed."""
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql", "L": "sqlite"}, seed_ids=range(1, 31))
    setup_topology(tx, spark)
    t = '"Purchasing"."Vendor"'
    tx.publish(f'UPDATE {t} SET "Name" = \'first\' WHERE "VendorID" = 1',
               f'UPDATE {t} SET "Name" = \'second\' WHERE "VendorID" <= 25',
               f'UPDATE {t} SET "Name" = \'third\' WHERE "VendorID" = 30')
    run_logreader(tx.topology)
    with connect(tx.topology.distributor_url) as d:
        cmds = d.meta("MSrepl_commands")
        seqnos = [r[0] for r in d.query(f"SELECT xact_seqno FROM {cmds} WHERE type = 'rows' ORDER BY xact_seqno")]
        second = seqnos[1]
        if damage == "chunk":     # cut in the middle of its 10th message
            (data,) = d.query(f"SELECT data FROM {cmds} WHERE xact_seqno = {d.p}", [second])[0]
            d.execute(f"UPDATE {cmds} SET data = {d.p} WHERE xact_seqno = {d.p}", [bytes(data)[:9 * 150], second])
        else:                     # the first message's first value kind: not one pgoutput knows
            (data,) = d.query(f"SELECT data FROM {cmds} WHERE xact_seqno = {d.p}", [second])[0]
            data = bytearray(data)
            data[4 + 8] = ord("x")        # length, tag, relation id, 'O', column count -> the first kind
            d.execute(f"UPDATE {cmds} SET data = {d.p} WHERE xact_seqno = {d.p}", [bytes(data), second])
    before = {name: tx.subscriber_rows(name) for name in ("S", "L")}
    summary = DistributionAgent(tx.topology, spark).run(DistributeOptions(driver_round_changes=in_driver))
    runs = {s.subscription: s for s in summary.subscriptions}
    for name in ("S", "L"):
        r = runs[name]
        assert r.status == "error" and "pgoutput" in r.message and str(second) in r.message, r.message
        rows = tx.subscriber_rows(name)
        assert {row[1] for row in rows[1:]} == {f"Vendor {i}" for i in range(2, 31)}    # nothing after it
        if damage == "chunk":     # found while reading: the transactions before it are applied
            assert r.last_seqno == seqnos[0] and rows[0] == (1, "first", 2)
        else:                     # found while applying: its batch is rolled back, as for any failed command
            assert "command 1 (upd of article 1)" in r.message
            assert rows == before[name] and r.transactions == 0
