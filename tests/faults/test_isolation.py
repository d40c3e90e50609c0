"""One broken subscriber never stops the others, and a damaged replica is named, not trusted (issue 9,
cases 4 and 5; a database that is not the one registered).

A publisher with subscribers on both databases. One subscriber's table is altered behind sparksync's
back, another's tracking trigger is dropped, a read fails half-way: each is refused with one line that
names it, the others complete, and the CLI exits non-zero without a traceback.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sparksync.cli.app import app
from sparksync.dialects import connect
from sparksync.status import gather_status
from tests.support.cluster import Cluster, session
from tests.support.config import write_config
from tests.support.databases import databases

pytestmark = pytest.mark.spark


def ddl(kind: str) -> list[str]:
    return ['CREATE TABLE "T" ("id" INTEGER PRIMARY KEY, "v" TEXT)' if kind == "sqlite"
            else 'CREATE TABLE "T" ("id" integer PRIMARY KEY, "v" text)'] + \
        [f"INSERT INTO \"T\" VALUES ({i}, 'v{i}')" for i in range(1, 11)]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory, pg_admin_url):
    with databases(tmp_path_factory.mktemp(f"iso-{request.param}"), pg_admin_url) as dbs:
        c = Cluster(spark, dbs, request.param,
                    {"SL": "sqlite", "SG": "postgresql", "BL": "sqlite", "BG": "postgresql"}, ddl, [{"table": "T"}])
        c.config = write_config(c.tmp, c.data)
        yield c


def _everyone_writes(world, round_: int) -> None:
    for i, who in enumerate(["SL", "SG", "BL", "BG"], start=1):
        world.sql(who, f"UPDATE \"T\" SET \"v\" = '{who}-{round_}' WHERE \"id\" = {i}")
    world.sql("P", f"UPDATE \"T\" SET \"v\" = 'P-{round_}' WHERE \"id\" = 9")


def test_a_subscriber_whose_table_was_altered_is_refused_the_others_sync(world):
    _everyone_writes(world, 1)
    world.sql("BL", 'ALTER TABLE "T" RENAME COLUMN "v" TO "v2"')
    world.sql("BG", 'ALTER TABLE "T" RENAME COLUMN "v" TO "v2"')
    result = CliRunner().invoke(app, ["merge", "-c", str(world.config)])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and "java" not in result.output.lower()
    summary = world.merge()
    for bad in ("BL", "BG"):
        errors = session(summary, bad).errors
        assert len(errors) == 1 and "damaged" in errors[0] and "missing column v" in errors[0], errors
    for who in ("P", "SL", "SG"):                     # the healthy ones exchanged everything
        assert [world.value(who, "T", i, "v") for i in (1, 2, 9)] == ["SL-1", "SG-1", "P-1"]
    world.sql("BL", 'ALTER TABLE "T" RENAME COLUMN "v2" TO "v"')
    world.sql("BG", 'ALTER TABLE "T" RENAME COLUMN "v2" TO "v"')
    assert world.merge().ok
    for who in ("P", "SL", "SG", "BL", "BG"):
        assert [world.value(who, "T", i, "v") for i in (1, 2, 3, 4, 9)] == ["SL-1", "SG-1", "BL-1", "BG-1", "P-1"]


def test_a_dropped_tracking_trigger_is_reported_by_status_and_merge_and_repaired_by_setup(world):
    from sparksync.provision import setup

    for who in ("BL", "BG"):
        with connect(world.urls[who]) as r:
            name = [t for t in r.dialect.list_merge_triggers(r, __import__("sparksync.names").names.TableName(None, "T"))
                    if t.startswith("MSmerge_upd")][0]
            r.execute(f'DROP TRIGGER "{name}"' + (' ON "T"' if world.kinds[who] == "postgresql" else ""))
    st = {s["name"]: s for s in gather_status(world.topology)["subscriptions"]}
    for who in ("BL", "BG"):
        assert st[who]["status"] == "damaged" and "MSmerge_upd" in " ".join(st[who]["problems"])
    assert st["SL"]["status"] == "active"
    result = CliRunner().invoke(app, ["status", "-c", str(world.config)])
    assert result.exit_code == 1 and "BL damaged" in " ".join(result.output.split())
    _everyone_writes(world, 2)
    summary = world.merge()
    assert "damaged" in session(summary, "BG").errors[0] and not session(summary, "SG").errors
    assert world.value("P", "T", 2, "v") == "SG-2"
    messages = []
    setup(world.topology, lambda: world.spark, messages.append)
    assert any("BL" in m and "re-created" in m and "not recorded" in m for m in messages), messages
    assert world.merge().ok
    assert gather_status(world.topology)["subscriptions"][2]["status"] == "active"


def test_a_read_that_fails_half_way_refuses_only_that_subscriptions_batches(world, failpoints):
    _everyone_writes(world, 3)
    article = "public.T" if world.kinds["P"] == "postgresql" else "T"
    failpoints(f"datasource.read SL/{article} changes")
    summary = world.merge()
    errors = session(summary, "SL").errors
    assert errors and "failpoint datasource.read" in errors[0]
    assert not session(summary, "SG").errors
    assert world.value("P", "T", 1, "v") == "SL-2"            # SL's change did not arrive (watermark kept)
    assert world.value("P", "T", 2, "v") == "SG-3"
    assert world.merge().ok
    assert world.value("P", "T", 1, "v") == "SL-3" and world.value("SG", "T", 1, "v") == "SL-3"


def test_a_subscription_pointing_at_the_publisher_database_is_named(world, tmp_path):
    from sparksync.errors import SparksyncError
    from sparksync.provision import setup
    from sparksync.topology import parse_topology

    url = world.urls["P"]
    other = (url.replace("127.0.0.1", "localhost") if world.kinds["P"] == "postgresql"
             else "sqlite:///" + str(tmp_path / ".." / tmp_path.name / ".." / world.urls["P"].split("/")[-1]))
    if world.kinds["P"] == "sqlite":
        other = "sqlite:////" + world.urls["P"][len("sqlite:///"):].lstrip("/").replace("/pub.db", "/./pub.db")
    data = {**world.data, "subscriptions": world.data["subscriptions"] + [
        {"name": "Mirror", "publication": "Pub", "database": other}]}
    with pytest.raises(SparksyncError, match="Mirror: its database is the publisher P itself"):
        setup(parse_topology(data, world.tmp), lambda: world.spark)
