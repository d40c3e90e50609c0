"""Crashes injected in the log reader and the distribution agent, between and inside commit
batches: the next run delivers every transaction exactly once (an insert or delete applied twice
would fail, an update counted twice would show)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparksync.dialects import connect
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.distribution import database as dst
from sparksync.transactional.distribution.logreader import run_logreader
from tests.support.config import write_config
from tests.support.transactional import build, setup_topology, stored_commands, vendor_rows, vendor_table

pytestmark = pytest.mark.spark


def _workload(tx, kind: str) -> None:
    t = vendor_table(kind)
    tx.publish(vendor_rows(kind, range(100, 106)),
               *[f'UPDATE {t} SET "CreditRating" = "CreditRating" + 1 WHERE "VendorID" <= 5' for _ in range(4)],
               f'DELETE FROM {t} WHERE "VendorID" IN (7, 8)', vendor_rows(kind, [7]))


# 6 inserts, 4 updates of the 5 vendors 1..5, 2 deletes, 1 insert
WORKLOAD_COMMANDS = 6 + 4 * 5 + 2 + 1


def _stored(tx) -> int:
    return len(stored_commands(tx.topology.distributor_url))


@pytest.mark.parametrize("publisher,distributor", [("postgresql", "sqlite"), ("sqlite", "sqlite"),
                                                   ("postgresql", "postgresql")])
@pytest.mark.parametrize("point", ["logreader.before_commit", "logreader.before_confirm"])
def test_log_reader_crash_stores_each_transaction_once(spark, dbs, tmp_path, pg_admin_url, failpoints, publisher,
                                                       distributor, point):
    tx = build(dbs, tmp_path, publisher, {"S": "sqlite"}, distributor=distributor)
    setup_topology(tx, spark)
    _workload(tx, publisher)
    failpoints(f"{point} Purchasing")
    with pytest.raises(Exception, match="failpoint"):
        run_logreader(tx.topology)
    stored = _stored(tx)
    if point == "logreader.before_commit":
        assert stored == 0                          # the crash rolled the distributor's transaction back
    else:
        assert stored == WORKLOAD_COMMANDS          # stored, not yet released at the publisher
    runs = run_logreader(tx.topology)
    total = _stored(tx)
    assert total == WORKLOAD_COMMANDS               # read again after the crash, stored once
    assert runs[0].commands == WORKLOAD_COMMANDS - stored
    assert run_logreader(tx.topology)[0].transactions == 0          # nothing is read twice
    assert DistributionAgent(tx.topology, spark).run().ok
    assert tx.subscriber_rows("S") == tx.publisher_rows()


@pytest.mark.parametrize("point", ["logreader.before_commit", "logreader.before_confirm"])
def test_a_log_reader_killed_while_it_streams_the_slot(spark, dbs, tmp_path, pg_admin_url, point):
    """kill -9 of ``sparksync logreader`` while its walsender streams the slot (a read batch of 5 changes:
    more is on its way): the next run, started at once, gets the slot back from the dying stream, stores
    every transaction once, and the slot ends confirmed past the last one."""
    tx = build(dbs, tmp_path, "postgresql", {"S": "sqlite"})
    setup_topology(tx, spark)
    _workload(tx, "postgresql")
    fp = tmp_path / "failpoints"
    fp.write_text(f"{point} Purchasing !kill\n", encoding="utf-8")
    exe = Path(sys.executable).with_name("sparksync")
    killed = subprocess.run([str(exe), "logreader", "-c", str(write_config(tmp_path, tx.data)), "--read-batch", "5"],
                            capture_output=True, text=True, env={**os.environ, "SPARKSYNC_FAILPOINTS": str(fp)},
                            timeout=120)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    stored = _stored(tx)
    assert stored == (0 if point == "logreader.before_commit" else 6)      # the first batch: 6 inserts
    run = run_logreader(tx.topology)[0]
    assert _stored(tx) == WORKLOAD_COMMANDS and run.commands == WORKLOAD_COMMANDS - stored
    with connect(tx.topology.distributor_url) as d, connect(tx.publisher_url) as r:
        p = dst.require_publication(d, "Purchasing")
        assert r.query_one("SELECT active, pg_wal_lsn_diff(confirmed_flush_lsn, %s::pg_lsn) >= 0 FROM "
                           "pg_replication_slots WHERE slot_name = %s",
                           (_lsn(p.logreader_seqno), p.slot)) == (False, True)     # released, confirmed
    assert run_logreader(tx.topology)[0].transactions == 0
    assert DistributionAgent(tx.topology, spark).run().ok
    assert tx.subscriber_rows("S") == tx.publisher_rows()


def _lsn(n: int) -> str:
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


@pytest.mark.parametrize("point", ["distribute.before_commit S:1", "distribute.after_commit S:1",
                                   "distribute.before_commit S:0"])
@pytest.mark.parametrize("in_driver", [0, None], ids=["spark", "driver"])
def test_distribution_crash_between_and_inside_batches(spark, dbs, tmp_path, pg_admin_url, failpoints, point,
                                                      in_driver):
    # three transactions per commit batch: the workload's 8 transactions make 3 batches
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql", "Other": "sqlite"},
               subscription={"S": {"commit_batch_size": 3}})
    setup_topology(tx, spark)
    _workload(tx, "postgresql")
    run_logreader(tx.topology)
    failpoints(point)
    first = DistributionAgent(tx.topology, spark).run(DistributeOptions(driver_round_changes=in_driver))
    by = {s.subscription: s for s in first.subscriptions}
    assert not by["S"].ok and by["Other"].ok                        # the others go on
    assert tx.subscriber_rows("Other") == tx.publisher_rows()
    applied = {"distribute.before_commit S:1": 1, "distribute.after_commit S:1": 2, "distribute.before_commit S:0": 0}
    assert by["S"].batches == applied[point]
    second = DistributionAgent(tx.topology, spark).run()
    assert second.ok, second.to_dict()
    assert tx.subscriber_rows("S") == tx.publisher_rows()
    assert {s.subscription: s.errors for s in second.subscriptions} == {"S": [], "Other": []}
