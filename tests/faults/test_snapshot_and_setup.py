"""A damaged snapshot never initializes a subscriber, and setup or snapshot killed at any step recovers
(issue 9, case 1 and "broken operations").

The publisher's article has 102 rows. Subscriber A is initialized first; then the snapshot is damaged
(a Parquet file replaced by a valid one with half the rows, files deleted, a file added) and B is
added: setup fails B with a message naming the snapshot and the article, and leaves it uninitialized.
Then setup and snapshot are killed (SIGKILL) at each step and run again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sparksync.dialects import connect
from sparksync.errors import SparksyncError
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.metadata import store
from sparksync.provision import setup, snapshot
from sparksync.snapshot.manifest import current_snapshot
from sparksync.storage import Folder
from sparksync.topology import parse_topology
from tests.support.config import write_config
from tests.support.databases import Databases, databases

pytestmark = pytest.mark.spark
ROWS = 102


def make_publisher(url: str) -> None:
    with connect(url) as r:
        r.execute('CREATE TABLE "T" ("id" INTEGER PRIMARY KEY, "v" TEXT)')
        r.executemany('INSERT INTO "T" VALUES (?, ?)', [(i, f"v{i}") for i in range(1, ROWS + 1)])


class World:
    def __init__(self, spark, dbs: Databases):
        self.spark, self.tmp = spark, dbs.folder
        self.pub_url = dbs.url("sqlite", "pub")
        make_publisher(self.pub_url)
        self.sub_urls = {"A": dbs.url("sqlite", "a"), "B": dbs.url("postgresql", "b"), "C": dbs.url("sqlite", "c")}

    def data(self, subs: list[str]) -> dict:
        return {"publisher": {"name": "P", "database": self.pub_url, "snapshot_dir": str(self.tmp / "snap")},
                "publications": [{"name": "Pub", "articles": [{"table": "T"}]}],
                "subscriptions": [{"name": n, "publication": "Pub", "database": self.sub_urls[n]} for n in subs]}

    def topology(self, subs: list[str]):
        return parse_topology(self.data(subs), self.tmp)

    def cli(self, subs: list[str], *args: str, failpoint: str | None = None) -> subprocess.CompletedProcess:
        cfg = write_config(self.tmp, self.data(subs))
        env = {**os.environ, "SPARK_MASTER": "local[1]"}
        fp_file = self.tmp / "failpoints"
        if failpoint:
            fp_file.write_text(failpoint + "\n", encoding="utf-8")
            env["SPARKSYNC_FAILPOINTS"] = str(fp_file)
        else:
            env.pop("SPARKSYNC_FAILPOINTS", None)
        exe = Path(sys.executable).with_name("sparksync")
        return subprocess.run([str(exe), *args, "-c", str(cfg)], capture_output=True, text=True, env=env, timeout=300)

    def status_of(self, name: str) -> int | None:
        with connect(self.pub_url) as r:
            rows = store.select_rows(r, "sysmergesubscriptions", {"name": name})
            return rows[0]["status"] if rows else None

    def rows_at(self, name: str) -> int | None:
        with connect(self.sub_urls[name]) as r:
            if r.reflect(__import__("sparksync.names", fromlist=["TableName"]).TableName(None, "T")) is None:
                return None
            return r.scalar('SELECT count(*) FROM "T"')

    def article_folder(self) -> Path:
        snap_dir, manifest = current_snapshot(Folder(self.tmp / "snap"), "Pub")
        return snap_dir.local_path(manifest.articles[0].path)


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    with databases(tmp_path_factory.mktemp("snapdamage"), pg_admin_url) as dbs:
        w = World(spark, dbs)
        setup(w.topology(["A"]), lambda: spark)
        assert w.rows_at("A") == ROWS
        yield w


def _setup_fails(world, subs: list[str], *needles: str) -> str:
    with pytest.raises(SparksyncError) as e:
        setup(world.topology(subs), lambda: world.spark)
    message = e.value.message
    for n in needles:
        assert n in message, message
    return message


def fresh_snapshot(world) -> Path:
    snapshot(world.topology(["A"]), world.spark)
    return world.article_folder()


def test_a_file_replaced_by_one_with_half_the_rows_fails_the_subscription_and_changes_nothing(world):
    folder = fresh_snapshot(world)
    part = sorted(folder.glob("*.parquet"))[0]
    table = pq.read_table(part)
    pq.write_table(table.slice(0, table.num_rows // 2), part)       # a valid file, half the rows
    snap_id = current_snapshot(Folder(world.tmp / "snap"), "Pub")[1].snapshot_id
    _setup_fails(world, ["A", "B"], "B", snap_id, "article T", "changed")
    assert world.status_of("B") == 0                # registered, not initialized
    assert world.rows_at("B") is None               # nothing committed at the subscriber
    assert world.rows_at("A") == ROWS


def test_deleted_data_files_fail_the_subscription(world):
    for f in fresh_snapshot(world).glob("*.parquet"):
        f.unlink()
    _setup_fails(world, ["A", "B"], "B", "article T", "missing")
    assert world.status_of("B") == 0 and world.rows_at("B") is None


def test_an_extra_data_file_fails_the_subscription(world):
    folder = fresh_snapshot(world)
    part = sorted(folder.glob("*.parquet"))[0]
    pq.write_table(pq.read_table(part).slice(0, 0), folder / "part-extra.parquet")
    _setup_fails(world, ["A", "B"], "unexpected data file part-extra.parquet")


def test_a_new_snapshot_initializes_the_subscription_completely(world):
    snapshot(world.topology(["A", "B"]), world.spark)
    summary = setup(world.topology(["A", "B"]), lambda: world.spark)
    assert not summary.failures
    assert world.status_of("B") == 1 and world.rows_at("B") == ROWS


def test_setup_killed_after_the_subscriber_committed_is_finished_by_the_next_setup(world):
    killed = world.cli(["A", "B", "C"], "setup", failpoint="setup.before_finish Pub !kill")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert world.status_of("C") == 0 and world.rows_at("C") == ROWS     # the subscriber committed
    summary = setup(world.topology(["A", "B", "C"]), lambda: world.spark)    # in-process: no second JVM
    (c,) = [r for r in summary.initialized if r.subscription == "C"]
    assert not summary.failures and c.skipped and c.message == "already initialized"
    assert world.status_of("C") == 1
    # and it replicates both ways
    with connect(world.sub_urls["C"]) as r:
        r.execute('UPDATE "T" SET "v" = \'from C\' WHERE "id" = 5')
    summary = MergeAgent(world.topology(["A", "B", "C"]), world.spark).run(MergeOptions())
    assert summary.ok, [s.errors for s in summary.subscriptions]
    for url in (world.pub_url, world.sub_urls["A"], world.sub_urls["B"]):
        with connect(url) as r:
            assert r.scalar('SELECT "v" FROM "T" WHERE "id" = 5') == "from C"


def test_setup_killed_inside_the_subscribers_transaction_initializes_it_next_time(world, failpoints):
    world.sub_urls["D"] = f"sqlite:///{world.tmp / 'd.db'}"
    failpoints("init.before_commit D !kill")           # the Spark task's Python worker dies mid-transaction
    with pytest.raises(Exception, match="Python worker exited unexpectedly|crashed|EOFError|failed"):
        setup(world.topology(["A", "B", "C", "D"]), lambda: world.spark)
    assert world.status_of("D") == 0 and world.rows_at("D") is None
    summary = setup(world.topology(["A", "B", "C", "D"]), lambda: world.spark)
    assert not summary.failures and world.status_of("D") == 1 and world.rows_at("D") == ROWS


def test_a_killed_snapshot_leaves_no_folder_behind(world):
    subs = ["A", "B", "C", "D"]
    killed = world.cli(subs, "snapshot", failpoint="snapshot.before_manifest Pub !kill")
    assert killed.returncode == -9, killed.stderr[-2000:]
    pdir = world.tmp / "snap" / "Pub"
    folders = [d for d in pdir.iterdir() if d.is_dir()]
    assert len(folders) >= 2                         # the current snapshot and the partial one
    snapshot(world.topology(subs), world.spark)
    folders = [d.name for d in pdir.iterdir() if d.is_dir()]
    assert folders == [current_snapshot(Folder(world.tmp / "snap"), "Pub")[1].snapshot_id]
