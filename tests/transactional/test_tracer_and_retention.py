"""Tracer tokens (publisher -> distributor -> each subscriber, kept in history) and retention
cleanup of the distribution database (delivered commands go; expired ones too, and a subscription
that still needed them becomes inactive)."""

from __future__ import annotations

import datetime as dt

import pytest

from sparksync.dialects import connect
from sparksync.metadata import store
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.distribution import database as dst
from sparksync.transactional.distribution.logreader import run_logreader
from sparksync.transactional.status import tracer
from tests.support.transactional import build, replicate, setup_topology, vendor_rows, vendor_table

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("publisher,distributor", [("postgresql", "sqlite"), ("sqlite", "postgresql")])
def test_tracer_token_latencies(spark, dbs, tmp_path, pg_admin_url, publisher, distributor):
    tx = build(dbs, tmp_path, publisher, {"A": "postgresql", "B": "sqlite"}, distributor=distributor)
    setup_topology(tx, spark)
    tid = tracer.post(tx.topology, "Purchasing")
    pending = tracer.report(tx.topology, "Purchasing", tid)
    assert pending.distributor_commit is None and pending.subscribers == {"A": None, "B": None}
    run_logreader(tx.topology)
    at_distributor = tracer.report(tx.topology, "Purchasing", tid)
    assert at_distributor.publisher_to_distributor is not None and at_distributor.publisher_to_distributor >= 0
    assert not at_distributor.complete
    DistributionAgent(tx.topology, spark).run()
    done = tracer.report(tx.topology, "Purchasing", tid)
    assert done.complete
    for s in ("A", "B"):
        assert done.distributor_to(s) >= 0
        assert done.subscribers[s] >= done.distributor_commit >= done.publisher_commit
    assert [r.tracer_id for r in tracer.recent(tx.topology, "Purchasing")] == [tid]
    assert tx.subscriber_rows("A") == tx.publisher_rows()       # a token changes no data


def _age(tx, hours: float) -> None:
    """Make every stored transaction look ``hours`` old."""
    with connect(tx.topology.distributor_url) as d, d.transaction():
        old = store.utcnow() - dt.timedelta(hours=hours)
        d.execute(f"UPDATE {d.meta('MSrepl_transactions')} SET entry_time = {d.p}", [store.to_param(
            d, store.Kind.TIMESTAMPTZ, old)])


def _count(tx) -> int:
    with connect(tx.topology.distributor_url) as d:
        return d.scalar(f"SELECT count(*) FROM {d.meta('MSrepl_commands')}")


@pytest.mark.parametrize("distributor", ["sqlite", "postgresql"])
def test_retention_cleanup_and_deactivation(spark, dbs, tmp_path, pg_admin_url, distributor):
    tx = build(dbs, tmp_path, "postgresql", {"Fast": "sqlite", "Slow": "sqlite"}, distributor=distributor)
    setup_topology(tx, spark)
    t = vendor_table("postgresql")
    tx.publish(f'UPDATE {t} SET "Name" = \'a\' WHERE "VendorID" = 1')
    run_logreader(tx.topology)
    DistributionAgent(tx.topology, spark).run()                  # both have it: cleaned up
    assert _count(tx) == 0
    tx.publish(f'UPDATE {t} SET "Name" = \'b\' WHERE "VendorID" = 1', vendor_rows("postgresql", [90]))
    run_logreader(tx.topology)
    fast = DistributionAgent(tx.topology, spark).run(
        DistributeOptions(["Fast"]))
    assert fast.ok and _count(tx) == 2                           # Slow has not received them: kept
    _age(tx, 100)                                                 # older than max_distretention (72 h)
    summary = DistributionAgent(tx.topology, spark).run(
        DistributeOptions(["Fast"]))
    assert summary.cleanup["Purchasing"]["deactivated"] == ["Slow"] and _count(tx) == 0
    with connect(tx.topology.distributor_url) as d:
        p = dst.require_publication(d, "Purchasing")
        status = {s.subscription: (s.status, s.message) for s in dst.subscriptions(d, p.publication_id)}
    assert status["Fast"][0] == 1 and status["Slow"][0] == 2 and "reinitialize" in status["Slow"][1]
    slow = DistributionAgent(tx.topology, spark).run(
        DistributeOptions(["Slow"]))
    assert not slow.ok and "inactive" in slow.subscriptions[0].message
    setup_topology(tx, spark)                                     # reinitializes the inactive subscription
    assert tx.subscriber_rows("Slow") == tx.publisher_rows()
    assert replicate(tx, spark).ok


def test_a_subscription_removed_from_the_configuration_no_longer_holds_commands(spark, dbs, tmp_path, pg_admin_url):
    from sparksync.topology import parse_topology

    tx = build(dbs, tmp_path, "postgresql", {"Keep": "sqlite", "Gone": "sqlite"})
    setup_topology(tx, spark)
    tx.publish(f'UPDATE {vendor_table("postgresql")} SET "Name" = \'a\' WHERE "VendorID" = 1')
    run_logreader(tx.topology)
    data = tx.topology.model_dump(exclude_unset=True)
    data["subscriptions"] = [s for s in data["subscriptions"] if s["name"] == "Keep"]
    data.pop("base_dir", None)
    tx.topology = parse_topology(data, tmp_path)
    setup_topology(tx, spark)
    with connect(tx.topology.distributor_url) as d:
        p = dst.require_publication(d, "Purchasing")
        assert [s.subscription for s in dst.subscriptions(d, p.publication_id)] == ["Keep"]
    assert DistributionAgent(tx.topology, spark).run().ok
    assert _count(tx) == 0                         # delivered to every remaining subscription: cleaned up
