"""A PostgreSQL publisher whose merge changes are read from its write-ahead log (``change_capture = "auto"`` or
``"log"``: ``dialects/postgres/log_capture.py``): no trigger on the application's writes, every committed write
captured once, the agent's own writes never read back, a lost slot a named error, and a way back to triggers
that loses nothing. The application writes through psycopg, not through sparksync."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from sparksync.cli.app import app as app_cli
from sparksync.dialects import connect
from sparksync.dialects.postgres import log_capture
from sparksync.failpoints import InjectedFault
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.merge.tracking import pending
from sparksync.merge.tracking.generations import make_generation
from sparksync.monitor import page
from sparksync.monitor.metrics import SparksyncCollector
from sparksync.monitor.view import build_view
from sparksync.monitor.watch import NoAgents
from sparksync.names import TableName
from sparksync.provision import setup
from sparksync.status.gather import gather_status
from sparksync.topology import parse_topology
from tests.support.config import write_config
from tests.support.merge_topology import Topo

pytestmark = pytest.mark.spark
LOG = {"change_capture": "auto"}          # PostgreSQL with wal_level = logical: the log


@pytest.fixture
def topo(spark, dbs, tmp_path, pg_admin_url):
    return Topo(spark, dbs, tmp_path, "postgresql", "sqlite", tables=["Item"], with_fk=False, publisher=LOG)


def app(t: Topo, *statements: str) -> None:
    """The application's own writes: a plain PostgreSQL connection, one transaction."""
    with psycopg.connect(t.pub_url) as c:
        for s in statements:
            c.execute(s)


def slot_of(t: Topo) -> str | None:
    with connect(t.pub_url) as r:
        found = log_capture.capture_of(r)
        return None if found is None else found["slot"]


def slot_exists(t: Topo, slot: str) -> bool:
    with psycopg.connect(t.pub_url) as c:
        return bool(c.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()[0])


def triggers(t: Topo) -> list[str]:
    with connect(t.pub_url) as r:
        return r.dialect.list_merge_triggers(r, r.dialect.resolve_name(TableName.parse("Item")))


def contents_lineage(t: Topo, id_: int):
    with connect(t.pub_url) as r:
        pending.flush(r)
        return r.scalar(f'SELECT c.lineage FROM {r.meta("MSmerge_contents")} c JOIN "Item" i ON i."rowguid" = c.rowguid '
                        'WHERE i."id" = %s', (id_,))


def logged(t: Topo) -> int:
    """What ``status`` counts as changed and not yet recorded at the publisher (read-only)."""
    with connect(t.pub_url) as r:
        return pending.count(r, [n for (n,) in r.query(f'SELECT DISTINCT nickname FROM {r.meta("sysmergearticles")}')])


def download(summary, name: str = "S1") -> int:
    s = next(x for x in summary.subscriptions if x.subscription == name)
    d = s.total("download")
    return d.inserts + d.updates + d.deletes


def test_the_publishers_writes_are_read_from_its_log_and_no_trigger_runs(topo):
    t = topo
    slot = slot_of(t)
    assert slot is not None and slot_exists(t, slot) and triggers(t) == []
    app(t, 'INSERT INTO "Item" ("id", "v", "n") VALUES (100, \'new\', 1)',
        'UPDATE "Item" SET "v" = \'changed\' WHERE "id" = 1',
        'UPDATE "Item" SET "v" = "v" WHERE "id" = 2',             # changes nothing: not a change
        'DELETE FROM "Item" WHERE "id" = 3')
    assert t.merge().ok
    assert t.value("S1", "Item", 100) == "new" and t.value("S1", "Item", 1) == "changed"
    assert not t.exists("S1", "Item", 3)
    assert contents_lineage(t, 2) is None                          # no version of row 2 was made
    assert t.everywhere("Item", 100) == {"new"}


def test_status_the_monitor_and_metrics_show_the_slot_and_the_log_it_keeps(topo, tmp_path):
    t = topo
    slot = slot_of(t)
    app(t, 'UPDATE "Item" SET "v" = \'kept\' WHERE "id" <= 10')
    c = gather_status(t.topology)["publisher"]["change_capture"]
    assert c["mode"] == "log" and c["slot"] == slot and c["retained_wal_bytes"] > 0
    out = CliRunner().invoke(app_cli, ["status", "-c", str(write_config(tmp_path, t.data, "s.toml"))]).output
    assert f"change capture: log (slot {slot}," in " ".join(out.split()) and "write-ahead log retained" in out
    html = page.render(build_view(t.topology, NoAgents(), None), None, "main")
    assert 'id="capture" data-mode="log"' in html and slot in html
    samples = [s for f in SparksyncCollector(t.topology, NoAgents(), None).collect() for s in f.samples
               if s.name == "sparksync_change_capture_retained_wal_bytes"]
    assert [(s.labels["replica"], s.value > 0) for s in samples] == [("P", True)]


