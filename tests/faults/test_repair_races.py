"""``validate --repair`` against writes it never saw (issue 20, item 3).

A repair writes the publisher's version of the rows a checksum validation found different. Other
clients keep writing meanwhile; each window is held open with a failpoint (``!pause``) while a real
client (the ``sqlite3`` shell, ``psql``) writes:

* between the validation and the repair's write, an application write at the subscriber: the repair
  leaves that row (reported as skipped), repairs the others, and the next merge uploads the write;
* (PostgreSQL) inside the repair's transaction, before its rows are locked, a write held open and
  committed while the repair waits for the row: seen after the lock, not overwritten;
* between the repair's read of a publisher row and of its lineage, a publisher write: the subscriber
  gets a version whose values and lineage belong together, so the next merge brings the new one.

One topology per dialect (publisher and subscriber of that dialect); each test damages its own rows
(untracked, as a restore would) and ends with a merge that converges.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest

from sparksync.dialects import connect
from sparksync.merge.tracking import pending
from sparksync.merge.tracking.articles import agent_writes
from sparksync.validation.compare import compare_replicas
from sparksync.validation.repair import repair
from sparksync.validation.report import SKIPPED_PENDING
from sparksync.validation.subscriptions import validate
from tests.support.cluster import Cluster
from tests.support.config import write_config
from tests.support.databases import databases
from tests.support.publishing import rows_of

pytestmark = pytest.mark.spark

ROWS = 12


def ddl(kind: str) -> list[str]:
    out = ['CREATE TABLE "T" ("id" INTEGER PRIMARY KEY, "a" TEXT)' if kind == "sqlite"
           else 'CREATE TABLE "T" ("id" integer PRIMARY KEY, "a" text)']
    return out + [f"INSERT INTO \"T\" VALUES ({i}, 'a{i}')" for i in range(1, ROWS + 1)]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory, pg_admin_url):
    with databases(tmp_path_factory.mktemp(f"repair-{request.param}"), pg_admin_url) as dbs:
        yield Cluster(spark, dbs, request.param,
                      {"S": request.param}, ddl, [{"table": "T"}])


def damage(world, *ids: int) -> None:
    """Rows of S changed behind the triggers' back: nothing pending, only validation sees them."""
    with connect(world.urls["S"]) as r, r.transaction(), agent_writes(r):
        r.execute(f'UPDATE "T" SET "a" = \'damaged\' WHERE "id" IN ({", ".join(str(i) for i in ids)})')


def validated(world, *ids: int):
    report = validate(world.topology, lambda: world.spark, checksum=True)
    (s,) = report.subscriptions
    assert not s.pending and sorted(d.key for a in s.articles for d in a.differences) == \
        sorted(f"id={i}" for i in ids), s.to_dict()
    return report


def lineage(world, who: str, id_: int) -> dict:
    """The row's lineage ({} for a row never changed since it was published: no contents row)."""
    with connect(world.urls[who]) as r:
        pending.flush(r)
        guid = r.scalar(f'SELECT "rowguid" FROM {rows_of(r, "T")} AS t WHERE "id" = ' + r.p, [id_])
        raw = r.scalar(f"SELECT lineage FROM {r.meta('MSmerge_contents')} WHERE rowguid = {r.dialect.uuid_param()}",
                       [str(guid)])
    value = json.loads(raw) if isinstance(raw, str) else raw
    return {str(k): int(v) for k, v in (value or {}).items()}


class Repair(threading.Thread):
    """``repair`` in a background thread (it pauses at a failpoint while the test writes)."""

    def __init__(self, world, report):
        super().__init__(daemon=True)
        self.world, self.report = world, report
        self.result = self.error = None

    def run(self) -> None:
        try:
            self.result = repair(self.world.topology, self.report)
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def outcome(self):
        self.join(timeout=120)
        assert not self.is_alive(), "the repair did not finish"
        if self.error is not None:
            raise self.error
        (s,) = self.result.subscriptions
        return s


def converged(world) -> None:
    summary = world.merge()
    assert summary.ok, [s.errors for s in summary.subscriptions]
    diffs, _ = compare_replicas(world.topology, "Pub")
    assert diffs == []


def test_a_subscriber_write_between_validation_and_repair_survives_and_goes_up(world, failpoints):
    damage(world, 1, 2, 3)
    report = validated(world, 1, 2, 3)
    failpoints("repair.before_write S !pause")
    job = Repair(world, report)
    job.start()
    try:
        failpoints.wait_paused("repair.before_write", "S")
        # the application, through the database's own client: row 1 written, row 2 deleted
        world.shell("S", 'UPDATE "T" SET "a" = \'app\' WHERE "id" = 1;\nDELETE FROM "T" WHERE "id" = 2;\n')
    finally:
        failpoints.resume("repair.before_write", "S")
    s = job.outcome()
    assert world.value("S", "T", 1, "a") == "app"          # not overwritten
    assert not world.exists("S", "T", 2)                    # not brought back
    assert world.value("S", "T", 3, "a") == "a3"            # the rest repaired
    assert s.repaired == 1
    assert sorted((x.key, x.reason) for x in s.skipped) == [("id=1", SKIPPED_PENDING), ("id=2", SKIPPED_PENDING)]
    assert s.to_dict()["skipped"][0]["article"].split(".")[-1] == "T"      # public.T at PostgreSQL
    converged(world)                                        # the write and the delete went up
    assert world.value("P", "T", 1, "a") == "app" and not world.exists("P", "T", 2)


