"""Commands that write replication state never run over each other (issue 20; the policy: locks.py and
docs/operations.md, "Locks").

Each pair runs concurrently on one merge topology per publisher dialect: the first command is paused
by a failpoint right after it took its locks, the second is started and must report that it waits
for the first (naming its command and process id); application writes are made through the
databases' own clients while both are in flight; then the first is let go. Both must finish, the
second only after the first, and after a merge every replica holds the same rows, every write
included. Then the refusals: ``--lock-timeout 0`` names the holder (exit 75), a holder killed with
kill -9 leaves no lock behind.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from sparksync import locks
from sparksync.cli.app import app
from sparksync.dialects import connect, dialect_for_url
from sparksync.dialects.agent_locks import LockHolder
from sparksync.merge.conflicts.override import ConflictNotResolvable, resolve_conflict
from sparksync.merge.maintenance.cleanup import cleanup
from sparksync.merge.publish.schema_change import change
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.merge.tracking.articles import agent_writes
from sparksync.provision import setup, snapshot
from sparksync.reinit import reinitialize
from sparksync.validation.compare import compare_replicas
from sparksync.validation.repair import repair
from sparksync.validation.subscriptions import validate
from tests.support.cluster import Cluster
from tests.support.config import write_config
from tests.support.databases import databases
from tests.support.transactional import build, replicate, setup_topology, vendor_rows, vendor_table

pytestmark = pytest.mark.spark

_ids = itertools.count(1000)


def ddl(kind: str) -> list[str]:
    out = []
    for t in ("T", "C"):
        out.append(f'CREATE TABLE "{t}" ("id" INTEGER PRIMARY KEY, "a" TEXT, "b" TEXT)' if kind == "sqlite"
                   else f'CREATE TABLE "{t}" ("id" integer PRIMARY KEY, "a" text, "b" text)')
        out += [f"INSERT INTO \"{t}\" VALUES ({i}, 'a{i}', 'b{i}')" for i in range(1, 21)]
    return out


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory, pg_admin_url):
    with databases(tmp_path_factory.mktemp(f"locks-{request.param}"), pg_admin_url) as dbs:
        yield Cluster(spark, dbs, request.param,
                      {"S": "sqlite", "G": "postgresql"}, ddl, [{"table": "T"}, {"table": "C", "column_tracking": True}])


class Command(threading.Thread):
    """One command in a thread of its own, as a process of its own would run it: its messages, when
    it took its locks and finished, its result or error."""

    def __init__(self, name: str, fn):
        super().__init__(daemon=True)
        self.command, self.fn = name, fn
        self.messages: list[str] = []
        self.waiting = threading.Event()
        self.took_at = self.finished_at = 0.0
        self.result = self.error = None

    def report(self, message: str) -> None:
        self.messages.append(message)
        if "waiting for" in message:
            self.waiting.set()
        if message.endswith(" taken"):
            self.took_at = time.monotonic()

    def run(self) -> None:
        try:
            with locks.waiting(120, self.report):
                self.result = self.fn(self.report)
        except BaseException as e:  # noqa: BLE001 - looked at by the test
            self.error = e
        self.finished_at = time.monotonic()


def run_pair(world, failpoints, first: tuple[str, object], second: tuple[str, object], during=None):
    """``first`` holds its locks (paused); ``second`` must wait for it, saying whom for; ``during`` runs
    while both are in flight; then both finish, the second after the first."""
    failpoints(f"locks.held {first[0]} !pause")
    a = Command(*first)
    a.start()
    failpoints.wait_paused("locks.held", first[0])
    b = Command(*second)
    b.start()
    try:
        assert b.waiting.wait(60), f"{second[0]} did not wait for {first[0]}: {b.messages}"
        said = next(m for m in b.messages if "waiting for" in m)
        assert f"held by {first[0]} (pid {os.getpid()} on " in said and "since" in said, said
        if during is not None:
            during()
    finally:
        resumed = time.monotonic()
        failpoints.resume("locks.held", first[0])
    a.join(300)
    b.join(300)
    assert not a.is_alive() and not b.is_alive()
    # the first releases its lock just before its thread notes the end: a few milliseconds
    assert b.took_at > resumed and b.took_at >= a.finished_at - 0.05, "the second ran before the first ended"
    return a, b


def live_writes(world):
    """Inserts and updates at the publisher and both subscribers, through sqlite3 / psql: a row id
    each, to be found everywhere once the replicas converge."""
    made = []

    def write():
        for who in ("P", "S", "G"):
            i = next(_ids)
            world.shell(who, f"INSERT INTO \"T\" (\"id\", \"a\", \"b\") VALUES ({i}, 'live-{who}', 'x');\n"
                             f"UPDATE \"C\" SET \"b\" = 'live-{who}-{i}' WHERE \"id\" = {i % 20 + 1};\n")
            made.append(i)

    return write, made


def converged(world, made: list[int]) -> None:
    """One merge (upload, then download of everything, the uploads included) and every replica holds
    the same rows, with every live write made so far by any test of the module (``made``: this test's,
    checked now; each test's writes are checked again by the module's last test)."""
    _written.setdefault(world.kinds["P"], []).extend(made)
    summary = world.merge()
    assert summary.ok, [s.errors for s in summary.subscriptions]
    diffs, _ = compare_replicas(world.topology, "Pub")
    assert not diffs, diffs
    for i in _written[world.kinds["P"]]:
        for who in ("P", "S", "G"):
            assert world.exists(who, "T", i), f"row {i} written live is missing at {who}"


_written: dict[str, list[int]] = {}      # publisher dialect -> the live writes of the module's tests


def later(world, made: list[int]) -> None:
    """This test's live writes, checked by the next convergence (the module's last test at the latest):
    the commands of the pair did not need a merge to be checked."""
    _written.setdefault(world.kinds["P"], []).extend(made)


def merge_cmd(world):
    def run(report):
        summary = MergeAgent(world.topology, world.spark, report).run(MergeOptions())
        assert summary.ok, [s.errors for s in summary.subscriptions]
        return summary

    return "merge", run


def diverge(world, who: str, id_: int) -> None:
    """A row changed at a subscriber without its change being tracked (what validate --repair fixes)."""
    with connect(world.urls[who]) as r, r.transaction(), agent_writes(r):
        r.execute(f'UPDATE "T" SET "b" = \'diverged\' WHERE "id" = {r.p}', [id_])


def logged_conflict(world) -> str:
    """A conflict on a row changed at the publisher and at S: its ID."""
    i = next(_ids) % 20 + 1
    world.sql("P", f"UPDATE \"T\" SET \"a\" = 'hq-{i}' WHERE \"id\" = {i}")
    world.sql("S", f"UPDATE \"T\" SET \"a\" = 's-{i}' WHERE \"id\" = {i}")
    before = {c["conflict_id"] for c in world.conflicts("P")}
    assert world.merge().ok
    new = [c for c in world.conflicts("P") if c["conflict_id"] not in before]
    assert len(new) == 1, new
    return str(new[0]["conflict_id"])


# -- merge with each command that writes the publication's state ------------------------------------

def test_merge_and_snapshot(world, failpoints):
    write, made = live_writes(world)
    a, b = run_pair(world, failpoints, merge_cmd(world),
                    ("snapshot", lambda rep: snapshot(world.topology, world.spark, ["Pub"], rep)), write)
    assert a.error is None and b.error is None, (a.error, b.error)
    later(world, made)


def test_merge_and_setup(world, failpoints):
    write, made = live_writes(world)
    a, b = run_pair(world, failpoints, ("setup", lambda rep: setup(world.topology, lambda: world.spark, rep)),
                    merge_cmd(world), write)
    assert a.error is None and b.error is None, (a.error, b.error)
    later(world, made)


def test_merge_and_cleanup(world, failpoints):
    write, made = live_writes(world)
    a, b = run_pair(world, failpoints, merge_cmd(world), ("cleanup", lambda rep: cleanup(world.topology, report=rep)),
                    write)
    assert a.error is None and b.error is None, (a.error, b.error)
    assert all(r.error is None for r in b.result.replicas)
    later(world, made)


def test_merge_and_reinit(world, failpoints):
    write, made = live_writes(world)
    reinit = ("reinit", lambda rep: reinitialize(world.topology, lambda: world.spark, "G", upload_first=True, report=rep))
    a, b = run_pair(world, failpoints, merge_cmd(world), reinit, write)
    assert a.error is None and b.error is None, (a.error, b.error)
    converged(world, made)           # G's live write went up (--upload-first), then came back with the rest


def test_merge_and_validate_repair(world, failpoints):
    diverge(world, "S", 3)
    report = validate(world.topology, lambda: world.spark, checksum=True)
    assert not report.ok
    write, made = live_writes(world)
    a, b = run_pair(world, failpoints, merge_cmd(world),
                    ("validate --repair", lambda rep: repair(world.topology, report, rep)), write)
    assert a.error is None and b.error is None, (a.error, b.error)
    assert world.value("S", "T", 3, "b") == world.value("P", "T", 3, "b")
    converged(world, made)


def test_merge_and_schema_change(world, failpoints):
    write, made = live_writes(world)
    col = f"m{next(_ids)}"
    a, b = run_pair(world, failpoints, ("schema-change", lambda rep: change(world.topology, "Pub", "T", add=f"{col} text")),
                    merge_cmd(world), write)
    assert a.error is None and b.error is None, (a.error, b.error)
    converged(world, made)
    for who in ("P", "S", "G"):
        assert world.value(who, "T", 1, col) is None        # the column arrived everywhere


def test_merge_and_conflict_override(world, failpoints):
    cid = logged_conflict(world)
    write, made = live_writes(world)
    a, b = run_pair(world, failpoints, merge_cmd(world),
                    ("conflicts --resolve", lambda rep: resolve_conflict(world.topology, cid, "loser")), write)
    assert a.error is None and b.error is None, (a.error, b.error)
    converged(world, made)
    row = next(c for c in world.conflicts("P") if str(c["conflict_id"]) == cid)
    assert row["resolution"] == "loser"


# -- each with itself -------------------------------------------------------------------------------

def test_merge_with_merge(world, failpoints):
    write, made = live_writes(world)
    a, b = run_pair(world, failpoints, merge_cmd(world), merge_cmd(world), write)
    assert a.error is None and b.error is None, (a.error, b.error)
    later(world, made)


def test_snapshot_with_snapshot_and_setup_with_setup(world, failpoints):
    a, b = run_pair(world, failpoints, ("snapshot", lambda rep: snapshot(world.topology, world.spark, ["Pub"], rep)),
                    ("snapshot", lambda rep: snapshot(world.topology, world.spark, ["Pub"], rep)))
    assert a.error is None and b.error is None, (a.error, b.error)
    assert a.result["Pub"] != b.result["Pub"]                 # two snapshots, one after the other
    run = lambda rep: setup(world.topology, lambda: world.spark, rep)  # noqa: E731
    a, b = run_pair(world, failpoints, ("setup", run), ("setup", run))
    assert a.error is None and b.error is None, (a.error, b.error)


def test_cleanup_with_cleanup(world, failpoints):
    run = lambda rep: cleanup(world.topology, report=rep)  # noqa: E731
    a, b = run_pair(world, failpoints, ("cleanup", run), ("cleanup", run))
    assert a.error is None and b.error is None, (a.error, b.error)


def test_reinit_with_reinit(world, failpoints):
    write, made = live_writes(world)
    s = ("reinit", lambda rep: reinitialize(world.topology, lambda: world.spark, "S", upload_first=True, report=rep))
    g = ("reinit", lambda rep: reinitialize(world.topology, lambda: world.spark, "G", upload_first=True, report=rep))
    a, b = run_pair(world, failpoints, s, g, write)
    assert a.error is None and b.error is None, (a.error, b.error)
    converged(world, made)


def test_repair_with_repair(world, failpoints):
    diverge(world, "G", 5)
    report = validate(world.topology, lambda: world.spark, checksum=True)
    first = validate(world.topology, lambda: world.spark, checksum=True)
    a, b = run_pair(world, failpoints, ("validate --repair", lambda rep: repair(world.topology, first, rep)),
                    ("validate --repair", lambda rep: repair(world.topology, report, rep)))
    assert a.error is None and b.error is None, (a.error, b.error)
    assert world.value("G", "T", 5, "b") == world.value("P", "T", 5, "b")


def test_schema_change_with_schema_change(world, failpoints):
    c1, c2 = f"x{next(_ids)}", f"y{next(_ids)}"
    a, b = run_pair(world, failpoints, ("schema-change", lambda rep: change(world.topology, "Pub", "C", add=f"{c1} text")),
                    ("schema-change", lambda rep: change(world.topology, "Pub", "C", add=f"{c2} integer")))
    assert a.error is None and b.error is None, (a.error, b.error)
    converged(world, [])
    for who in ("P", "S", "G"):
        assert (world.value(who, "C", 1, c1), world.value(who, "C", 1, c2)) == (None, None)



def test_conflict_override_with_itself(world, failpoints):
    """Two overrides of one conflict: exactly one writes; the other is told it was resolved already."""
    cid = logged_conflict(world)
    run = lambda rep: resolve_conflict(world.topology, cid, "loser")  # noqa: E731
    a, b = run_pair(world, failpoints, ("conflicts --resolve", run), ("conflicts --resolve", run))
    assert a.error is None, a.error
    assert isinstance(b.error, ConflictNotResolvable) and "resolved already" in b.error.message, b.error
    converged(world, [])


# -- refusals and kills ----------------------------------------------------------------------------

HOLDER = """
import sys, time
from sparksync.dialects import dialect_for_url
from sparksync.dialects.agent_locks import LockHolder
lock = dialect_for_url(sys.argv[1]).agent_lock(sys.argv[1], sys.argv[2])
assert lock.try_acquire(LockHolder.me("merge"))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_held_lock_is_refused_by_name_and_a_killed_holder_leaves_none(world, tmp_path):
    """``--lock-timeout 0``: exit 75 naming the holder (a process of its own): its command and pid;
    the holder killed with kill -9: the lock is free at once (the kernel or the server dropped it)."""
    r = locks.resources(world.topology, "cleanup", ["Pub"])[0]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, r.url, r.key], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        cfg = write_config(tmp_path, world.data)
        out = CliRunner().invoke(app, ["cleanup", "-c", str(cfg), "--lock-timeout", "0"])
        assert out.exit_code == 75, out.output
        assert f"held by merge (pid {holder.pid} on " in out.output and "nothing was done" in out.output, out.output
        assert "Traceback" not in out.output
        lock = dialect_for_url(r.url).agent_lock(r.url, r.key)
        assert not lock.try_acquire(LockHolder.me("test"))
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        deadline = time.monotonic() + 30        # PostgreSQL ends the killed client's backend as it notices
        while not lock.try_acquire(LockHolder.me("test")):
            assert time.monotonic() < deadline, "the lock of a killed holder was never released"
            time.sleep(0.05)
        lock.release()
    finally:
        holder.kill()