def test_the_agents_writes_are_not_read_back_as_the_publishers_changes(topo):
    t = topo
    t.sql("S1", 'UPDATE "Item" SET "v" = \'from S1\' WHERE "id" = 4')
    assert t.merge().ok
    assert t.value("P", "Item", 4) == "from S1" and t.everywhere("Item", 4) == {"from S1"}
    assert logged(t) == 0
    again = t.merge()
    assert again.ok and all(download(again, s) == 0 for s in ("S1", "S2", "S3", "S4"))


def test_a_flush_killed_before_its_commit_records_each_change_once(topo, failpoints):
    t = topo
    app(t, 'UPDATE "Item" SET "v" = \'once\' WHERE "id" = 5')
    failpoints("tracking.flush P")
    with connect(t.pub_url, "P") as r, pytest.raises(InjectedFault):
        make_generation(r, 1)
    failpoints()
    assert logged(t) == 1                                          # still in the log: nothing was recorded
    lineage = contents_lineage(t, 5)
    assert lineage is not None and sorted(lineage.values()) == [1]  # one version, not two
    with connect(t.pub_url) as r:
        assert pending.flush(r) == 0                                # the recorded position covers it
    assert t.merge().ok and t.everywhere("Item", 5) == {"once"}


def test_a_lost_slot_stops_the_publisher_by_name_with_the_way_out(topo):
    t = topo
    slot = slot_of(t)
    with psycopg.connect(t.pub_url, autocommit=True) as c:
        c.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    app(t, 'UPDATE "Item" SET "v" = \'lost\' WHERE "id" = 6')
    with connect(t.pub_url) as r, pytest.raises(Exception) as e:
        pending.flush(r)
    assert slot in str(e.value) and "reinit" in str(e.value) and "setup" in str(e.value)
    st = gather_status(t.topology)                         # status says it too, and is not ok
    (pub,) = st["publications"]
    assert not st["ok"] and any(slot in p and "reinit" in p for p in pub["problems"]), pub
    assert st["publisher"]["change_capture"]["retained_wal_bytes"] is None


def test_a_slot_other_readers_keep_busy_is_a_transient_error_and_nothing_is_lost(topo, monkeypatch):
    """A capture slot another backend keeps decoding past the wait (a status peek, a reader outside sparksync):
    the read-only peek and the flush stop with CaptureBusy (transient: the door answers 503, which a device
    retries; the CLI exits 75) and record nothing; once it is free the flush records the change."""
    from sparksync.dialects.postgres.replication_stream import ReplicationStream
    from sparksync.errors import CaptureBusy

    t = topo
    slot = slot_of(t)
    app(t, 'UPDATE "Item" SET "v" = \'busy\' WHERE "id" = 5')
    monkeypatch.setattr(log_capture, "BUSY_WAIT", 0.3)
    monkeypatch.setattr(log_capture, "FLUSH_BUSY_WAIT", 0.6)
    holder = ReplicationStream(t.pub_url, "P", slot, {"proto_version": "1", "publication_names": log_capture.PUBLICATION},
                               {})
    holder.open()                       # the slot is active for the holder's walsender until it ends
    try:
        with pytest.raises(CaptureBusy, match=f"slot {slot} of its change capture was being read") as e:
            logged(t)
        assert e.value.transient
        with connect(t.pub_url) as r, pytest.raises(CaptureBusy):
            pending.flush(r)
    finally:
        holder.close()
    assert logged(t) == 1
    assert t.merge().ok and t.everywhere("Item", 5) == {"busy"}


def test_setup_back_to_triggers_records_what_the_log_held(topo, tmp_path, spark):
    t = topo
    slot = slot_of(t)
    app(t, 'UPDATE "Item" SET "v" = \'before the switch\' WHERE "id" = 7')
    data = {**t.data, "publisher": {**t.data["publisher"], "change_capture": "triggers"}}
    setup(parse_topology(data, tmp_path), lambda: spark)
    assert slot_of(t) is None and not slot_exists(t, slot) and len(triggers(t)) == 3
    app(t, 'UPDATE "Item" SET "v" = \'after the switch\' WHERE "id" = 8')
    assert t.merge().ok
    assert t.everywhere("Item", 7) == {"before the switch"} and t.everywhere("Item", 8) == {"after the switch"}


