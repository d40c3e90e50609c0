"""The log reader: only committed transactions, in commit order, with their boundaries; every
intermediate change (no net changes); the publisher's log released only once stored; PostgreSQL
TRUNCATE; SQLite's coarser boundaries (transactions between two reads arrive as one)."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.dialects.postgres.pgoutput import lsn_int
from sparksync.metadata import store
from sparksync.transactional.delivery.subscriber import Command
from sparksync.transactional.distribution import database as dst
from sparksync.transactional.distribution.logreader import run_logreader
from tests.support.transactional import build, replicate, setup_topology, stored_commands, vendor_rows, vendor_table

pytestmark = pytest.mark.spark


def _transactions(tx) -> list[dict]:
    with connect(tx.topology.distributor_url) as d:
        return store.select_rows(d, "MSrepl_transactions", order_by=("xact_seqno",))


def _commands(tx) -> list[Command]:
    return stored_commands(tx.topology.distributor_url)


@pytest.mark.parametrize("publisher", ["postgresql", "sqlite"])
def test_only_committed_work_every_change(spark, dbs, tmp_path, pg_admin_url, publisher):
    tx = build(dbs, tmp_path, publisher, {"S": "sqlite"})
    setup_topology(tx, spark)
    t = vendor_table(publisher)
    with connect(tx.publisher_url) as r:
        with pytest.raises(RuntimeError):
            with r.transaction():
                r.execute(vendor_rows(publisher, [77]))
                raise RuntimeError("rolled back")
        for i in range(5):                                  # a row updated 5 times: 5 commands
            r.execute(f'UPDATE {t} SET "CreditRating" = {i} WHERE "VendorID" = 1')
    run_logreader(tx.topology)
    cmds = _commands(tx)
    assert [c.type for c in cmds] == ["upd"] * 5
    assert all('"VendorID":77' not in (c.after or "") for c in cmds)
    if publisher == "postgresql":
        assert len(_transactions(tx)) == 5          # each statement committed on its own
    else:
        assert len(_transactions(tx)) == 1          # SQLite: what committed between two reads is one transaction
    assert replicate(tx, spark).ok and tx.subscriber_rows("S") == tx.publisher_rows()


def test_postgresql_transaction_boundaries_and_log_release(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql"})
    setup_topology(tx, spark)
    t = vendor_table("postgresql")
    with connect(tx.publisher_url) as r:
        with r.transaction():
            r.execute(vendor_rows("postgresql", [60, 61]))
            r.execute(f'UPDATE {t} SET "Name" = \'x\' WHERE "VendorID" = 2')
            r.execute(f'DELETE FROM {t} WHERE "VendorID" = 3')
        r.execute(f'UPDATE {t} SET "Name" = \'y\' WHERE "VendorID" = 4')
        with connect(tx.topology.distributor_url) as d:
            slot = dst.require_publication(d, "Purchasing").slot
        before = r.scalar("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        end = lsn_int(r.scalar("SELECT pg_current_wal_lsn()::text"))
    run = run_logreader(tx.topology)[0]
    txns = _transactions(tx)
    assert [x["commands"] for x in txns] == [4, 1] and run.transactions == 2
    assert [c.command_id for c in _commands(tx)[:4]] == [1, 2, 3, 4]
    assert txns[0]["xact_seqno"] < txns[1]["xact_seqno"] and txns[0]["publisher_commit"] is not None
    with connect(tx.publisher_url) as r:
        after = r.scalar("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    assert lsn_int(after) > lsn_int(before) and lsn_int(after) >= txns[-1]["xact_seqno"]
    assert lsn_int(after) <= end + 10_000_000
    summary = replicate(tx, spark)
    assert summary.ok and tx.subscriber_rows("S") == tx.publisher_rows()


def test_truncate_at_a_postgresql_publisher(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql", "L": "sqlite"})
    setup_topology(tx, spark)
    tx.publish('TRUNCATE "Purchasing"."Vendor"', vendor_rows("postgresql", [5]))
    assert replicate(tx, spark).ok
    assert tx.subscriber_rows("S") == tx.publisher_rows() == tx.subscriber_rows("L")
    assert len(tx.publisher_rows()) == 1


def test_the_sqlite_log_is_trimmed_once_stored(spark, dbs, tmp_path, pg_admin_url):
    tx = build(dbs, tmp_path, "sqlite", {"S": "sqlite"})
    setup_topology(tx, spark)
    tx.publish(vendor_rows("sqlite", [40]))
    with connect(tx.publisher_url) as r:
        assert r.scalar('SELECT count(*) FROM "MSrepl_log"') == 1
    run_logreader(tx.topology)
    with connect(tx.publisher_url) as r:
        assert r.scalar('SELECT count(*) FROM "MSrepl_log"') == 0
    assert len(_transactions(tx)) == 1


def test_a_distribution_database_of_the_previous_release_upgrades_on_setup(spark, dbs, tmp_path, pg_admin_url):
    """Version 2 stored every command as JSON and had no shapes: the log reader refuses it until setup
    upgrades it; commands stored the old way are still delivered, the new ones as the server's messages."""
    from sparksync.errors import MetadataVersionError

    tx = build(dbs, tmp_path, "postgresql", {"S": "postgresql", "L": "sqlite"})
    setup_topology(tx, spark)
    t = vendor_table("postgresql")
    tx.publish(f'UPDATE {t} SET "Name" = \'old\' WHERE "VendorID" = 1')
    run_logreader(tx.topology)
    with connect(tx.topology.distributor_url) as d:
        # the command as the previous release stored it: JSON images, no message
        (old,) = [c for c in stored_commands(tx.topology.distributor_url) if c.type == "upd"]
        d.execute(f"UPDATE {d.meta('MSrepl_commands')} SET type = 'upd', after = {d.p}, before = {d.p}, data = NULL, "
                  "shape = NULL", [old.after, old.before])
        d.execute(f"DROP TABLE {d.meta('MSrepl_shapes')}")
        for column in ("data", "shape"):
            d.execute(f"ALTER TABLE {d.meta('MSrepl_commands')} DROP COLUMN {column}")
        store.update_rows(d, "sparksync_metadata_version", {"version": 2}, {"id": 2})
    tx.publish(f'UPDATE {t} SET "Name" = \'new\' WHERE "VendorID" = 2')
    with pytest.raises(MetadataVersionError, match="older .* run 'sparksync setup'"):
        run_logreader(tx.topology)
    setup_topology(tx, spark)
    summary = replicate(tx, spark)
    assert summary.ok and tx.subscriber_rows("S") == tx.subscriber_rows("L") == tx.publisher_rows()
    assert {s.subscription: s.commands for s in summary.subscriptions} == {"S": 2, "L": 2}   # the old one too
    assert tx.publisher_rows(where=' WHERE "VendorID" <= 2')[:2] == [(1, "old", 2), (2, "new", 3)]
    with connect(tx.topology.distributor_url) as d:
        assert store.select_rows(d, "MSrepl_shapes")


