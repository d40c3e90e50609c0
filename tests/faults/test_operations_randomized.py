"""Operations interleaved with live writers and kills (issue 20, "Done when").

Writers keep inserting and updating rows at the publisher and at both subscribers through the
databases' own clients (``sqlite3``, ``psql``), each one writing its own rows, while merge, snapshot,
cleanup, validate --repair, schema-change, reinit --upload-first and conflict override run (each once,
in an order and with targets drawn from a seed: ``SPARKSYNC_SEED``). One of them runs in a process of
its own (tests/support/ops_worker.py) and is killed with SIGKILL in the middle of it by a failpoint armed with
``!kill``; what the operator would do next follows (a killed reinit is run again). At the end every
write each writer saw committed is at every replica with its last value, every overridden conflict has
the losing version everywhere, and the replicas are identical."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sparksync import locks
from sparksync.dialects import connect, dialect_for_url
from sparksync.dialects.agent_locks import LockHolder
from sparksync.merge.tracking.articles import agent_writes
from sparksync.validation.compare import compare_replicas
from tests.support.cluster import Cluster
from tests.support.databases import Databases
from tests.support.ops_worker import operations
from tests.support.ops_worker import run as run_here

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
OPS = ["merge", "snapshot", "cleanup", "repair", "schema-change", "reinit", "override"]
KILLS = 1          # per run (one run per publisher dialect): each costs a new process and its JVM


def ddl(kind: str) -> list[str]:
    text = "TEXT" if kind == "sqlite" else "text"
    return [f'CREATE TABLE "W" ("id" integer PRIMARY KEY, "who" {text}, "v" {text})',
            f'CREATE TABLE "K" ("id" integer PRIMARY KEY, "a" {text}, "b" {text})'] + \
        [f"INSERT INTO \"K\" VALUES ({i}, 'a{i}', 'b{i}')" for i in range(1, 41)]


class Writer(threading.Thread):
    """An application writing through its database's own client: inserts of its own rows and updates
    of them, each one acknowledged only once the client reports it committed."""

    def __init__(self, world, who: str, base: int, seed: int):
        super().__init__(daemon=True)
        self.world, self.who, self.base = world, who, base
        self.rng = random.Random(seed)
        self.expected: dict[int, str] = {}         # row id -> its last committed value
        self.stop = threading.Event()
        self.go = threading.Event()
        self.go.set()
        self.idle = threading.Event()
        self.error: BaseException | None = None
        self.proc = self._client()

    def _client(self) -> subprocess.Popen:
        url = self.world.urls[self.who]
        if self.world.kinds[self.who] == "sqlite":
            cmd = ["sqlite3", "-batch", "-bail", url[len("sqlite:///"):]]
            first = ".timeout 60000\n"
        else:
            cmd = ["psql", url, "-q", "-tA", "-v", "ON_ERROR_STOP=1"]
            first = ""
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PGAPPNAME": f"writer {self.who}"})
        p.stdin.write(first)
        return p

    def _send(self, statement: str, n: int) -> bool:
        """One statement in autocommit, reporting whether it wrote a row (``RETURNING``: an update of a row
        the database does not have yet writes nothing), then a second statement, which runs only once
        the first one committed."""
        self.proc.stdin.write(f"{statement} RETURNING 'row{n}';\nSELECT 'done{n}';\n")
        self.proc.stdin.flush()
        lines = [self.proc.stdout.readline().strip()]
        if lines[0] == f"row{n}":
            lines.append(self.proc.stdout.readline().strip())
        if lines[-1] != f"done{n}":
            raise AssertionError(f"writer {self.who}: {statement!r} -> {lines} {self.proc.stderr.read()}")
        return len(lines) == 2

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                if not self.go.is_set():
                    self.idle.set()
                    self.go.wait()
                    self.idle.clear()
                    continue
                n += 1
                mine = list(self.expected)
                if mine and self.rng.random() < 0.4:
                    i = self.rng.choice(mine)
                    v = f"{self.who}-{i}-u{n}"
                    wrote = self._send(f"UPDATE \"W\" SET \"v\" = '{v}' WHERE \"id\" = {i}", n)
                else:
                    i = self.base + n
                    v = f"{self.who}-{i}-i{n}"
                    wrote = self._send(f"INSERT INTO \"W\" (\"id\", \"who\", \"v\") VALUES ({i}, '{self.who}', '{v}')", n)
                    assert wrote, f"writer {self.who}: insert of row {i} wrote nothing"
                if wrote:
                    self.expected[i] = v
                self.stop.wait(0.05)            # an application's pace, not a load test
        except BaseException as e:  # noqa: BLE001 - read by the test
            self.error = e
        finally:
            self.idle.set()
            self.proc.stdin.close()
            self.proc.wait(30)

    def pause(self) -> None:
        self.go.clear()
        assert self.idle.wait(60) or not self.is_alive()

    def resume(self) -> None:
        self.go.set()


class Doomed:
    """tests/support/ops_worker.py in a process of its own, for the command that is killed: started ahead (its JVM
    starts while the test goes on), used once, killed."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.kills = 0

    def start(self) -> None:
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.ops_worker"], cwd=ROOT,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True)

    def run(self, spec: Path, op: str, **kw) -> dict | None:
        """The command's result; None when the process was killed in the middle of it (as it should)."""
        self.start()
        assert self.proc is not None
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}
        self.proc.stdin.write(json.dumps({"spec": str(spec), "op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if line:
            self.close()
            return json.loads(line)
        assert self.proc.wait(60) == -9, self.proc.returncode      # killed (SIGKILL from a failpoint)
        self.kills += 1
        self.proc = None
        return None

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(60)
            self.proc = None


@pytest.fixture(scope="module")
def doomed():
    d = Doomed()
    yield d
    d.close()


KILL_POINTS = {
    "merge": ["locks.held merge", "generation.make P", "agent.before_sender_watermark {who}"],
    "snapshot": ["snapshot.before_manifest Pub"],
    "repair": ["repair.before_write {who}"],
    "reinit": ["locks.held reinit", "setup.before_finish Pub"],
    "schema-change": ["locks.held schema-change"],
}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_operations_with_live_writers_and_kills(kind, spark, tmp_path, pg_admin_url, failpoints, doomed):
    doomed.start()                               # its JVM starts while the topology is built
    seed = int(os.environ.get("SPARKSYNC_SEED", "20"))
    rng = random.Random(f"{seed}-{kind}")
    dbs = Databases(tmp_path, pg_admin_url)
    world = Cluster(spark, dbs, kind, {"S": "sqlite", "G": "postgresql"}, ddl,
                    [{"table": "W"}, {"table": "K", "column_tracking": True}])
    writers = {who: Writer(world, who, base, seed) for who, base in (("P", 1_000_000), ("S", 2_000_000),
                                                                     ("G", 3_000_000))}
    spec = tmp_path / "topology.json"
    spec.write_text(json.dumps({"data": world.data, "base": str(world.tmp)}), encoding="utf-8")
    here = operations(world.topology, spark)
    kills_before = doomed.kills
    kill_now = False

    def run(op: str, **kw) -> dict | None:
        """In this process, as a command run from a shell; the one armed to die in a process of its own."""
        nonlocal kill_now
        if kill_now:
            kill_now = False
            return doomed.run(spec, op, **kw)
        return run_here(here, {"op": op, **kw})

    overridden: dict[int, str] = {}
    done: list[str] = []
    try:
        for w in writers.values():
            w.start()
        plan = rng.sample(OPS, len(OPS))         # every command once, in a random order
        killable = [i for i, op in enumerate(plan) if op in KILL_POINTS]
        kills = set(rng.sample(killable, min(KILLS, len(killable))))    # commands that die in the middle
        for step, op in enumerate(plan):
            t0, killed_before = time.monotonic(), doomed.kills
            who = rng.choice(["S", "G"])
            if step in kills:
                failpoints(f"{rng.choice(KILL_POINTS[op]).format(who=who)} !kill")
                kill_now = op != "repair"       # repair: its merge first, here; then the repair dies
            if op == "repair":                  # a row changed at a subscriber behind sparksync's back
                with connect(world.urls[who]) as r, r.transaction(), agent_writes(r):
                    r.execute(f"UPDATE \"K\" SET \"b\" = 'diverged-{step}' WHERE \"id\" = {rng.randint(21, 40)}")
                for w in writers.values():      # validate --repair refuses a subscription with changes pending
                    w.pause()                   # (its rows may be in flight); races with writers: test_repair_races
                run("merge")
                kill_now = step in kills
                out = run("repair")
                for w in writers.values():
                    w.resume()
                assert out is None or not out.get("pending"), out
            elif op == "schema-change":
                out = run("schema-change", column=f"c{step}")
            elif op == "reinit":
                target = who
                writers[target].pause()         # reinit re-creates the subscriber: its application waits
                out = run("reinit", subscription=target)
                if out is None:                 # killed: the operator runs it again
                    again = run("reinit", subscription=target)
                    assert again["ok"], again
                writers[target].resume()
            elif op == "override":
                i = rng.randint(1, 20)
                world.sql("P", f"UPDATE \"K\" SET \"a\" = 'hq-{step}' WHERE \"id\" = {i}")
                world.sql("S", f"UPDATE \"K\" SET \"a\" = 's-{step}' WHERE \"id\" = {i}")
                before = {c["conflict_id"] for c in world.conflicts("P")}
                assert run("merge")["ok"]
                new = [c for c in world.conflicts("P") if c["conflict_id"] not in before and c["rowguid"]]
                assert new, "the conflicting updates were not logged as a conflict"
                out = run("resolve", conflict_id=str(new[0]["conflict_id"]))
                overridden[i] = f"s-{step}"
            else:
                out = run(op)
            done.append(f"{op}{' (killed)' if doomed.kills > killed_before else ''} {time.monotonic() - t0:.1f}s")
            assert out is None or out["ok"], (op, out)
            failpoints.clear()
            for w in writers.values():
                assert w.error is None, w.error
        for w in writers.values():
            w.stop.set()
        for w in writers.values():
            w.join(120)
            assert w.error is None, w.error
        assert doomed.kills - kills_before == len(kills), done     # every command armed to die did
        out = run("merge")
        assert out["ok"], (out, done)
        out = run("repair")                       # what a killed repair left diverged
        assert out["ok"] and not out.get("pending"), (out, done)
    finally:
        for w in writers.values():
            w.stop.set()
            w.go.set()
    try:
        diffs, _ = compare_replicas(world.topology, "Pub")
        assert not diffs, (diffs, done)
        for w in writers.values():
            assert w.expected, f"writer {w.who} wrote nothing"
            for who in ("P", "S", "G"):
                with connect(world.urls[who]) as r:
                    have = dict(r.query('SELECT "id", "v" FROM "W" WHERE "who" = ' + r.p, [w.who]))
                lost = {i: v for i, v in w.expected.items() if have.get(i) != v}
                assert not lost, (f"writes of {w.who} missing or stale at {who}",
                                  [(i, v, have.get(i)) for i, v in list(lost.items())[:5]], len(lost), done,
                                  [(c["conflict_type"], c["reason_text"], c["origin_datasource"], c["subscription"])
                                   for c in world.conflicts("P") if c["tablenick"] != 20][:5])
        for i, v in overridden.items():                  # the losing version, made the winner everywhere
            for who in ("P", "S", "G"):
                assert world.value(who, "K", i, "a") == v, (i, who, done)
        for r in locks.resources(world.topology, "setup", ["Pub"]):          # no lock left behind by a kill
            lock = dialect_for_url(r.url).agent_lock(r.url, r.key)
            assert lock.try_acquire(LockHolder.me("test")), f"{r.describe()} still held after the kills"
            lock.release()
    finally:
        dbs.drop()