def test_a_postgresql_subscriber_reads_its_own_changes_from_its_log(spark, dbs, tmp_path, pg_admin_url):
    pub, sub = dbs.url("postgresql", "pub"), dbs.url("postgresql", "sub")
    with psycopg.connect(pub) as c:
        c.execute('CREATE TABLE "Item" ("id" integer PRIMARY KEY, "v" text)')
        c.execute('INSERT INTO "Item" SELECT i, \'v\' || i FROM generate_series(1, 20) i')
    data = {"publisher": {"name": "P", "database": pub, "snapshot_dir": str(tmp_path / "snap"),
                          "change_capture": "triggers"},
            "publications": [{"name": "Pub", "articles": [{"table": "Item"}]}],
            "subscriptions": [{"name": "G", "publication": "Pub", "database": sub, "change_capture": "log"}]}
    topology = parse_topology(data, tmp_path)
    setup(topology, lambda: spark)
    with connect(sub) as r:
        assert log_capture.capture_of(r) is not None
        assert r.dialect.list_merge_triggers(r, r.dialect.resolve_name(TableName.parse("Item"))) == []
    with connect(pub) as r:
        assert log_capture.capture_of(r) is None and len(r.dialect.list_merge_triggers(
            r, r.dialect.resolve_name(TableName.parse("Item")))) == 3
    agent = MergeAgent(topology, spark)
    first = agent.run(MergeOptions())
    assert first.ok and first.subscriptions[0].total("upload").updates == 0   # the snapshot's rows are not G's changes
    with psycopg.connect(sub) as c:
        c.execute('UPDATE "Item" SET "v" = \'from G\' WHERE "id" = 1')
        c.execute('DELETE FROM "Item" WHERE "id" = 2')
    with psycopg.connect(pub) as c:
        c.execute('UPDATE "Item" SET "v" = \'from P\' WHERE "id" = 3')
    assert agent.run(MergeOptions()).ok
    with psycopg.connect(pub) as c:
        assert c.execute('SELECT "v" FROM "Item" WHERE "id" = 1').fetchone()[0] == "from G"
        assert c.execute('SELECT count(*) FROM "Item" WHERE "id" = 2').fetchone()[0] == 0
    with psycopg.connect(sub) as c:
        assert c.execute('SELECT "v" FROM "Item" WHERE "id" = 3').fetchone()[0] == "from P"
    again = agent.run(MergeOptions())                  # what the agent wrote at G is not read back as G's changes
    assert again.ok and again.subscriptions[0].total("upload").updates == 0


def test_an_installation_tracked_by_triggers_moves_to_the_log_with_what_its_triggers_logged(
        spark, dbs, tmp_path, pg_admin_url):
    t = Topo(spark, dbs, tmp_path, "postgresql", "sqlite", tables=["Item"], with_fk=False)   # triggers, the default
    assert slot_of(t) is None and len(triggers(t)) == 3
    app(t, 'UPDATE "Item" SET "v" = \'logged by a trigger\' WHERE "id" = 9')
    data = {**t.data, "publisher": {**t.data["publisher"], **LOG}}
    setup(parse_topology(data, tmp_path), lambda: spark)
    assert slot_of(t) is not None and triggers(t) == []
    app(t, 'UPDATE "Item" SET "v" = \'read from the log\' WHERE "id" = 10')
    assert logged(t) >= 1                   # (setup may have recorded the trigger's entry already)
    assert t.merge().ok
    assert t.everywhere("Item", 9) == {"logged by a trigger"} and t.everywhere("Item", 10) == {"read from the log"}
    assert sorted(contents_lineage(t, 9).values()) == [1] and sorted(contents_lineage(t, 10).values()) == [1]


@pytest.mark.parametrize("point", ["tracking.flush", "tracking.flushed"])
def test_an_agent_killed_in_its_flush_records_each_change_once(topo, failpoints, point, tmp_path):
    """kill -9 of ``sparksync merge`` with the metadata written and not committed (``tracking.flush``), and right
    after the commit, before the slot moved past what it recorded (``tracking.flushed``): the next merge brings
    each change once, with one version."""
    t = topo
    app(t, 'UPDATE "Item" SET "v" = \'killed\' WHERE "id" = 11', 'DELETE FROM "Item" WHERE "id" = 12',
        'INSERT INTO "Item" ("id", "v", "n") VALUES (111, \'new\', 0)')
    cfg = write_config(tmp_path, t.data)
    failpoints(f"{point} P !kill")
    run = subprocess.run([str(Path(sys.executable).with_name("sparksync")), "merge", "-c", str(cfg)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, (run.returncode, run.stderr[-2000:])
    failpoints()
    assert t.merge().ok
    assert t.everywhere("Item", 11) == {"killed"} and t.everywhere("Item", 111) == {"new"}
    assert not any(t.exists(s, "Item", 12) for s in ("P", "S1", "S2", "S3", "S4"))
    assert sorted(contents_lineage(t, 11).values()) == [1] and sorted(contents_lineage(t, 111).values()) == [1]
    assert logged(t) == 0