def test_a_slot_streamed_by_another_reader_is_a_named_error(spark, dbs, tmp_path, pg_admin_url, monkeypatch):
    """A second reader of the slot (the agent lock bypassed) waits for it a moment, then stops with a message
    naming the slot; nothing is stored, and the slot is read once it is free."""
    from sparksync.dialects.postgres import replication_stream
    from sparksync.errors import SparksyncError

    tx = build(dbs, tmp_path, "postgresql", {"S": "sqlite"})
    setup_topology(tx, spark)
    tx.publish(f'UPDATE {vendor_table("postgresql")} SET "Name" = \'held\' WHERE "VendorID" = 1')
    with connect(tx.topology.distributor_url) as d:
        slot = dst.require_publication(d, "Purchasing").slot
    monkeypatch.setattr(replication_stream, "SLOT_BUSY_WAIT", 0.5)
    holder = replication_stream.ReplicationStream(tx.publisher_url, "HQ", slot, {"proto_version": "1",
                                                  "publication_names": '"sparksync_Purchasing"'}, {})
    holder.open()
    try:
        with pytest.raises(SparksyncError, match=f"cannot stream replication slot {slot}: .*active"):
            run_logreader(tx.topology)
    finally:
        holder.close()
    assert _commands(tx) == []
    assert run_logreader(tx.topology)[0].commands == 1
    assert replicate(tx, spark).ok and tx.subscriber_rows("S") == tx.publisher_rows()


