"""Trust between replicas (issue 9, case 19), secrets (17) and what a merge reports (15).

* A subscriber that writes into its own ``MSmerge_genhistory`` that another subscriber already has a
  generation cannot make the publisher skip that subscriber.
* A subscriber that inflates the publisher's version in a row's lineage cannot make its change beat a
  newer publisher change silently: the publisher refuses it as a failed change that says why.
* ``conflict_logging = "both"`` logs at both ends; batch counts are per batch, not per article; failed
  changes are retried in chunks (a driver binds a limited number of parameters).
* No part of a password reaches any output, Spark's query plan included.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sparksync.cli.app import app
from sparksync.dialects import connect
from sparksync.merge.tracking import pending
from sparksync.metadata import store
from tests.support.cluster import Cluster, session
from tests.support.config import write_config
from tests.support.databases import Databases

pytestmark = pytest.mark.spark


def ddl(kind: str) -> list[str]:
    return ['CREATE TABLE "T" ("id" INTEGER PRIMARY KEY, "v" TEXT, "n" INTEGER)',
            'CREATE TABLE "U" ("id" INTEGER PRIMARY KEY, "v" TEXT)'] + \
        [f"INSERT INTO \"T\" VALUES ({i}, 'v{i}', {i})" for i in range(1, 21)] + \
        [f"INSERT INTO \"U\" VALUES ({i}, 'u{i}')" for i in range(1, 6)]


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    return Cluster(spark, Databases(tmp_path_factory.mktemp("trust")), "sqlite",
                   {"S1": {"kind": "sqlite", "subscriber_type": "global", "priority": 60}, "S2": "sqlite"}, ddl,
                   [{"table": "T"}, {"table": "U"}], {"conflict_logging": "both"})


def nickname(world, name: str) -> int:
    with connect(world.urls["P"]) as r:
        return store.select_rows(r, "sysmergesubscriptions", {"name": name})[0]["replnickname"]


def test_a_subscriber_cannot_claim_that_another_replica_has_its_changes(world):
    world.sql("S1", "UPDATE \"T\" SET \"v\" = 'hidden?' WHERE \"id\" = 1")
    s2 = nickname(world, "S2")
    with connect(world.urls["S1"]) as r:       # forge: "S2 already has my open generation"
        r.execute(f"UPDATE \"MSmerge_genhistory\" SET \"nicknames\" = json_insert(\"nicknames\", '$[#]', {s2}) "
                  "WHERE \"genstatus\" = 0")
    assert world.merge().ok
    assert world.value("S2", "T", 1, "v") == "hidden?"


def test_forged_lineage_cannot_beat_a_newer_publisher_change(world):
    world.sql("P", "UPDATE \"T\" SET \"v\" = 'newer at P' WHERE \"id\" = 2")
    world.sql("S1", "UPDATE \"T\" SET \"v\" = 'forged' WHERE \"id\" = 2")
    with connect(world.urls["S1"]) as r:       # forge: claim the publisher's version 999 was seen
        pending.flush(r)                        # (in the metadata sparksync wrote for the change)
        r.execute("UPDATE \"MSmerge_contents\" SET \"lineage\" = json_set(\"lineage\", '$.\"1\"', 999) WHERE \"rowguid\" "
                  "= (SELECT \"rowguid\" FROM \"T\" WHERE \"id\" = 2)")
    summary = world.merge(exchange="upload")
    assert summary.ok
    assert world.value("P", "T", 2, "v") == "newer at P"
    failed = [f for f in world.failed("P") if f["row_key"] == "id=2"]
    assert len(failed) == 1 and "claims version 999 of P" in failed[0]["reason"], failed


def test_conflicts_are_logged_at_both_ends_with_both(world):
    world.sql("P", "UPDATE \"T\" SET \"v\" = 'P wins' WHERE \"id\" = 3")
    world.sql("S1", "UPDATE \"T\" SET \"v\" = 'S1 loses' WHERE \"id\" = 3")
    before = {w: len(world.conflicts(w)) for w in ("P", "S1")}
    summary = world.merge()
    assert summary.ok
    assert len(world.conflicts("P")) == before["P"] + 1 and len(world.conflicts("S1")) == before["S1"] + 1
    assert [c["direction"] for c in summary.conflicts] == ["upload"]


def test_batches_are_counted_once_per_batch_not_per_article(world):
    world.sql("S2", "UPDATE \"T\" SET \"v\" = 'b' WHERE \"id\" = 4", "UPDATE \"U\" SET \"v\" = 'b' WHERE \"id\" = 4")
    summary = world.merge()
    s2 = session(summary, "S2")
    assert s2.total("upload").batches == 1 and set(s2.upload) == {"T", "U"}
    assert summary.to_dict()["subscriptions"][1]["batches"]["upload"] == 1


def test_failed_changes_are_retried_in_chunks(world, monkeypatch):
    from sparksync.merge.session import enumeration
    with connect(world.urls["S2"]) as r:
        for i in range(10, 17):
            r.execute(f"UPDATE \"T\" SET \"n\" = 'not a number {i}' WHERE \"id\" = {i}")
    assert world.merge().ok
    assert len([f for f in world.failed("P") if f["row_key"] in {f"id={i}" for i in range(10, 17)}]) == 7
    monkeypatch.setattr(enumeration, "RETRY_CHUNK", 3)
    assert world.merge().ok
    attempts = [f["attempts"] for f in world.failed("P") if f["row_key"] in {f"id={i}" for i in range(10, 17)}]
    assert attempts == [2] * 7
    with connect(world.urls["S2"]) as r:
        r.execute("UPDATE \"T\" SET \"n\" = \"id\" WHERE \"id\" BETWEEN 10 AND 16")
    assert world.merge().ok
    assert [world.value("P", "T", i, "n") for i in range(10, 17)] == list(range(10, 17))


def test_no_part_of_a_password_is_printed(world, tmp_path, pg_admin_url):
    data = {**world.data, "subscriptions": world.data["subscriptions"] + [{
        "name": "Remote", "publication": "Pub",
        "database": pg_admin_url.replace("://postgres@", "://postgres:sec@retPW@")}]}
    cfg = write_config(tmp_path, data)
    for command in (["status"], ["status", "--json"], ["setup"], ["merge", "--subscription", "Remote"],
                    ["conflicts"]):
        result = CliRunner().invoke(app, [*command, "-c", str(cfg)])
        out = result.output
        assert "sec@" not in out and "retPW" not in out and "@retPW" not in out, (command, out)
    assert "raw '@'" in CliRunner().invoke(app, ["setup", "-c", str(cfg)]).output


def test_the_spark_plan_of_a_change_read_holds_no_password(spark):
    from sparksync.merge.session.changes import change_read
    from sparksync.spark.reads import ReadPlan

    plan = ReadPlan([change_read("postgresql://u:Sup3rSecretX@127.0.0.1/db", "SELECT 1", [], [], "x",
                                 {"source": "S", "source_nick": 2, "tablenick": 1, "op": "delete"})])
    df = spark.read.format("sparksync").schema(plan.spark_schema()).option("plan", plan.to_json()).load()
    text = df._jdf.queryExecution().toString() + df._jdf.queryExecution().executedPlan().toString()
    assert "Sup3rSecretX" not in text