def test_a_wait_that_times_out_changes_nothing(world):
    r = locks.resources(world.topology, "merge", ["Pub"])[0]
    lock = dialect_for_url(r.url).agent_lock(r.url, r.key)
    i = next(_ids)
    world.sql("P", f"INSERT INTO \"T\" (\"id\", \"a\", \"b\") VALUES ({i}, 'held', 'x')")
    assert lock.try_acquire(LockHolder.me("snapshot"))
    try:
        said: list[str] = []
        t0 = time.monotonic()
        with pytest.raises(locks.LockBusy) as e, locks.waiting(0.5):
            MergeAgent(world.topology, world.spark, said.append).run(MergeOptions())
        assert time.monotonic() - t0 >= 0.5
        assert e.value.holder is not None and e.value.holder.pid == os.getpid() and e.value.holder.command == "snapshot"
        assert "after waiting 0.5 s" in e.value.message and "nothing was done" in e.value.message, e.value.message
        assert any("waiting for publication Pub (merge agent lock), held by snapshot" in m for m in said), said
        assert not world.exists("S", "T", i)          # nothing merged
    finally:
        lock.release()
    later(world, [i])


def test_every_live_write_of_every_pair_is_at_every_replica(world):
    """The module's last check on each topology: one merge, and every write made live during any pair
    (and the row the timed-out merge left) is at every replica, which hold the same rows."""
    assert len(_written[world.kinds["P"]]) > 20
    converged(world, [])


