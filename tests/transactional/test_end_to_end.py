"""Transactional replication end to end, for each publisher dialect, into PostgreSQL and SQLite
subscribers: setup (snapshot), changes by SQL at the publisher, log reader, distribution agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparksync.dialects import connect
from sparksync.validation.compare import compare_transactional
from tests.support.transactional import build, replicate, setup_topology, vendor_rows, vendor_table

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("publisher,distributor", [("postgresql", "sqlite"), ("sqlite", "sqlite"),
                                                   ("postgresql", "postgresql"), ("sqlite", "postgresql")])
def test_changes_arrive_at_every_subscriber(spark, dbs, tmp_path, publisher, distributor, pg_admin_url):
    tx = build(dbs, tmp_path, publisher, {"Reporting": "postgresql", "Local": "sqlite"}, distributor=distributor)
    setup_topology(tx, spark)
    assert tx.subscriber_rows("Reporting") == tx.publisher_rows() == tx.subscriber_rows("Local")
    t = vendor_table(publisher)
    tx.publish(f'UPDATE {t} SET "Name" = \'renamed\' WHERE "VendorID" = 2',
               f'UPDATE {t} SET "CreditRating" = 5 WHERE "VendorID" <= 3',
               f'DELETE FROM {t} WHERE "VendorID" = 7',
               vendor_rows(publisher, [50, 51]))
    summary = replicate(tx, spark)
    assert summary.ok, summary.to_dict()
    assert tx.subscriber_rows("Reporting") == tx.publisher_rows() == tx.subscriber_rows("Local")
    again = replicate(tx, spark)
    assert again.ok and all(s.transactions == 0 for s in again.subscriptions)
    assert compare_transactional(tx.topology, "Purchasing") == ([], len(tx.publisher_rows()))
    with connect(tx.subscriber_urls["Local"]) as r:               # validation sees a hand edit
        r.execute('UPDATE "Vendor" SET "Name" = \'edited\' WHERE "VendorID" = 1')
    diffs, _ = compare_transactional(tx.topology, "Purchasing")
    assert [(d.subscription, d.missing, d.extra, d.changed) for d in diffs] == [("Local", 0, 0, 1)]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_lost_subscriber_database_is_named_and_reinit_recovers_it(spark, dbs, tmp_path, kind, pg_admin_url):
    """Its database is dropped and created empty: the distribution agent names reinit (not 'run
    setup', which finds the subscription initialized), and reinit snapshots it again."""
    from sparksync.reinit import reinitialize

    tx = build(dbs, tmp_path, "postgresql", {"Reporting": "postgresql", "Local": kind})
    setup_topology(tx, spark)
    url = tx.subscriber_urls["Local"]
    if kind == "sqlite":                          # lost: created again, empty
        Path(url.removeprefix("sqlite:///")).unlink()
    else:
        name = url.rsplit("/", 1)[1]
        with connect(pg_admin_url) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
    t = vendor_table("postgresql")
    tx.publish(f'UPDATE {t} SET "Name" = \'renamed\' WHERE "VendorID" = 2')
    summary = replicate(tx, spark)
    errors = [str(s["error"]) for s in summary.to_dict()["subscriptions"] if s["error"]]
    assert not summary.ok and any("sparksync reinit --subscription Local" in e for e in errors), errors
    reinitialize(tx.topology, lambda: spark, "Local")
    assert replicate(tx, spark).ok
    assert tx.subscriber_rows("Local") == tx.publisher_rows() == tx.subscriber_rows("Reporting")
