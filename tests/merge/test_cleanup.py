"""Metadata retention cleanup on real databases, with a fake clock: time passes by moving every time
the replicas recorded (generations closed, merges, conflicts, sessions) back by as many days.

Cleanup forgets only what every replica that can still merge has received and what is older than
retention; a subscription that has not merged within retention is expired and reinitialized from a
new snapshot (the old one predates the cleanup)."""

from __future__ import annotations

import datetime as dt

import pytest

from sparksync.dialects import connect
from sparksync.merge.maintenance.cleanup import cleanup
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.merge.tracking import pending
from sparksync.metadata import store
from sparksync.provision import setup
from sparksync.reinit import reinitialize
from sparksync.topology import parse_topology
from sparksync.validation.subscriptions import validate
from tests.support.clock import advance
from tests.support.demo_topology import build

pytestmark = pytest.mark.spark

RETENTION = 7
DETAIL = '"SalesOrderDetail"'


def count(url: str, table: str) -> int:
    with connect(url) as r:
        pending.flush(r)
        return int(r.scalar(f"SELECT count(*) FROM {r.meta(table)}"))


def _topology(pub_kind: str, spark, dbs, tmp_path):
    data, _ = build(dbs, tmp_path, pub_kind, ["sqlite", "postgresql"])
    data["publications"][0]["retention"] = RETENTION
    topology = parse_topology(data, tmp_path)
    setup(topology, lambda: spark)
    urls = [data["publisher"]["database"]] + [s["database"] for s in data["subscriptions"]]
    return data, topology, urls


def test_cleanup_forgets_only_what_every_unexpired_subscription_received(spark, dbs, tmp_path):
    """A PostgreSQL publisher with a SQLite and a PostgreSQL subscriber."""
    data, topology, urls = _topology("postgresql", spark, dbs, tmp_path)
    hq_url, s1_url, s2_url = urls
    agent = MergeAgent(topology, spark)
    with connect(hq_url) as hq:                                     # day 0: deletes at the publisher
        hq.execute(f'DELETE FROM {DETAIL} WHERE "SalesOrderDetailID" <= 10')
    with connect(s1_url) as s1:                                     # and a conflict
        s1.execute('UPDATE "Customer" SET "FirstName" = \'s1\' WHERE "CustomerID" = 1')
    with connect(hq_url) as hq:
        hq.execute('UPDATE "Customer" SET "FirstName" = \'hq\' WHERE "CustomerID" = 1')
    first = agent.run(MergeOptions(subscriptions=["S1"]))
    assert first.ok and first.conflicts
    tombstones = count(hq_url, "MSmerge_tombstone")
    assert tombstones >= 10 and count(hq_url, "MSmerge_conflicts_info") >= 1
    assert count(hq_url, "MSmerge_conflict_Sales_Customer") >= 1
    # S2 only uploads for 8 days: it merges (it is not expired) but has not received the deletes
    for _ in range(2):
        advance(urls, 4)
        assert agent.run(MergeOptions(subscriptions=["S1"])).ok
        up = agent.run(MergeOptions("upload", subscriptions=["S2"]))
        assert up.ok, up.subscriptions[0].errors
    dry = cleanup(topology, dry_run=True)
    publisher = dry.replicas[0]
    assert publisher.replica == "HQ" and "S2" in (publisher.held_by or "")
    assert "MSmerge_tombstone" not in publisher.removed
    done = cleanup(topology)
    assert done.ok and count(hq_url, "MSmerge_tombstone") == tombstones     # what S2 needs stays
    # the day-0 conflict (its losing row too) and sessions are 8 days old: the last sessions removed them
    assert count(hq_url, "MSmerge_conflicts_info") == 0 and count(hq_url, "MSmerge_conflict_Sales_Customer") == 0
    with connect(hq_url) as hq:
        assert hq.scalar(f"SELECT count(*) FROM {hq.meta('MSmerge_sessions')} WHERE start_time < {hq.p}",
                         [store.utcnow() - dt.timedelta(days=RETENTION)]) == 0
    # S2 merges and receives them; the session's own cleanup lets the publisher forget them
    summary = agent.run(MergeOptions(subscriptions=["S2"]))
    assert summary.ok
    with connect(s2_url) as s2:
        assert s2.scalar(f'SELECT count(*) FROM {DETAIL} WHERE "SalesOrderDetailID" <= 10') == 0
    hq_done = {c.replica: c for c in summary.cleanup}["HQ"]
    assert hq_done.removed.get("MSmerge_tombstone", 0) >= 10, hq_done
    assert hq_done.removed.get("MSmerge_genhistory", 0) > 0 and count(hq_url, "MSmerge_tombstone") == 0
    assert count(s1_url, "MSmerge_tombstone") == 0                 # S1 forgot them in its own sessions
    assert count(s2_url, "MSmerge_tombstone") >= 10                # S2 received them just now: kept for 7 days
    advance(urls, 4)
    assert agent.run(MergeOptions()).ok                            # their session cleanup: 4 days, too young
    assert count(s2_url, "MSmerge_tombstone") >= 10
    advance(urls, 4)
    done = cleanup(topology)
    assert [r.replica for r in done.replicas] == ["HQ", "S1", "S2"]
    assert done.replicas[2].removed.get("MSmerge_tombstone", 0) >= 10, done.replicas[2]
    assert count(s2_url, "MSmerge_tombstone") == 0
    # life after cleanup (changes both ways, everything converges): tests/merge/test_lifecycle_property.py


