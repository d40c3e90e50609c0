"""Initialization consistent with the log position: writes that continue while the snapshot is
taken are neither missed nor applied twice (an insert or delete applied twice would fail)."""

from __future__ import annotations

import threading
import time

import pytest

from sparksync.dialects import connect
from tests.support.transactional import build, replicate, setup_topology, vendor_rows, vendor_table

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


def _commit_when_waited_for(url: str, held, setup_done: threading.Event, seen: list) -> None:
    """Commit ``held`` once another backend (setup) is seen waiting for it (``pg_blocking_pids``), or
    when setup is over without having waited (``seen`` stays empty: the test fails)."""
    pid = held.scalar("SELECT pg_backend_pid()")
    try:
        with connect(url) as r:
            while not setup_done.is_set():
                if r.scalar("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid]):
                    seen.append(pid)
                    break
                setup_done.wait(0.05)
    finally:
        held.execute("COMMIT")


@pytest.mark.parametrize("publisher", ["postgresql", "sqlite"])
def test_writes_during_the_snapshot_arrive_once(spark, dbs, tmp_path, pg_admin_url, publisher):
    tx = build(dbs, tmp_path, publisher, {"R": "postgresql", "L": "sqlite"}, seed_ids=range(1, 200))
    held = committer = None
    setup_done, waited_for = threading.Event(), []
    if publisher == "postgresql":
        # a transaction open when setup starts capturing, committed while setup waits for it (seen waiting)
        held = connect(tx.publisher_url)
        held.execute("BEGIN")
        held.execute(vendor_rows(publisher, [900]))
        committer = threading.Thread(target=_commit_when_waited_for,
                                     args=(tx.publisher_url, held, setup_done, waited_for))
        committer.start()
    stop, done = threading.Event(), []
    writer = threading.Thread(target=_writer, args=(tx.publisher_url, publisher, stop, done))
    writer.start()
    try:
        setup_topology(tx, spark)
    finally:
        stop.set()
        setup_done.set()
        writer.join()
        if committer is not None:
            committer.join()
        if held is not None:
            held.close()
    assert len(done) > 10
    if publisher == "postgresql":
        assert waited_for, "setup never waited for the open transaction"
    summary = replicate(tx, spark)
    assert summary.ok, summary.to_dict()
    assert all(s.errors == [] for s in summary.subscriptions)
    cols = '"VendorID", "Name", "CreditRating"'
    assert tx.subscriber_rows("R", cols) == tx.publisher_rows(cols) == tx.subscriber_rows("L", cols)
    if publisher == "postgresql":
        assert 900 in [r[0] for r in tx.subscriber_rows("R", cols)]
