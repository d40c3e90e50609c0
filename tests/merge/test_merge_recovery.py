"""Crashes between and inside generation batches lose nothing and apply nothing twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparksync.dialects import connect
from sparksync.merge.tracking.generations import make_generation
from sparksync.metadata import store
from tests.support.cluster import Cluster
from tests.support.config import write_config
from tests.support.merge_topology import Topo

pytestmark = pytest.mark.spark


@pytest.fixture(params=[("sqlite", "sqlite"), ("postgresql", "postgresql")], ids=["sqlite", "postgresql"])
def topo(request, spark, dbs, tmp_path):
    if "postgresql" in request.param:
        request.getfixturevalue("pg_admin_url")
    return Topo(spark, dbs, tmp_path, *request.param, tables=["Item"], with_fk=False,
                publication={"generation_leveling_threshold": LEVEL})


LEVEL = 5       # a generation of more changes is enumerated in batches cut by key


def three_generations(t: Topo) -> None:
    """Three publisher generations, each updating rows 1..3 of Item and inserting one row."""
    for g in range(3):
        t.sql("P", 'UPDATE "Item" SET "n" = "n" + 1 WHERE "id" <= 3',
              f'INSERT INTO "Item" ("id", "v", "n") VALUES ({500 + g}, \'g{g}\', 0)')
        with connect(t.pub_url) as r:
            make_generation(r, 1)


def downloaded(summary, name: str) -> tuple[int, int]:
    s = next(x for x in summary.subscriptions if x.subscription == name)
    d = s.total("download")
    return d.inserts, d.updates


def test_crash_inside_a_batch_rolls_it_back(topo, failpoints):
    t = topo
    three_generations(t)
    failpoints("apply.before_commit S1:0")
    first = t.merge(download_generations_per_batch=1)
    s1 = next(s for s in first.subscriptions if s.subscription == "S1")
    assert s1.errors and "failpoint" in s1.errors[0]
    assert t.value("S1", "Item", 1, "n") == 10 and not t.exists("S1", "Item", 500)   # nothing of the batch
    assert t.value("S2", "Item", 1, "n") == 13                                       # others went on
    second = t.merge(download_generations_per_batch=1)
    assert second.ok
    assert downloaded(second, "S1") == (3, 3)   # each generation's changes exactly once, in 3 batches
    t.assert_converged()


def test_crash_between_batches_resumes_after_the_last_committed_one(topo, failpoints):
    t = topo
    three_generations(t)
    failpoints("apply.after_commit S2:0")
    first = t.merge(download_generations_per_batch=1)
    s2 = next(s for s in first.subscriptions if s.subscription == "S2")
    assert s2.errors and "failpoint" in s2.errors[0]
    # batch 0 (the first generation: row 500) committed before the crash; rows 1..3 were last changed
    # in the third generation, so they travel in batch 2
    assert t.exists("S2", "Item", 500) and not t.exists("S2", "Item", 501)
    second = t.merge(download_generations_per_batch=1)
    assert second.ok
    assert downloaded(second, "S2") == (2, 3)   # batches 1 and 2 only: batch 0 is not applied again
    t.assert_converged()


def test_crash_before_the_senders_watermark_sends_again_and_applies_nothing_twice(topo, failpoints):
    t = topo
    t.sql("S3", 'UPDATE "Item" SET "v" = \'S3\' WHERE "id" = 9')
    failpoints("agent.before_sender_watermark S3")
    with pytest.raises(Exception, match="failpoint"):
        t.merge(exchange="upload")
    assert t.value("P", "Item", 9) == "S3"      # the publisher has it and its watermark says so
    again = t.merge()
    s3 = next(s for s in again.subscriptions if s.subscription == "S3")
    up = s3.total("upload")
    assert (up.inserts, up.updates, up.conflicts) == (0, 0, 0)     # re-sent, recognized, not applied twice
    t.assert_converged()
    assert t.everywhere("Item", 9) == {"S3"}


def one_big_generation(t: Topo) -> None:
    """One publisher generation of 23 changes (20 updates, 3 inserts): 5 units of ``LEVEL`` changes."""
    t.sql("P", 'UPDATE "Item" SET "n" = "n" + 1',
          *[f'INSERT INTO "Item" ("id", "v", "n") VALUES ({600 + i}, \'b{i}\', 11)' for i in range(3)])
    with connect(t.pub_url) as r:
        make_generation(r, 1)


def received(t: Topo, who: str) -> int:
    """How many of ``one_big_generation``'s changes ``who`` has."""
    with connect(t.url(who)) as r:
        return int(r.scalar('SELECT count(*) FROM "Item" WHERE "n" = 11'))


