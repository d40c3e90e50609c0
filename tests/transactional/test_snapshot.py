"""Initialization consistent with the log position: writes that continue while the snapshot is
taken are neither missed nor applied twice (an insert or delete applied twice would fail)."""

from __future__ import annotations

import threading
import time

import pytest

from sparksync.dialects import connect

from .harness import build, replicate, setup_topology, vendor_rows, vendor_table

pytestmark = pytest.mark.spark


def _writer(url: str, kind: str, stop: threading.Event, done: list) -> None:
    t = vendor_table(kind)
    i = 1000
    with connect(url) as r:
        while not stop.is_set():
            r.execute(vendor_rows(kind, [i]))
            r.execute(f'UPDATE {t} SET "CreditRating" = {i % 5} WHERE "VendorID" = {i - 1}')
            if i % 3 == 0:
                r.execute(f'DELETE FROM {t} WHERE "VendorID" = {i - 2}')
            done.append(i)
            i += 1
            time.sleep(0.002)


@pytest.mark.parametrize("publisher", ["postgresql", "sqlite"])
def test_writes_during_the_snapshot_arrive_once(spark, dbs, tmp_path, pg_admin_url, publisher):
    tx = build(dbs, tmp_path, publisher, {"R": "postgresql", "L": "sqlite"}, seed_ids=range(1, 200))
    held = None
    if publisher == "postgresql":
        # a transaction open when the snapshot is taken, committed while setup waits for it
        held = connect(tx.publisher_url)
        held.execute("BEGIN")
        held.execute(vendor_rows(publisher, [900]))
        threading.Timer(2.0, lambda: held.execute("COMMIT")).start()
    stop, done = threading.Event(), []
    writer = threading.Thread(target=_writer, args=(tx.publisher_url, publisher, stop, done))
    writer.start()
    try:
        setup_topology(tx, spark)
    finally:
        stop.set()
        writer.join()
        if held is not None:
            time.sleep(0.1)
            held.close()
    assert len(done) > 10
    summary = replicate(tx, spark)
    assert summary.ok, summary.to_dict()
    assert all(s.errors == [] for s in summary.subscriptions)
    cols = '"VendorID", "Name", "CreditRating"'
    assert tx.subscriber_rows("R", cols) == tx.publisher_rows(cols) == tx.subscriber_rows("L", cols)
    if publisher == "postgresql":
        assert 900 in [r[0] for r in tx.subscriber_rows("R", cols)]
