"""Writes committed while a merge applies are never overwritten (issue 9, "lost updates").

A client (psql / the sqlite3 shell) holds a transaction that updated row 4 at the publisher while a
merge uploads a subscriber's change of the same row. The merge waits for the row; when the client
commits, the client's write is seen: with row tracking it is a conflict, logged, the publisher's
version winning; with column tracking both column edits are kept. Never the silent loss of the
committed write. Then, with a transaction held open, the merge says which generation waits for which
backend, and the first merge after the writer ends converges.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from sparksync.dialects import connect
from sparksync.status import gather_status

from .harness import Cluster, PgDatabases, session

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
    pg = PgDatabases(pg_admin_url)
    try:
        yield Cluster(spark, tmp_path_factory.mktemp(f"conc-{request.param}"), pg, request.param,
                      {"S": "sqlite", "G": "postgresql"}, ddl,
                      [{"table": "TR"}, {"table": "TC", "column_tracking": True}])
    finally:
        pg.drop()


class Holder:
    """A client session of the publisher's own command-line tool, holding a transaction open."""

    def __init__(self, world, statements: str):
        self.world = world
        kind = world.kinds["P"]
        if kind == "sqlite":
            cmd = ["sqlite3", world.urls["P"][len("sqlite:///"):]]
            begin = "BEGIN IMMEDIATE;"
        else:
            cmd = ["psql", world.urls["P"], "-q", "-tA", "-v", "ON_ERROR_STOP=1"]
            begin = "BEGIN;"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "PGAPPNAME": "holder"})
        self.proc.stdin.write(f"{begin}\n{statements}\nSELECT 'held';\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip().endswith("held")

    def commit(self) -> None:
        self.proc.stdin.write("COMMIT;\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0, self.proc.stderr.read()


def _merge_in_background(world, **kw):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("summary", world.merge(**kw)))
    t.start()
    return t, out


def _wait_until_blocked(world, seconds: float = 60) -> None:
    """Until the merge is waiting for the holder's lock (PostgreSQL), or a moment (SQLite's busy wait)."""
    if world.kinds["P"] == "sqlite":
        time.sleep(3)
        return
    deadline = time.time() + seconds
    with connect(world.urls["P"]) as r:
        while time.time() < deadline:
            if r.scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()"):
                return
            time.sleep(0.1)
    raise AssertionError("the merge never waited for the held row")


def test_a_write_committed_while_the_merge_waits_is_a_conflict_not_an_overwrite(world):
    world.sql("S", 'UPDATE "TR" SET "b" = \'sub-b\' WHERE "id" = 4', 'UPDATE "TC" SET "b" = \'sub-b\' WHERE "id" = 4')
    holder = Holder(world, 'UPDATE "TR" SET "a" = \'hq-a\' WHERE "id" = 4; UPDATE "TC" SET "a" = \'hq-a\' WHERE "id" = 4;')
    thread, out = _merge_in_background(world, exchange="upload")
    _wait_until_blocked(world)
    holder.commit()
    thread.join(timeout=120)
    summary = out["summary"]
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


def test_a_generation_held_by_an_open_transaction_is_named_and_the_next_merge_converges(world):
    from sparksync.merge.generations import make_generation

    if world.kinds["P"] == "sqlite":
        # One writer at a time: the merge waits for the open transaction, then sends its write.
        holder = Holder(world, 'UPDATE "TR" SET "a" = \'late\' WHERE "id" = 7;')
        thread, out = _merge_in_background(world)
        time.sleep(2)
        assert thread.is_alive()                           # waiting for the write lock
        holder.commit()
        thread.join(timeout=120)
        assert out["summary"].ok and not out["summary"].waiting
        assert world.value("S", "TR", 7, "a") == "late" and world.value("G", "TR", 7, "a") == "late"
        return

    world.sql("P", 'UPDATE "TR" SET "a" = \'early\' WHERE "id" = 8')
    with connect(world.urls["P"]) as r:
        make_generation(r, 1)                              # row 8's generation is closed and settled
    holder = Holder(world, 'UPDATE "TR" SET "a" = \'late\' WHERE "id" = 7;')
    summary = world.merge()
    assert summary.ok
    lines = summary.waiting.get("P", [])
    assert lines and "pid" in lines[0] and "idle in transaction" in lines[0] and "holder" in lines[0], lines
    assert world.value("S", "TR", 8, "a") == "early"      # what was committed went
    status = gather_status(world.topology)
    assert any("holder" in line for line in status["publisher"].get("waiting", []))
    holder.commit()
    assert world.merge().ok                                # writes stop -> the next merge converges
    for who in ("S", "G"):
        assert world.value(who, "TR", 7, "a") == "late"
    assert "waiting" not in gather_status(world.topology)["publisher"]