# -- transactional: the log reader with a schema change, the distribution agent with a reinit ----------

@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def tx(request, spark, tmp_path_factory, pg_admin_url):
    tmp = tmp_path_factory.mktemp(f"txlocks-{request.param}")
    with databases(tmp, pg_admin_url) as dbs:
        t = build(dbs, tmp, request.param, {"R1": "sqlite", "R2": "postgresql"})
        setup_topology(t, spark)
        yield t


def _tx_converged(tx, spark) -> None:
    assert replicate(tx, spark).ok
    for name in ("R1", "R2"):
        assert tx.subscriber_rows(name) == tx.publisher_rows(), name


def test_logreader_and_schema_change(tx, spark, failpoints):
    from sparksync.transactional.distribution.logreader import run_logreader
    from sparksync.transactional.publish.schema_change import change as tx_change

    tx.publish(vendor_rows(tx.publisher_kind, [101, 102]))
    a, b = run_pair(tx, failpoints, ("logreader", lambda rep: run_logreader(tx.topology, report=rep)),
                    ("schema-change", lambda rep: tx_change(tx.topology, "Purchasing", "Vendor" if tx.publisher_kind ==
                                                            "sqlite" else "Purchasing.Vendor", add="Fax text")),
                    lambda: tx.publish(vendor_rows(tx.publisher_kind, [103])))
    assert a.error is None and b.error is None, (a.error, b.error)
    assert a.result[0].commands == 3               # 101-103: committed before the log reader read its horizon
    tx.publish(f"UPDATE {vendor_table(tx.publisher_kind)} SET \"Fax\" = 'f-101' WHERE \"VendorID\" = 101")
    _tx_converged(tx, spark)
    for name in ("R1", "R2"):
        assert tx.subscriber_rows(name, '"VendorID", "Fax"')[-3:] == [(101, "f-101"), (102, None), (103, None)]


def test_distribute_and_reinit(tx, spark, failpoints):
    from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
    from sparksync.transactional.distribution.logreader import run_logreader

    tx.publish(vendor_rows(tx.publisher_kind, [201, 202]))
    run_logreader(tx.topology)
    distribute = ("distribute", lambda rep: DistributionAgent(tx.topology, spark, rep).run(DistributeOptions()))
    reinit = ("reinit", lambda rep: reinitialize(tx.topology, lambda: spark, "R2", discard=True, report=rep))
    a, b = run_pair(tx, failpoints, distribute, reinit, lambda: tx.publish(vendor_rows(tx.publisher_kind, [203])))
    assert a.error is None and b.error is None, (a.error, b.error)
    assert a.result.ok
    _tx_converged(tx, spark)