def test_the_log_a_slot_holds_is_in_status_the_monitor_and_metrics(spark, dbs, tmp_path, pg_admin_url):
    """What the log reader has not stored yet keeps the publisher's write-ahead log: status, the monitor's
    publications table and /metrics say how much, and the slot lets it go once the log reader has run."""
    from sparksync.monitor import page
    from sparksync.monitor.metrics import SparksyncCollector
    from sparksync.monitor.view import build_view
    from sparksync.monitor.watch import NoAgents
    from sparksync.status.gather import gather_status

    tx = build(dbs, tmp_path, "postgresql", {"S": "sqlite"})
    setup_topology(tx, spark)
    run_logreader(tx.topology)
    t = vendor_table("postgresql")
    tx.publish(*[f'UPDATE {t} SET "Name" = \'held {i}\' WHERE "VendorID" = {i}' for i in range(1, 11)])

    def held() -> tuple[int, int]:
        (pub,) = gather_status(tx.topology)["transactional"]["publications"]
        samples = [s for f in SparksyncCollector(tx.topology, NoAgents(), None).collect() for s in f.samples
                   if s.name == "sparksync_logreader_retained_wal_bytes"]
        assert [s.labels["publication"] for s in samples] == ["Purchasing"]
        return int(pub["slot_lag_bytes"]), int(samples[0].value)

    before, metric = held()
    assert before > 0 and metric >= before
    html = page.render(build_view(tx.topology, NoAgents(), None), None, "main")
    row = html.split('data-publication="Purchasing"')[1].split("</tr>")[0]
    assert '<td class="n slot">' in row and " bytes</td>" in row
    with connect(tx.publisher_url) as r:
        written = lsn_int(r.scalar("SELECT pg_current_wal_lsn()::text"))
    run_logreader(tx.topology)
    with connect(tx.publisher_url) as r, connect(tx.topology.distributor_url) as d:
        slot = dst.require_publication(d, "Purchasing").slot
        confirmed = r.scalar("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    assert lsn_int(confirmed) >= written      # the log it held is released (the server's WAL is shared: others write)


def test_a_stream_the_server_ends_is_a_named_error_and_the_next_run_reads_it_all(spark, dbs, tmp_path, pg_admin_url):
    """The walsender terminated while the log reader streams (a server restart, an administrator): the run
    stops saying the server's reason and stores nothing of the batch; the next run reads it all, once."""
    from sparksync.errors import SparksyncError
    from sparksync.transactional.capture import capture_method

    tx = build(dbs, tmp_path, "postgresql", {"S": "sqlite"}, seed_ids=range(1, 40_001))
    setup_topology(tx, spark)
    tx.publish(f'UPDATE {vendor_table("postgresql")} SET "CreditRating" = 5')       # 40,000 changes, ~8 MB
    with connect(tx.topology.distributor_url) as d, connect(tx.publisher_url) as pub:
        p = dst.require_publication(d, "Purchasing")
        reader = capture_method(pub).reader(pub, p, [a for a in p.articles if a.active], 100_000)
        events = reader.read_batch(p.logreader_seqno)
        next(events)                                              # the stream is open, the transaction begun
        pid = pub.scalar("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (p.slot,))
        assert pub.scalar("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(SparksyncError, match=f"stream of replication slot {p.slot} ended: .*terminating"):
            for _ in events:
                pass
        assert not reader.confirm()
    assert _commands(tx) == []
    run = run_logreader(tx.topology)[0]
    assert run.transactions == 1 and run.commands == 40_000
    assert replicate(tx, spark).ok and tx.subscriber_rows("S") == tx.publisher_rows()