def test_the_agent_cleans_at_the_end_of_a_session_and_an_expired_subscriber_is_reinitialized(spark, dbs, tmp_path):
    """A SQLite publisher with a SQLite and a PostgreSQL subscriber."""
    data, topology, urls = _topology("sqlite", spark, dbs, tmp_path)
    hq_url, s1_url, s2_url = urls
    agent = MergeAgent(topology, spark)
    with connect(hq_url) as hq:
        hq.execute(f'DELETE FROM {DETAIL} WHERE "SalesOrderDetailID" <= 5')
    assert agent.run(MergeOptions(subscriptions=["S1"])).ok
    advance(urls, 4)
    assert agent.run(MergeOptions(subscriptions=["S1"])).ok
    advance(urls, 4)                                               # S2 never merged: expired
    with connect(hq_url) as hq:
        hq.execute('UPDATE "Product" SET "Name" = \'renamed\' WHERE "ProductID" = 1')
    summary = agent.run(MergeOptions(subscriptions=["S1"]))
    assert summary.ok
    cleaned = {c.replica: c for c in summary.cleanup}
    assert cleaned["HQ"].removed.get("MSmerge_tombstone", 0) >= 5, cleaned["HQ"]
    assert "S2" not in (cleaned["HQ"].held_by or "")
    with connect(hq_url) as hq:
        row = store.select_rows(hq, "sysmergepublications", {"name": "Sales"})[0]
        assert int(row["cleanup_generation"]) > int(row["snapshot_generation"])
    refused = agent.run(MergeOptions(subscriptions=["S2"]))
    assert not refused.ok and "expired" in refused.subscriptions[0].errors[0]
    messages: list[str] = []
    reinitialize(topology, lambda: spark, "S2", discard=True, report=messages.append)
    assert any("older than the metadata cleanup" in m for m in messages), messages
    assert agent.run(MergeOptions()).ok
    with connect(s2_url) as s2:
        assert s2.scalar(f'SELECT count(*) FROM {DETAIL} WHERE "SalesOrderDetailID" <= 5') == 0
        assert s2.scalar('SELECT "Name" FROM "Product" WHERE "ProductID" = 1') == "renamed"
    report = validate(topology, lambda: spark, checksum=True)
    assert report.ok


def test_retention_zero_keeps_everything(spark, dbs, tmp_path):
    data, _ = build(dbs, tmp_path, "sqlite", ["sqlite"])
    data["publications"][0]["retention"] = 0
    topology = parse_topology(data, tmp_path)
    setup(topology, lambda: spark)
    with connect(data["publisher"]["database"]) as hq:
        hq.execute(f'DELETE FROM {DETAIL} WHERE "SalesOrderDetailID" <= 5')
    assert MergeAgent(topology, spark).run(MergeOptions()).ok
    advance([data["publisher"]["database"], data["subscriptions"][0]["database"]], 10_000)
    done = cleanup(topology)
    assert all(r.total == 0 and "retention 0" in (r.held_by or "") for r in done.replicas)
    assert count(data["publisher"]["database"], "MSmerge_tombstone") >= 5