@pytest.mark.parametrize("driver_round_changes", [None, 0], ids=["in-process", "spark"])
def test_a_generation_cut_by_key_crash_between_its_batches(topo, failpoints, driver_round_changes):
    """A generation bigger than a batch goes in batches cut by key (10, 10, 3 changes); a crash after
    the first leaves the watermark before the generation, and the next merge brings the rest, the
    first part recognized, nothing applied twice."""
    t = topo
    one_big_generation(t)
    failpoints("apply.after_commit S2:0")
    first = t.merge(download_generations_per_batch=2, driver_round_changes=driver_round_changes)
    s1 = next(s for s in first.subscriptions if s.subscription == "S1")
    s2 = next(s for s in first.subscriptions if s.subscription == "S2")
    assert s2.errors and "failpoint" in s2.errors[0]
    assert s1.ok and s1.batches["download"] == 3 and downloaded(first, "S1") == (3, 20)
    assert received(t, "S1") == 23 and received(t, "S2") == 10
    second = t.merge(download_generations_per_batch=2, driver_round_changes=driver_round_changes)
    assert second.ok
    assert sum(downloaded(second, "S2")) == 13 and downloaded(second, "S1") == (0, 0)
    t.assert_converged()


def test_a_generation_cut_by_key_crash_inside_its_second_batch(topo, failpoints):
    t = topo
    one_big_generation(t)
    failpoints("apply.before_commit S1:1")
    t.merge(download_generations_per_batch=2)
    assert received(t, "S1") == 10 and received(t, "S3") == 23
    second = t.merge(download_generations_per_batch=2)
    assert second.ok and sum(downloaded(second, "S1")) == 13
    t.assert_converged()


def test_batches_committed_by_a_lost_task_attempt_are_counted_by_the_attempt_spark_runs_again(
        spark, dbs, failpoints):
    """The apply task's process is killed right after a batch commits (an executor lost), twice: Spark runs
    the task again each time (``local[2,3]``: a task may fail twice), and the attempt that finds a batch
    applied reports what the lost attempt applied. Batch 0 is the first part of a generation cut by key
    (the watermark stays before the generation: its changes are recognized by their lineage), batch 1 its
    last part (the watermark covers it). The session counts every change once, as applied."""
    c = Cluster(spark, dbs, "sqlite", {"S1": "sqlite"}, lambda kind: [
        'CREATE TABLE "Item" ("id" INTEGER PRIMARY KEY, "n" INTEGER)',
        *[f'INSERT INTO "Item" VALUES ({i}, 0)' for i in range(1, 21)]], [{"table": "Item"}],
        publication={"generation_leveling_threshold": LEVEL})
    for stmts in (['UPDATE "Item" SET "n" = "n" + 1 WHERE "id" <= 10'], ['UPDATE "Item" SET "n" = "n" + 1 WHERE "id" > 10'],
                  [f'INSERT INTO "Item" ("id", "n") VALUES ({700 + i}, 0)' for i in range(LEVEL)]):
        c.sql("P", *stmts)
        with connect(c.urls["P"]) as r:
            make_generation(r, 1)     # 10 updates, 10 updates, 5 inserts: batches of 5 (the first two cut by key)
    failpoints("apply.after_commit S1:0 !kill", "apply.after_commit S1:1 !kill")
    cfg = write_config(dbs.folder, {**c.data, "spark": {"master": "local[2,3]", "driver_round_changes": 0}})
    env = {k: v for k, v in os.environ.items() if k != "SPARK_MASTER"}
    run = subprocess.run([str(Path(sys.executable).with_name("sparksync")), "merge", "--json", "--exchange-type",
                          "download", "--download-generations-per-batch", "1", "-c", str(cfg)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert Path(os.environ["SPARKSYNC_FAILPOINTS"]).read_text(encoding="utf-8").strip() == ""   # both fired
    summary = json.loads(run.stdout)
    (s1,) = summary["subscriptions"]
    got = s1["download"]["Item"]
    assert (got["inserts"], got["updates"], got["skipped"], s1["batches"]["download"]) == (LEVEL, 20, 0, 5), s1
    with connect(c.urls["P"]) as r:
        (row,) = store.select_rows(r, "MSmerge_sessions", {"session_id": summary["session_id"]})
        published = r.query('SELECT "id", "n" FROM "Item" ORDER BY "id"')
    assert (row["download_inserts"], row["download_updates"]) == (LEVEL, 20)
    with connect(c.urls["S1"]) as r:
        assert r.query('SELECT "id", "n" FROM "Item" ORDER BY "id"') == published
