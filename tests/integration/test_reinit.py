"""Subscribers that went wrong over time, on real databases: restored from an older copy (refused,
never silently different), deleted, or with changes to keep; ``reinit`` re-creates each from a
snapshot, with ``--upload-first`` keeping what was made there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparksync.dialects import connect
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.provision import setup
from sparksync.reinit import PendingChanges, reinitialize
from sparksync.validation.subscriptions import validate
from tests.support.demo_topology import build

pytestmark = pytest.mark.spark


def differences(report) -> list:
    return [(s.subscription, s.error, [(a.article, a.differences[:3]) for a in s.articles if not a.ok])
            for s in report.subscriptions if not s.ok]


def test_a_subscriber_restored_from_a_backup_is_refused_then_reinitialized(spark, dbs, tmp_path):
    data, topology = build(dbs, tmp_path, "postgresql", ["sqlite", "postgresql"])
    setup(topology, lambda: spark)
    agent = MergeAgent(topology, spark)
    assert agent.run(MergeOptions()).ok
    s1_url = data["subscriptions"][0]["database"]
    s1_file = Path(s1_url.removeprefix("sqlite:///"))
    shutil.copy(s1_file, tmp_path / "s1-backup.db")
    with connect(s1_url) as s1:
        s1.execute('UPDATE "Customer" SET "FirstName" = \'after backup\' WHERE "CustomerID" <= 3')
    with connect(data["publisher"]["database"]) as hq:
        hq.execute('UPDATE "Customer" SET "LastName" = \'hq\' WHERE "CustomerID" BETWEEN 3 AND 6')
    assert agent.run(MergeOptions()).ok
    shutil.copy(tmp_path / "s1-backup.db", s1_file)                       # the restore
    with connect(s1_url) as s1:                                           # and life goes on there
        s1.execute('UPDATE "Customer" SET "FirstName" = \'after restore\' WHERE "CustomerID" = 7')
    summary = agent.run(MergeOptions())
    errors = {s.subscription: s.errors for s in summary.subscriptions}
    assert errors["S2"] == [] and len(errors["S1"]) == 1
    assert "went back in time" in errors["S1"][0] and "sparksync reinit --subscription S1" in errors["S1"][0]
    with pytest.raises(PendingChanges, match="S1 cannot say which of its changes were uploaded"):
        reinitialize(topology, lambda: spark, "S1")
    reinitialize(topology, lambda: spark, "S1", discard=True)
    assert agent.run(MergeOptions()).ok
    report = validate(topology, lambda: spark, checksum=True)
    assert report.ok, differences(report)
    with connect(s1_url) as s1:
        assert s1.scalar('SELECT "FirstName" FROM "Customer" WHERE "CustomerID" = 1') == "after backup"
        assert s1.scalar('SELECT "LastName" FROM "Customer" WHERE "CustomerID" = 4') == "hq"
        assert s1.scalar('SELECT "FirstName" FROM "Customer" WHERE "CustomerID" = 7') != "after restore"


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_reinit_upload_first_keeps_the_subscribers_changes(pub_kind, spark, dbs, tmp_path):
    data, topology = build(dbs, tmp_path, pub_kind, ["postgresql", "sqlite"])
    setup(topology, lambda: spark)
    s1_url = data["subscriptions"][0]["database"]
    with connect(s1_url) as s1:
        s1.execute('UPDATE "Customer" SET "FirstName" = \'kept\' WHERE "CustomerID" = 2')
    with pytest.raises(PendingChanges, match="S1 has 1 change"):
        reinitialize(topology, lambda: spark, "S1")
    with connect(data["publisher"]["database"]) as hq:
        assert hq.scalar('SELECT "FirstName" FROM "Customer" WHERE "CustomerID" = 2') != "kept"   # nothing changed
    reinitialize(topology, lambda: spark, "S1", upload_first=True)
    assert MergeAgent(topology, spark).run(MergeOptions()).ok
    for url in (data["publisher"]["database"], s1_url, data["subscriptions"][1]["database"]):
        with connect(url) as r:
            assert r.scalar('SELECT "FirstName" FROM "Customer" WHERE "CustomerID" = 2') == "kept"
    report = validate(topology, lambda: spark, checksum=True)
    assert report.ok, differences(report)


def test_a_deleted_or_damaged_subscriber_database_is_recreated(spark, dbs, tmp_path):
    """S2's file deleted: the merge names it, reinit creates it again. S1's file damaged (pages
    overwritten, as a failing disk would): the merge names it as damaged and the others merge; reinit
    refuses without --yes (its changes cannot be counted), and with it moves the file aside (kept)
    and initializes a new one."""
    from sparksync.reinit import PendingChanges

    data, topology = build(dbs, tmp_path, "sqlite", ["sqlite", "sqlite"])
    setup(topology, lambda: spark)
    with connect(data["publisher"]["database"]) as hq:
        hq.execute('UPDATE "Customer" SET "LastName" = \'hq\' WHERE "CustomerID" <= 4')
    s2_file = Path(data["subscriptions"][1]["database"].removeprefix("sqlite:///"))
    s2_file.unlink()
    summary = MergeAgent(topology, spark).run(MergeOptions())
    assert not summary.ok and any("S2" in e for s in summary.subscriptions for e in s.errors)
    reinitialize(topology, lambda: spark, "S2", discard=True)
    assert MergeAgent(topology, spark).run(MergeOptions()).ok

    s1_file = Path(data["subscriptions"][0]["database"].removeprefix("sqlite:///"))
    with open(s1_file, "r+b") as f:              # every page after the first two overwritten
        f.seek(2 * 4096)
        f.write(b"\xde\xad" * (max(s1_file.stat().st_size - 2 * 4096, 4096) // 2))
    with connect(data["publisher"]["database"]) as hq:
        hq.execute('UPDATE "Customer" SET "LastName" = \'again\' WHERE "CustomerID" <= 2')
    summary = MergeAgent(topology, spark).run(MergeOptions())
    errors = {s.subscription: s.errors for s in summary.subscriptions}
    assert any("damaged" in e for e in errors["S1"]) and errors["S2"] == [], errors
    with pytest.raises(PendingChanges):
        reinitialize(topology, lambda: spark, "S1")
    reinitialize(topology, lambda: spark, "S1", discard=True)
    (kept,) = [p for p in s1_file.parent.iterdir()
               if p.name.startswith(s1_file.name + ".damaged-") and not p.name.endswith(("-wal", "-shm"))]
    assert kept.stat().st_size > 0
    assert MergeAgent(topology, spark).run(MergeOptions()).ok
    report = validate(topology, lambda: spark, checksum=True)
    assert report.ok, differences(report)


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_a_subscription_idle_beyond_retention_expires_and_reinit_recovers_it(pub_kind, spark, dbs, tmp_path):
    """Time passes by moving the recorded last-merge dates back (the clock every replica reads)."""
    import datetime as dt

    from sparksync.metadata import store
    from sparksync.reinit import ReinitFailed
    from sparksync.status import gather_status
    from sparksync.topology import parse_topology

    data, _ = build(dbs, tmp_path, pub_kind, ["sqlite", "postgresql"])
    data["publications"][0]["retention"] = 7
    topology = parse_topology(data, tmp_path)
    setup(topology, lambda: spark)
    agent = MergeAgent(topology, spark)
    assert agent.run(MergeOptions()).ok

    def idle(name: str, days: float) -> None:
        with connect(data["publisher"]["database"]) as hq:
            store.update_rows(hq, "sysmergesubscriptions",
                              {"last_sync_date": store.utcnow() - dt.timedelta(days=days)}, {"name": name})

    idle("S1", 6.9)                                               # within retention: merges
    idle("S2", 7.5)                                               # beyond: expired
    with connect(data["subscriptions"][1]["database"]) as s2:
        s2.execute('UPDATE "Customer" SET "FirstName" = \'stale\' WHERE "CustomerID" = 1')
    summary = agent.run(MergeOptions())
    errors = {s.subscription: s.errors for s in summary.subscriptions}
    assert errors["S1"] == [] and len(errors["S2"]) == 1
    assert "S2 expired: its last merge was 7 day(s) ago" in errors["S2"][0] and "retention of 7" in errors["S2"][0]
    assert [p.code for s in summary.subscriptions for p in s.problems] == ["expired"]
    st = {s["name"]: s for s in gather_status(topology)["subscriptions"]}
    assert st["S2"]["status"] == "expired" and st["S1"]["status"] == "active"
    with pytest.raises(ReinitFailed, match="cannot be uploaded safely"):
        reinitialize(topology, lambda: spark, "S2", upload_first=True)
    with pytest.raises(PendingChanges):
        reinitialize(topology, lambda: spark, "S2")
    reinitialize(topology, lambda: spark, "S2", discard=True)
    assert agent.run(MergeOptions()).ok
    report = validate(topology, lambda: spark, checksum=True)
    assert report.ok, differences(report)
    with connect(data["publisher"]["database"]) as hq:
        assert hq.scalar('SELECT "FirstName" FROM "Customer" WHERE "CustomerID" = 1') != "stale"