@pytest.mark.parametrize("world", ["postgresql"], indirect=True)   # SQLite: the repair's BEGIN IMMEDIATE excludes it
def test_a_subscriber_write_committed_while_the_repair_waits_for_the_row_is_not_overwritten(world, failpoints):
    damage(world, 4, 5)
    report = validated(world, 4, 5)
    failpoints("repair.before_lock S !pause")
    job = Repair(world, report)
    job.start()
    holder = None
    try:
        failpoints.wait_paused("repair.before_lock", "S")    # the repair's transaction is open
        holder = Holder(world.urls["S"], 'UPDATE "T" SET "a" = \'app\' WHERE "id" = 4;')
    finally:
        failpoints.resume("repair.before_lock", "S")
    assert holder is not None
    holder.wait_until_blocking()                            # the repair waits for row 4
    holder.commit()
    s = job.outcome()
    assert world.value("S", "T", 4, "a") == "app"           # not overwritten
    assert world.value("S", "T", 5, "a") == "a5"
    assert s.repaired == 1 and [(x.key, x.reason) for x in s.skipped] == [("id=4", SKIPPED_PENDING)]
    converged(world)
    assert world.value("P", "T", 4, "a") == "app"


def test_a_publisher_write_during_the_repairs_read_keeps_row_and_lineage_together(world, failpoints):
    damage(world, 6)
    report = validated(world, 6)
    old = ("a6", lineage(world, "P", 6))
    failpoints("repair.publisher_read S !pause")
    job = Repair(world, report)
    job.start()
    try:
        failpoints.wait_paused("repair.publisher_read", "S")
        world.shell("P", 'UPDATE "T" SET "a" = \'hq-new\' WHERE "id" = 6;\n')
    finally:
        failpoints.resume("repair.publisher_read", "S")
    new = ("hq-new", lineage(world, "P", 6))
    assert new[1] != old[1]
    s = job.outcome()
    got = (world.value("S", "T", 6, "a"), lineage(world, "S", 6))
    assert got in (old, new), f"values of one version with the lineage of another: {got}, versions {old} {new}"
    assert s.repaired == 1 and s.skipped == []
    converged(world)                                        # the newer version arrives
    assert world.value("S", "T", 6, "a") == "hq-new"


@pytest.mark.parametrize("world", ["sqlite"], indirect=True)       # the output is the same for every dialect
def test_the_cli_says_which_rows_it_left_and_why(world, failpoints, tmp_path):
    """``validate --repair --yes``: the row written meanwhile is named with its reason; the next merge
    and validation settle it."""
    from typer.testing import CliRunner

    from sparksync.cli.app import app

    cfg = write_config(tmp_path, world.data)
    damage(world, 7, 8)
    failpoints("repair.before_write S !pause")
    out = {}
    job = threading.Thread(target=lambda: out.setdefault("r", CliRunner().invoke(
        app, ["validate", "-c", str(cfg), "--repair", "--yes"])), daemon=True)
    job.start()
    try:
        failpoints.wait_paused("repair.before_write", "S")
        world.shell("S", 'UPDATE "T" SET "a" = \'app\' WHERE "id" = 7;\n')
    finally:
        failpoints.resume("repair.before_write", "S")
    job.join(timeout=120)
    assert not job.is_alive()
    result = out["r"]
    text = " ".join(result.output.split())
    assert "Traceback" not in text, result.output
    assert "repaired 1 row(s); left 1 row(s) as they are (the reason below); validated again:" in text, text
    assert f"S T: row id=7 left: {SKIPPED_PENDING}" in text, text
    assert "S has changes not delivered yet (1 to upload" in text and result.exit_code == 1, text
    assert world.value("S", "T", 7, "a") == "app" and world.value("S", "T", 8, "a") == "a8"
    converged(world)
    assert world.value("P", "T", 7, "a") == "app"


class Holder:
    """A psql session holding a transaction open at a PostgreSQL database."""

    def __init__(self, url: str, statements: str):
        self.url = url
        self.proc = subprocess.Popen(["psql", url, "-q", "-tA", "-v", "ON_ERROR_STOP=1"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PGAPPNAME": "holder"})
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"BEGIN;\n{statements}\nSELECT pg_backend_pid();\n")
        self.proc.stdin.flush()
        self.pid = int(self.proc.stdout.readline().strip())

    def wait_until_blocking(self, timeout: float = 60) -> None:
        """Until another backend waits for a lock this session holds (pg_blocking_pids)."""
        import time

        deadline = time.monotonic() + timeout
        with connect(self.url) as r:
            while time.monotonic() < deadline:
                if r.scalar("SELECT count(*) FROM pg_stat_activity WHERE " + r.p + " = ANY(pg_blocking_pids(pid))",
                            [self.pid]):
                    return
                time.sleep(0.02)
        raise AssertionError("nothing waited for the held row")

    def commit(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("COMMIT;\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0, self.proc.stderr.read() if self.proc.stderr else ""
