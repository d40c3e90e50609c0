"""A distribution round of at most ``[spark] driver_round_changes`` commands is delivered in the agent's
own process, by the very function a Spark task runs: the same commands reach the same subscribers with
the same result. Two subscriptions of each kind get one workload (inserts, updates, deletes, a
duplicate key a subscriber already holds, skipped as error 2627); one of each pair is delivered on
Spark, the other in the driver; rows, counts and the logged errors are equal."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.distribution.logreader import run_logreader
from tests.support.transactional import build, setup_topology, vendor_rows, vendor_table

pytestmark = pytest.mark.spark

PAIRS = {"postgresql": ("PgSpark", "PgDriver"), "sqlite": ("LiteSpark", "LiteDriver")}


@pytest.mark.parametrize("publisher", ["postgresql", "sqlite"])
def test_a_round_in_the_driver_is_the_round_on_spark(spark, dbs, tmp_path, pg_admin_url, publisher):
    subs = {name: kind for kind, names in PAIRS.items() for name in names}
    tx = build(dbs, tmp_path, publisher, subs, subscription={n: {"skip_errors": ["2627"]} for n in subs})
    setup_topology(tx, spark)
    for name, kind in subs.items():       # a row the publisher will insert too: 2627 there, skipped
        with connect(tx.subscriber_urls[name]) as r:
            r.execute(vendor_rows(kind, [70]).replace(vendor_table(kind), tx.sub_table(name)))
    t = vendor_table(publisher)
    tx.publish(vendor_rows(publisher, range(60, 75)),
               *[f'UPDATE {t} SET "CreditRating" = "CreditRating" + 1 WHERE "VendorID" <= {i}' for i in range(3, 9)],
               f'DELETE FROM {t} WHERE "VendorID" IN (2, 61)', f'UPDATE {t} SET "Name" = \'x\' WHERE "VendorID" = 62')
    run_logreader(tx.topology)
    agent = DistributionAgent(tx.topology, spark)
    said: list[str] = []
    on_spark = agent.run(DistributeOptions([a for a, _ in PAIRS.values()], driver_round_changes=0))
    in_driver = DistributionAgent(tx.topology, lambda: said.append("spark started") or spark).run(
        DistributeOptions([b for _, b in PAIRS.values()]))
    assert not said, "a small round started Spark"
    runs = {s.subscription: s for s in on_spark.subscriptions + in_driver.subscriptions}
    assert on_spark.ok and in_driver.ok, (on_spark.to_dict(), in_driver.to_dict())
    for a, b in PAIRS.values():
        assert tx.subscriber_rows(a) == tx.subscriber_rows(b) == tx.publisher_rows()
        ra, rb = runs[a], runs[b]
        assert (ra.transactions, ra.commands, ra.batches, ra.skipped) == (rb.transactions, rb.commands, rb.batches,
                                                                           rb.skipped)
        assert ra.skipped == 1 and ra.commands >= 20
        assert [(e["xact_seqno"], e["command_id"], e["error_code"]) for e in ra.errors] == \
            [(e["xact_seqno"], e["command_id"], e["error_code"]) for e in rb.errors]
