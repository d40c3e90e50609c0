"""A stopped agent is never taken for a healthy one (issue 20, item 1).

Every agent (merge, snapshot, log reader, distribution) records each failed run with its error, and
``status`` marks what it serves as stopped, since when and why, with the age of the oldest change not
yet read or delivered; ``status`` exits 1 (``--json`` says ``"ok": false``) until a run succeeds again.
And the case that found it: a published table's replica identity switched to an index after setup.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sparksync.cli.app import app
from sparksync.dialects import connect
from sparksync.errors import SchemaError
from sparksync.metadata import store
from sparksync.provision import setup, snapshot
from sparksync.reinit import reinitialize
from sparksync.status import gather_status
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.distribution.logreader import run_logreader
from tests.support.cluster import Cluster
from tests.support.config import write_config
from tests.support.databases import databases
from tests.support.transactional import build, setup_topology, vendor_rows, vendor_table

pytestmark = pytest.mark.spark


def ddl(kind: str) -> list[str]:
    return ['CREATE TABLE "T" ("id" integer PRIMARY KEY, "a" text, "b" text)'] + \
        [f"INSERT INTO \"T\" VALUES ({i}, 'a{i}', 'b{i}')" for i in range(1, 6)]


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    with databases(tmp_path_factory.mktemp("stopped"), pg_admin_url) as dbs:
        yield Cluster(spark, dbs, "postgresql", {"S": "sqlite", "G": "postgresql"},
                      ddl, [{"table": "T"}])


def cli_status(topology_data: dict, tmp_path) -> tuple[int, dict, str]:
    """``sparksync status`` and ``status --json``: their exit code (the same), the JSON and the text."""
    cfg = write_config(tmp_path, topology_data)
    runner = CliRunner()
    js = runner.invoke(app, ["status", "-c", str(cfg), "--json"])
    text = runner.invoke(app, ["status", "-c", str(cfg)])
    assert js.exit_code == text.exit_code, (js.output, text.output)
    assert "Traceback" not in js.output + text.output
    return js.exit_code, json.loads(js.stdout), text.output


def test_a_merge_that_stops_is_recorded_and_status_says_stopped_until_one_succeeds(world, tmp_path):
    world.sql("P", "UPDATE \"T\" SET \"a\" = 'pending' WHERE \"id\" = 1")
    with connect(world.urls["P"]) as r:                  # the publisher's tracking broken behind sparksync's back
        trigger = r.query("SELECT tgname FROM pg_trigger WHERE tgrelid = '\"T\"'::regclass AND NOT tgisinternal "
                          "ORDER BY 1")[0][0]
        r.execute(f'DROP TRIGGER "{trigger}" ON "T"')
    with pytest.raises(Exception, match="damaged"):
        world.merge()
    with pytest.raises(Exception, match="damaged"):
        world.merge()
    with connect(world.urls["P"]) as r:
        rows = store.select_rows(r, "MSmerge_sessions", {"status": "failed"})
    assert {r["subscription"] for r in rows} == {"S", "G"} and len(rows) == 4
    assert all("damaged" in r["message"] for r in rows), rows
    st = gather_status(world.topology)
    assert not st["ok"]
    subs = {s["name"]: s for s in st["subscriptions"]}
    for name in ("S", "G"):
        s = subs[name]
        assert s["status"] == "stopped" and s["failed_runs"] == 2 and "damaged" in s["last_error"], s
        assert s["stopped_since"] <= s["last_error_time"]
        assert s["pending_download"] == 1 and s["oldest_pending_download_age"] >= 0
    assert any(line.startswith("subscription S: stopped since ") for line in st["problems"]), st["problems"]
    code, js, text = cli_status(world.data, tmp_path)
    assert code == 1 and js["ok"] is False
    assert "S stopped:" in text and "the merge agent has failed 2 run(s) since" in text, text

    setup(world.topology, lambda: world.spark)           # repairs the trigger
    assert world.merge().ok
    st = gather_status(world.topology)
    assert st["ok"], st["problems"]
    assert {s["status"] for s in st["subscriptions"]} == {"active"}
    assert all(s["last_run"]["status"] == "succeeded" and "last_error" not in s for s in st["subscriptions"])


def test_a_failed_snapshot_is_recorded_and_shown(world, failpoints):
    failpoints("snapshot.before_manifest Pub")
    with pytest.raises(Exception, match="failpoint"):
        snapshot(world.topology, world.spark, ["Pub"])
    st = gather_status(world.topology)
    pub = st["publications"][0]
    assert pub["state"] == "stopped" and pub["agent"] == "snapshot" and "failpoint" in pub["last_error"], pub
    assert not st["ok"] and any(line.startswith("publication Pub: stopped") for line in st["problems"])
    snapshot(world.topology, world.spark, ["Pub"])
    st = gather_status(world.topology)
    assert st["publications"][0]["state"] == "published" and st["ok"], st["problems"]
    with connect(world.urls["P"]) as r:
        runs = sorted(store.select_rows(r, "MSsnapshot_history"), key=lambda x: x["start_time"])
    assert [r["status"] for r in runs][-2:] == ["failed", "succeeded"]
    assert "failpoint" in runs[-2]["message"] and runs[-1]["snapshot_id"] and runs[-1]["generation"] is not None


# -- transactional ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tx(spark, tmp_path_factory, pg_admin_url):
    tmp = tmp_path_factory.mktemp("stopped-tx")
    with databases(tmp, pg_admin_url) as dbs:
        t = build(dbs, tmp, "postgresql", {"R1": "sqlite", "R2": "postgresql"})
        setup_topology(t, spark)
        yield t


def test_a_failed_distribution_run_is_recorded_and_the_next_one_clears_it(tx, spark, failpoints):
    tx.publish(vendor_rows("postgresql", [301]))
    run_logreader(tx.topology)
    failpoints("distribute.before_commit R1:0")
    summary = DistributionAgent(tx.topology, spark).run(DistributeOptions(["R1"]))
    assert not summary.ok
    st = gather_status(tx.topology)
    r1 = next(s for s in st["transactional"]["subscriptions"] if s["name"] == "R1")
    assert r1["status"] == "stopped" and "failpoint" in r1["last_error"] and r1["pending_transactions"] >= 1, r1
    assert r1["oldest_pending_age"] is not None
    assert DistributionAgent(tx.topology, spark).run(DistributeOptions(["R1"])).ok
    r1 = next(s for s in gather_status(tx.topology)["transactional"]["subscriptions"] if s["name"] == "R1")
    assert r1["status"] == "active" and r1["pending_transactions"] == 0


def test_a_drifted_replica_identity_stops_the_log_reader_loudly_and_setup_restores_it(tx, spark, tmp_path):
    """PostgreSQL's 100_bugs.pl case: REPLICA IDENTITY switched to an index after setup, an update
    committed. The log reader refuses, naming the table and what to do; the failed run is recorded;
    status says the publication stopped, since when, why, and how old the oldest unread change is."""
    t = vendor_table("postgresql")
    tx.publish(f'CREATE UNIQUE INDEX "vendor_account" ON {t} ("AccountNumber")',
               f'ALTER TABLE {t} REPLICA IDENTITY USING INDEX "vendor_account"',
               f"UPDATE {t} SET \"Name\" = 'renamed' WHERE \"VendorID\" = 2")
    for _ in range(2):
        with pytest.raises(SchemaError) as e:
            run_logreader(tx.topology)
        assert "REPLICA IDENTITY" in e.value.message and "Purchasing" in e.value.message
        assert "sparksync setup" in e.value.message and "reinit" in e.value.message, e.value.message
    st = gather_status(tx.topology)
    pub = st["transactional"]["publications"][0]
    assert pub["state"] == "stopped" and pub["agent"] == "logreader" and pub["failed_runs"] == 2, pub
    assert "REPLICA IDENTITY" in pub["last_error"] and pub["stopped_since"]
    assert pub["oldest_unread_age"] is not None and pub["oldest_unread_age"] >= 0, pub
    assert not st["ok"] and any("publication Purchasing: stopped since" in p for p in st["problems"])
    code, js, text = cli_status(_tx_data(tx), tmp_path)
    assert code == 1 and js["ok"] is False and "publication Purchasing stopped:" in text, text

    setup(tx.topology, lambda: spark)                   # puts REPLICA IDENTITY FULL back
    with connect(tx.publisher_url) as r:
        assert r.scalar(f"SELECT relreplident FROM pg_class WHERE oid = '{t}'::regclass") == "f"
    # the update made meanwhile carries no before image: still refused, naming the subscriptions to reinitialize
    with pytest.raises(SchemaError, match=r"without its before image .* subscription\(s\) R1, R2 still need it"):
        run_logreader(tx.topology)
    tx.publish(f"UPDATE {t} SET \"Name\" = 'after' WHERE \"VendorID\" = 3")        # FULL again: a normal change
    reinitialize(tx.topology, lambda: spark, "R1", discard=True)
    with pytest.raises(SchemaError, match=r"subscription\(s\) R2 still need it"):
        run_logreader(tx.topology)
    reinitialize(tx.topology, lambda: spark, "R2", discard=True)
    run = run_logreader(tx.topology)[0]             # every snapshot holds it now: passed over
    assert run.commands >= 1                         # the change made since
    assert DistributionAgent(tx.topology, spark).run(DistributeOptions()).ok
    for name in ("R1", "R2"):
        rows = dict(tx.subscriber_rows(name, '"VendorID", "Name"'))
        assert rows == dict(tx.publisher_rows('"VendorID", "Name"')) and (rows[2], rows[3]) == ("renamed", "after")
    assert gather_status(tx.topology)["ok"]


def _tx_data(tx) -> dict:
    """The transactional topology as configuration data (for the CLI)."""
    t = tx.topology
    return {"distributor": {"database": t.distributor_url},
            "publisher": {"name": t.publisher.name, "database": t.publisher_url, "snapshot_dir": t.snapshots.location},
            "publications": [{"name": p.name, "kind": p.kind, "articles": [{"table": str(a.table_name)}
                                                                           for a in p.articles]}
                             for p in t.publications],
            "subscriptions": [{"name": s.name, "publication": s.publication, "database": s.database}
                              for s in t.subscriptions]}
