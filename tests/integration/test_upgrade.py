"""A topology published by the release before the tracking log upgrades on the next setup, and its
changes recorded by the old triggers (in the tracking metadata itself) all arrive.

The previous release is recreated in place: its tracking triggers (tests/support/previous_release,
the templates as that release shipped them) on every article at every replica, no MSmerge_pending,
merge metadata version 6.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparksync.dialects import connect
from sparksync.errors import MetadataVersionError
from sparksync.metadata import store
from sparksync.names import TableName
from sparksync.provision import setup
from tests.support.config import write_config
from tests.support.merge_topology import Topo
from tests.support.publishing import rows_of
from tests.support.upgrade import downgrade

pytestmark = pytest.mark.spark

@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_a_topology_of_the_previous_release_upgrades_and_loses_no_change(spark, dbs, tmp_path, pub_kind):
    t = Topo(spark, dbs, tmp_path, pub_kind, "sqlite", tables=["Item"], with_fk=False)
    for who in ("P", "S1", "S2", "S3", "S4"):
        downgrade(t.url(who))
    # changes recorded by the previous release's triggers, not merged yet
    t.sql("P", 'UPDATE "Item" SET "v" = \'P-old\' WHERE "id" = 1', 'DELETE FROM "Item" WHERE "id" = 2',
          'INSERT INTO "Item" ("id", "v", "n") VALUES (100, \'P-new\', 1)')
    t.sql("S1", 'UPDATE "Item" SET "v" = \'S1-old\' WHERE "id" = 3', 'DELETE FROM "Item" WHERE "id" = 4',
          'INSERT INTO "Item" ("id", "v", "n") VALUES (200, \'S1-new\', 1)')
    before = {who: _rowguids(t.url(who), 'SELECT "id", "rowguid" FROM "Item"') for who in ("P", "S1", "S2", "S3", "S4")}
    with connect(t.pub_url) as r:       # the old triggers wrote the metadata themselves; there is no log
        assert not r.dialect.metadata_table_exists(r, "MSmerge_pending")
    with pytest.raises(MetadataVersionError, match="setup"):
        t.merge()                          # refused loudly until setup upgrades it: nothing half-merged

    lines: list[str] = []
    setup(t.topology, lambda: spark, lines.append)
    assert any("change tracking upgraded" in x for x in lines), lines
    assert not any("WARNING" in x for x in lines), lines      # an upgrade is not a repair: nothing was missed
    for who in ("P", "S1", "S2", "S3", "S4"):
        with connect(t.url(who)) as r:
            assert store.metadata_version(r) == store.MERGE.version
            assert r.dialect.metadata_table_exists(r, "MSmerge_pending")
            # SQLite: the rowguid column publishing added left the table for its place beside it, every row
            # keeping its rowguid (the application's table is its own again)
            kept = r.reflect(r.dialect.resolve_name(TableName(None, "Item"))).column("rowguid") is not None
            assert kept == (r.dialect.capabilities.name != "sqlite"), who
            after = {int(k): str(g).lower() for k, g in r.query(f'SELECT "id", "rowguid" FROM {rows_of(r, "Item")} AS t')}
            assert after == before[who], who
    # and the new triggers record what changes after the upgrade
    t.sql("P", 'UPDATE "Item" SET "v" = \'P-after\' WHERE "id" = 5')
    t.sql("S1", 'UPDATE "Item" SET "v" = \'S1-after\' WHERE "id" = 6', 'DELETE FROM "Item" WHERE "id" = 7')

    summary = t.merge()
    assert summary.ok, summary
    for who in ("P", "S1", "S2", "S3", "S4"):
        assert t.value(who, "Item", 1) == "P-old" and t.value(who, "Item", 3) == "S1-old", who
        assert t.value(who, "Item", 100) == "P-new" and t.value(who, "Item", 200) == "S1-new", who
        assert t.value(who, "Item", 5) == "P-after" and t.value(who, "Item", 6) == "S1-after", who
        assert not any(t.exists(who, "Item", i) for i in (2, 4, 7)), who
    t.assert_converged()


def _rowguids(url: str, sql: str) -> dict:
    with connect(url) as r:
        return {int(k): str(g).lower() for k, g in r.query(sql)}


def test_a_rowguid_column_a_view_of_the_application_uses_stays_and_setup_says_why(spark, dbs, tmp_path):
    """SQLite cannot drop a column a view reads: that article keeps its rowguid column (nothing of it changed),
    `setup` names it and why, and it replicates as before."""
    t = Topo(spark, dbs, tmp_path, "sqlite", "sqlite", tables=["Item"], with_fk=False)
    for who in ("P", "S1", "S2", "S3", "S4"):
        downgrade(t.url(who))
    t.sql("P", 'CREATE VIEW "ItemGuids" AS SELECT "id", "rowguid" FROM "Item"')
    before = _rowguids(t.pub_url, 'SELECT "id", "rowguid" FROM "ItemGuids"')
    lines: list[str] = []
    setup(t.topology, lambda: spark, lines.append)
    said = [x for x in lines if "publisher" in x and "keeps its rowguid column" in x]
    assert said and "ItemGuids" in said[0], lines
    assert _rowguids(t.pub_url, 'SELECT "id", "rowguid" FROM "ItemGuids"') == before
    t.sql("P", 'UPDATE "Item" SET "v" = \'after\' WHERE "id" = 5',
          'INSERT INTO "Item" ("id", "v", "n") VALUES (300, \'new\', 1)')
    summary = t.merge()
    assert summary.ok, summary
    assert all(t.value(who, "Item", 5) == "after" and t.value(who, "Item", 300) == "new"
               for who in ("P", "S1", "S2", "S3", "S4"))
    t.assert_converged()


@pytest.mark.parametrize("killed_at", ["P", "S2"])
def test_a_setup_killed_inside_the_upgrade_leaves_the_earlier_release_whole_and_the_next_one_upgrades(
        spark, dbs, tmp_path, killed_at):
    """kill -9 after a replica's tracking was upgraded, before its transaction commits (the publisher's, or a
    subscriber's after the publisher and S1 committed): that replica is still the earlier release's (metadata,
    triggers, rowguid column), not half of each; the next setup upgrades it, and every change of before and
    after arrives."""
    t = Topo(spark, dbs, tmp_path, "sqlite", "sqlite", tables=["Item"], with_fk=False)
    old = {}
    for who in ("P", "S1", "S2", "S3", "S4"):
        downgrade(t.url(who))
        with connect(t.url(who)) as r:
            old[who] = store.metadata_version(r)
    t.sql("P", 'UPDATE "Item" SET "v" = \'P-old\' WHERE "id" = 1')
    t.sql("S2", 'UPDATE "Item" SET "v" = \'S2-old\' WHERE "id" = 3', 'DELETE FROM "Item" WHERE "id" = 4')
    before = {who: _rowguids(t.url(who), 'SELECT "id", "rowguid" FROM "Item"') for who in ("P", "S1", "S2", "S3", "S4")}

    fp = tmp_path / "failpoints"
    fp.write_text(f"upgrade.before_commit {killed_at} !kill\n", encoding="utf-8")
    env = {**os.environ, "SPARK_MASTER": "local[1]", "SPARKSYNC_FAILPOINTS": str(fp)}
    exe = Path(sys.executable).with_name("sparksync")
    killed = subprocess.run([str(exe), "setup", "-c", str(write_config(tmp_path, t.data))], capture_output=True,
                            text=True, env=env, timeout=300)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    committed = {"P": [], "S2": ["P", "S1"]}[killed_at]
    for who in ("P", "S1", "S2", "S3", "S4"):
        with connect(t.url(who)) as r:
            upgraded = who in committed
            assert store.metadata_version(r) == (store.MERGE.version if upgraded else old[who]), who
            kept = r.reflect(r.dialect.resolve_name(TableName(None, "Item"))).column("rowguid") is not None
            assert kept == (not upgraded), who        # the rowguid column left the table with the upgrade, or not

    lines: list[str] = []
    setup(t.topology, lambda: spark, lines.append)
    assert any("change tracking upgraded" in x for x in lines), lines
    for who in ("P", "S1", "S2", "S3", "S4"):
        with connect(t.url(who)) as r:
            assert store.metadata_version(r) == store.MERGE.version, who
            assert r.reflect(r.dialect.resolve_name(TableName(None, "Item"))).column("rowguid") is None, who
            after = {int(k): str(g).lower() for k, g in r.query(f'SELECT "id", "rowguid" FROM {rows_of(r, "Item")} AS t')}
            assert after == before[who], who
    t.sql("S2", 'UPDATE "Item" SET "v" = \'S2-after\' WHERE "id" = 6')
    summary = t.merge()
    assert summary.ok, summary
    for who in ("P", "S1", "S2", "S3", "S4"):
        assert t.value(who, "Item", 1) == "P-old" and t.value(who, "Item", 3) == "S2-old", who
        assert t.value(who, "Item", 6) == "S2-after" and not t.exists(who, "Item", 4), who
    t.assert_converged()
