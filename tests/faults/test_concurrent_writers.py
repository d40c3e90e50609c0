"""Writes committed while a merge applies are never overwritten (issue 9, "lost updates").

A merge reads a subscriber's change of row 4 and stops (failpoint ``apply.before_begin``, ``!pause``)
just before its transaction at the publisher; a client (psql / the sqlite3 shell) then updates row 4
there and holds its transaction open; the merge goes on and must wait for it: on PostgreSQL the test
sees it blocked by the client's backend (``pg_blocking_pids``), on SQLite the client holds the
database's write lock, which the merge's next statement needs. When the client commits, the client's
write is seen: with row tracking it is a conflict, logged, the publisher's version winning; with
column tracking both column edits are kept. Never the silent loss of the committed write, nor of one
committed after the publisher's generation was closed and before the merge locked the row (it is only
in the tracking log then: the apply flushes the rows it locked before comparing). Then, with a flush
held open, the merge says which generation waits for which backend (SQLite: the merge, stopped where
it closes the publisher's generation while the client holds the write lock, waits for it and sends
its write), and the first merge after the writers end converges. Every wait is on an
event (a failpoint reached, a lock seen held or waited for), never on a sleep.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from sparksync.dialects import connect
from sparksync.merge.tracking import pending
from sparksync.status import gather_status
from tests.support.cluster import Cluster, session
from tests.support.databases import databases

pytestmark = pytest.mark.spark


def ddl(kind: str) -> list[str]:
    out = []
    for t in ("TR", "TC"):
        out.append(f'CREATE TABLE "{t}" ("id" INTEGER PRIMARY KEY, "a" TEXT, "b" TEXT)' if kind == "sqlite"
                   else f'CREATE TABLE "{t}" ("id" integer PRIMARY KEY, "a" text, "b" text)')
        out += [f"INSERT INTO \"{t}\" VALUES ({i}, 'a{i}', 'b{i}')" for i in range(1, 11)]
    return out


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory, pg_admin_url):
    with databases(tmp_path_factory.mktemp(f"conc-{request.param}"), pg_admin_url) as dbs:
        yield Cluster(spark, dbs, request.param,
                      {"S": "sqlite", "G": "postgresql"}, ddl,
                      [{"table": "TR"}, {"table": "TC", "column_tracking": True}],
                      publisher={"change_capture": "auto"})      # PostgreSQL: its changes read from its log


class Holder:
    """A client session of the publisher's own command-line tool, holding a transaction open."""

    def __init__(self, world, statements: str):
        self.world = world
        kind = world.kinds["P"]
        if kind == "sqlite":
            cmd = ["sqlite3", world.urls["P"][len("sqlite:///"):]]
            begin, probe = "BEGIN IMMEDIATE;", "SELECT 'held';"
        else:
            cmd = ["psql", world.urls["P"], "-q", "-tA", "-v", "ON_ERROR_STOP=1"]
            begin, probe = "BEGIN;", "SELECT 'held ' || pg_backend_pid();"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "PGAPPNAME": "holder"})
        self.proc.stdin.write(f"{begin}\n{statements}\n{probe}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        assert line.startswith("held"), (line, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.pid = int(line.split()[1]) if kind != "sqlite" else None

    def holds_write_lock(self) -> bool:
        """SQLite: the database's one write lock is taken (by this session: it is open and uncommitted)."""
        import sqlite3

        probe = sqlite3.connect(self.world.urls["P"][len("sqlite:///"):], timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            return "locked" in str(e) or "busy" in str(e)
        finally:
            probe.close()
        return False

    def wait_until_waited_for(self, seconds: float = 60) -> None:
        """PostgreSQL: until another backend is blocked by this session's locks."""
        deadline = time.monotonic() + seconds
        with connect(self.world.urls["P"]) as r:
            while time.monotonic() < deadline:
                if r.scalar("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                            [self.pid]):
                    return
                time.sleep(0.05)
        raise AssertionError("the merge never waited for the held row")

    def commit(self) -> None:
        self.proc.stdin.write("COMMIT;\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0, self.proc.stderr.read()


def _merge_in_background(world, **kw):
    out: dict = {}

    def run():
        try:
            out["summary"] = world.merge(**kw)
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _finished(thread, out):
    thread.join(timeout=120)
    assert not thread.is_alive(), "the merge did not finish"
    if "error" in out:
        raise out["error"]
    return out["summary"]


def test_a_write_committed_while_the_merge_waits_is_a_conflict_not_an_overwrite(world, failpoints):
    world.sql("S", 'UPDATE "TR" SET "b" = \'sub-b\' WHERE "id" = 4', 'UPDATE "TC" SET "b" = \'sub-b\' WHERE "id" = 4')
    failpoints("apply.before_begin P:0 !pause")
    thread, out = _merge_in_background(world, exchange="upload")
    holder = None
    try:
        failpoints.wait_paused("apply.before_begin", "P:0")   # S's changes read, nothing at P locked yet
        holder = Holder(world, 'UPDATE "TR" SET "a" = \'hq-a\' WHERE "id" = 4; '
                               'UPDATE "TC" SET "a" = \'hq-a\' WHERE "id" = 4;')
        if world.kinds["P"] == "sqlite":
            assert holder.holds_write_lock()                  # the merge's transaction must wait for it
    finally:
        failpoints.resume("apply.before_begin", "P:0")
    assert holder is not None
    if world.kinds["P"] != "sqlite":
        holder.wait_until_waited_for()                        # the merge is blocked on row 4
    holder.commit()
    summary = _finished(thread, out)
    assert summary.ok, [s.errors for s in summary.subscriptions]
    # row tracking: the committed hq-a is kept, the subscriber's version lost a logged conflict
    assert (world.value("P", "TR", 4, "a"), world.value("P", "TR", 4, "b")) == ("hq-a", "b4")
    assert session(summary, "S").total("upload").conflicts == 1
    logged = [c for c in world.conflicts("P") if c["conflict_type"] == 1]
    assert len(logged) == 1 and logged[0]["origin_datasource"] == "S"
    # column tracking: both edits kept, no conflict
    assert (world.value("P", "TC", 4, "a"), world.value("P", "TC", 4, "b")) == ("hq-a", "sub-b")
    assert world.merge().ok
    for who in ("P", "S", "G"):
        assert (world.value(who, "TR", 4, "a"), world.value(who, "TR", 4, "b")) == ("hq-a", "b4")
        assert (world.value(who, "TC", 4, "a"), world.value(who, "TC", 4, "b")) == ("hq-a", "sub-b")


def test_a_write_committed_after_the_close_and_before_the_lock_is_a_conflict(world, failpoints):
    """The publisher's generation is closed (its tracking log flushed), then a client commits a change of
    the row the merge is about to apply: the change is only in the log. The apply flushes the rows it
    locked before it compares versions, so the change is seen: a conflict, the publisher winning."""
    world.sql("S", 'UPDATE "TR" SET "b" = \'sub-b5\' WHERE "id" = 5')
    failpoints("apply.before_begin P:0 !pause")
    thread, out = _merge_in_background(world, exchange="upload")
    try:
        failpoints.wait_paused("apply.before_begin", "P:0")   # S's change read, nothing at P locked yet
        world.sql("P", 'UPDATE "TR" SET "a" = \'hq-a5\' WHERE "id" = 5')     # committed, logged, not flushed
    finally:
        failpoints.resume("apply.before_begin", "P:0")
    summary = _finished(thread, out)
    assert summary.ok, [s.errors for s in summary.subscriptions]
    assert (world.value("P", "TR", 5, "a"), world.value("P", "TR", 5, "b")) == ("hq-a5", "b5")
    assert session(summary, "S").total("upload").conflicts == 1
    assert world.merge().ok
    for who in ("P", "S", "G"):
        assert (world.value(who, "TR", 5, "a"), world.value(who, "TR", 5, "b")) == ("hq-a5", "b5"), who


def test_a_generation_held_by_an_open_transaction_is_named_and_the_next_merge_converges(world, failpoints):

    if world.kinds["P"] == "sqlite":
        # One writer at a time: the merge waits for the open transaction, then sends its write.
        holder = Holder(world, 'UPDATE "TR" SET "a" = \'late\' WHERE "id" = 7;')
        failpoints("generation.make P !pause")
        thread, out = _merge_in_background(world)
        try:
            failpoints.wait_paused("generation.make", "P")    # about to close the publisher's generation
            assert holder.holds_write_lock()                  # which needs the lock the client holds
        finally:
            failpoints.resume("generation.make", "P")
        holder.commit()
        summary = _finished(thread, out)
        assert summary.ok and not summary.waiting
        assert world.value("S", "TR", 7, "a") == "late" and world.value("G", "TR", 7, "a") == "late"
        return

    # PostgreSQL: an application's open transaction holds no generation (it has only appended to the
    # tracking log, which holds what committed): the merge sends what committed and waits for nothing
    world.sql("P", 'UPDATE "TR" SET "a" = \'early\' WHERE "id" = 8')
    holder = Holder(world, 'UPDATE "TR" SET "a" = \'late\' WHERE "id" = 7;')
    summary = world.merge()
    assert summary.ok and not summary.waiting.get("P"), summary.waiting
    assert world.value("S", "TR", 8, "a") == "early" and world.value("S", "TR", 7, "a") != "late"
    # a flush in flight does hold its generation: named, with its backend
    with connect(world.urls["P"]) as flusher:
        world.sql("P", 'UPDATE "TR" SET "a" = \'flushed\' WHERE "id" = 9')
        flusher.execute("SELECT set_config('application_name', 'flusher', false)")
        flusher.begin()
        assert pending.flush(flusher) == 1
        summary = world.merge()
        assert summary.ok
        lines = summary.waiting.get("P", [])
        assert lines and "pid" in lines[0] and "idle in transaction" in lines[0] and "flusher" in lines[0], lines
        status = gather_status(world.topology)
        assert any("flusher" in line for line in status["publisher"].get("waiting", []))
        flusher.commit()
    holder.commit()
    assert world.merge().ok                                # writes stop -> the next merge converges
    for who in ("S", "G"):
        assert world.value(who, "TR", 7, "a") == "late" and world.value(who, "TR", 9, "a") == "flushed"
    assert "waiting" not in gather_status(world.topology)["publisher"]


@pytest.mark.parametrize("world", ["postgresql"], indirect=True)    # SQLite: one writer at a time
def test_setup_run_again_never_deadlocks_an_application_transaction(world):
    """``setup`` run again (as ``reinit`` and ``schema-change`` do) while an application transaction that
    wrote a published table is open: setup changes nothing, so it takes no lock that application writes
    wait for (it used to lock the metadata tables with CREATE INDEX IF NOT EXISTS, then wait for the
    application's table: the application's next write, whose trigger writes the metadata, deadlocked)."""
    from sparksync.provision import setup

    holder = Holder(world, 'UPDATE "TR" SET "a" = \'app-1\' WHERE "id" = 2;')
    done: dict = {}

    def run():
        try:
            done["summary"] = setup(world.topology, lambda: world.spark)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            done["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(120)               # nothing to change: it ends without waiting for the application
    assert not thread.is_alive() and "error" not in done, done
    holder.proc.stdin.write('UPDATE "TR" SET "b" = \'app-2\' WHERE "id" = 2;\nUPDATE "TC" SET "a" = \'app-3\' '
                            "WHERE \"id\" = 2;\n")
    holder.commit()                # fails (ON_ERROR_STOP) if any of its statements deadlocked
    assert world.merge().ok
    for who in ("P", "S", "G"):
        assert (world.value(who, "TR", 2, "a"), world.value(who, "TR", 2, "b"), world.value(who, "TC", 2, "a")) == \
            ("app-1", "app-2", "app-3")
