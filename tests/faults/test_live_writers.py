"""Real clients writing while the merge agent runs continuously (issue 9, "lost updates").

Three writers, each through its database's own client and each owning one column of a column-tracked
article: psql at the PostgreSQL publisher writes ``a``, psql at a PostgreSQL subscriber writes ``b``,
the sqlite3 shell at a SQLite subscriber writes ``c``. They update random rows while merges run one
after another (``merge --continuous``). Every write is logged by its writer. When they stop, one
merge converges: every replica holds, in every row and column, the last value its writer wrote -
no write lost, whatever merged while it was being made.
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time

import pytest

from sparksync.validation.compare import compare_replicas
from tests.support.cluster import Cluster
from tests.support.databases import databases

pytestmark = pytest.mark.spark

ROWS = 12
WRITES = int(os.environ.get("SPARKSYNC_LIVE_WRITES", "150"))


def ddl(kind: str) -> list[str]:
    return ['CREATE TABLE "W" ("id" integer PRIMARY KEY, "a" text, "b" text, "c" text)'] + \
        [f"INSERT INTO \"W\" VALUES ({i}, 'a0', 'b0', 'c0')" for i in range(1, ROWS + 1)]


class Writer(threading.Thread):
    """One client process fed UPDATE statements, each its own transaction; logs (row, value) per write."""

    def __init__(self, world, who: str, column: str, seed: int):
        super().__init__(daemon=True)
        self.world, self.who, self.column = world, who, column
        self.rng = random.Random(seed)
        self.log: list[tuple[int, str]] = []
        self.error: str | None = None

    def run(self) -> None:
        w = self.world
        if w.kinds[self.who] == "sqlite":
            cmd = ["sqlite3", w.urls[self.who][len("sqlite:///"):]]
            first = ".timeout 60000\n"
        else:
            cmd = ["psql", w.urls[self.who], "-q", "-tA", "-v", "ON_ERROR_STOP=1"]
            first = ""
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdin.write(first)
        for n in range(WRITES):
            row, value = self.rng.randint(1, ROWS), f"{self.who}-{n}"
            proc.stdin.write(f"UPDATE \"W\" SET \"{self.column}\" = '{value}' WHERE \"id\" = {row};\n"
                             "SELECT 'done';\n")
            proc.stdin.flush()
            if proc.stdout.readline().strip() != "done":      # committed before the next write
                self.error = proc.stderr.read()
                return
            self.log.append((row, value))
            time.sleep(self.rng.uniform(0.01, 0.04))
        proc.stdin.close()
        if proc.wait(timeout=120) != 0:
            self.error = proc.stderr.read()


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    with databases(tmp_path_factory.mktemp("live"), pg_admin_url) as dbs:
        yield Cluster(spark, dbs, "postgresql", {"G": "postgresql", "L": "sqlite"},
                      ddl, [{"table": "W", "column_tracking": True}])


def test_no_write_of_any_writer_is_lost_while_merges_run(world):
    writers = [Writer(world, "P", "a", 1), Writer(world, "G", "b", 2), Writer(world, "L", "c", 3)]
    for w in writers:
        w.start()
    rounds, failed = 0, []
    while any(w.is_alive() for w in writers):          # merge --continuous, polling interval 0
        summary = world.merge()
        rounds += 1
        failed += [e for s in summary.subscriptions for e in s.errors]
    for w in writers:
        w.join()
        assert w.error is None, w.error
    assert rounds >= 2 and not failed, failed
    summary = world.merge()                             # the writes stopped: the next merge converges
    assert summary.ok and not summary.waiting
    diffs, _ = compare_replicas(world.topology, "Pub")
    assert not diffs, diffs
    for w in writers:
        last: dict[int, str] = {}
        for row, value in w.log:
            last[row] = value
        for who in ("P", "G", "L"):
            for row, value in last.items():
                assert world.value(who, "W", row, w.column) == value, (who, w.who, row)
    assert not world.conflicts("P")                     # disjoint columns: never a conflict
