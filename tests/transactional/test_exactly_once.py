"""Crashes injected in the log reader and the distribution agent, between and inside commit
batches: the next run delivers every transaction exactly once (an insert or delete applied twice
would fail, an update counted twice would show)."""

from __future__ import annotations

import pytest

from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.distribution.logreader import run_logreader
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
