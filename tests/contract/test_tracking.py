"""Change tracking (seed 000) against real SQLite files and a real PostgreSQL server."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from sparksync.dialects import connect
from sparksync.errors import TrackingNotFlushed
from sparksync.failpoints import InjectedFault
from sparksync.merge.session.enumeration import plan_link
from sparksync.merge.tracking import pending
from sparksync.merge.tracking.articles import (
    agent_writes,
    delete_row_with_lineage,
    published_articles,
    write_row_with_lineage,
)
from sparksync.merge.tracking.generations import enumeration_bound, make_generation
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.schema import SCHEMA_VERSION
from sparksync.names import TableName
from tests.support.publishing import contents, make_tables, publish, rowguid_of, rowguids, tombstones

ARTICLES = [{"table": "Child"}, {"table": "Parent", "column_tracking": True}]


@pytest.fixture
def published(kind, dbs):
    url = dbs.url(kind, "pub")
    make_tables(url, kind)
    with connect(url) as r:
        r.execute('INSERT INTO "Parent" ("id", "name", "price") VALUES (1, \'one\', 1.5), (2, \'two\', 2.5)')
    res = publish(url, ARTICLES)
    return url, res


def test_publish_adds_rowguid_metadata_and_triggers(published, kind):
    url, res = published
    with connect(url) as r:
        assert store.metadata_version(r) == SCHEMA_VERSION
        parent = r.reflect(r.dialect.resolve_name(TableName.parse("Parent")))
        # PostgreSQL: a rowguid column added to the table; SQLite: kept beside it, keyed by the primary key (the
        # application's table stays its own)
        assert (parent.column("rowguid") is None) == (kind == "sqlite")
        guids = rowguids(r, "Parent")
        assert len(guids) == 2 and all(g is not None for g in guids) and len(set(map(str, guids))) == 2
        # time-ordered GUIDs in the UUIDv7 layout
        assert all(str(g)[14] == "7" for g in guids)
        # nicknames follow DRI: the referenced table gets the lower nickname
        nicks = res["nicknames"]
        keys = {k.split(".")[-1]: v for k, v in nicks.items()}
        assert keys["Parent"] < keys["Child"]
        for table in ("Parent", "Child"):
            trig = r.dialect.list_merge_triggers(r, r.dialect.resolve_name(TableName.parse(table)))
            assert len(trig) == (4 if kind == "sqlite" else 3)     # SQLite: a changed key takes its rowguid along
        # existing rows are not changes: nothing tracked yet
        assert contents(r) == [] and tombstones(r) == []
        arts = published_articles(r, res["pubid"])
        assert [a.processing_group for a in arts] == [1, 1]
        assert all(a.dri_related == 1 for a in arts)


def test_publish_is_idempotent(published):
    url, res = published
    again = publish(url, ARTICLES)
    assert again["pubid"] == res["pubid"]
    assert again["created_articles"] == []
    assert again["nicknames"] == res["nicknames"]
    with connect(url) as r:
        assert len(store.select_rows(r, "sysmergearticles")) == 2
        assert len(rowguids(r, "Parent")) == 2


def test_insert_update_delete_are_tracked(published):
    url, res = published
    pnick = min(res["nicknames"].values())
    with connect(url) as r:
        r.execute('INSERT INTO "Parent" ("id", "name") VALUES (3, \'three\')')
        (c,) = contents(r, pnick)          # the flush gives a row inserted without a rowguid its rowguid
        g3 = rowguid_of(r, "Parent", 3)
        inserted = {col: [1, 1] for col in ("id", "name", "price", "doc")}   # an insert stamps every column
        assert c["rowguid"] == g3 and c["lineage"] == {"1": 1} and c["colv"] == inserted
        for i in range(3):
            r.execute(f'UPDATE "Parent" SET "name" = \'v{i}\' WHERE "id" = 3')
        (c,) = contents(r, pnick)  # later updates update the same contents row, one version per flush
        assert c["lineage"] == {"1": 2}
        assert c["colv"] == {**inserted, "name": [1, 2]}
        r.execute('UPDATE "Parent" SET "price" = 9 WHERE "id" = 3')
        r.execute('UPDATE "Parent" SET "doc" = \'{"b": 2}\' WHERE "id" = 3')
        (c,) = contents(r, pnick)          # the columns of every update since the last flush
        assert c["colv"] == {**inserted, "name": [1, 2], "price": [1, 3], "doc": [1, 3]}
        # an update that changes nothing is not a change
        r.execute('UPDATE "Parent" SET "name" = "name" WHERE "id" = 3')
        assert contents(r, pnick)[0]["lineage"] == {"1": 3}
        r.execute('UPDATE "Parent" SET "name" = \'gone soon\' WHERE "id" = 3')
        r.execute('DELETE FROM "Parent" WHERE "id" = 3')
        assert contents(r, pnick) == []
        (t,) = tombstones(r, pnick)
        assert t["rowguid"] == g3 and t["type"] == 1 and t["lineage"] == {"1": 4}
        open_g = r.dialect.current_open_generation(r)
        assert t["generation"] == open_g


def test_row_tracking_has_no_column_versions(published):
    url, res = published
    cnick = max(res["nicknames"].values())
    with connect(url) as r:
        r.execute('INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (1, 1, 5)')
        r.execute('UPDATE "Child" SET "qty" = 6 WHERE "id" = 1')
        (c,) = contents(r, cnick)           # inserted and updated since the last flush: one version
        assert c["colv"] is None and c["lineage"] == {"1": 1}
        r.execute('UPDATE "Child" SET "qty" = 7 WHERE "id" = 1')
        (c,) = contents(r, cnick)
        assert c["colv"] is None and c["lineage"] == {"1": 2}


def test_bulk_statement_is_tracked_row_by_row(published):
    url, res = published
    cnick = max(res["nicknames"].values())
    with connect(url) as r:
        r.executemany(f'INSERT INTO "Child" ("id", "parent_id", "qty") VALUES ({r.p}, 1, {r.p})',
                      [(i, i) for i in range(100, 400)])
        assert len(contents(r, cnick)) == 300
        r.execute('UPDATE "Child" SET "qty" = "qty" + 1 WHERE "id" >= 200')
        rows = contents(r, cnick)
        assert len(rows) == 300
        assert sum(1 for x in rows if x["lineage"] == {"1": 2}) == 200


def test_agent_writes_carry_their_lineage_and_do_not_echo(published):
    url, res = published
    with connect(url) as r:
        art = [tracked_article(a) for a in published_articles(r, res["pubid"]) if a.source_table == "Parent"][0]
        guid = str(uuid.uuid4())
        with r.transaction():
            pending.flush(r)                    # as the apply does before it writes
            with agent_writes(r):
                op = write_row_with_lineage(r, art, {"rowguid": guid, "id": 50, "name": "from S", "price": 3,
                                                     "doc": '{"a": 1}'}, {"7": 3, "1": 1}, generation=1,
                                            colv={"name": [7, 3]})
        assert op == "insert"
        (c,) = contents(r, art.nickname)
        assert c["rowguid"] == guid and c["lineage"] == {"7": 3, "1": 1} and c["colv"] == {"name": [7, 3]}
        assert r.scalar('SELECT "name" FROM "Parent" WHERE "id" = 50') == "from S"
        with r.transaction():
            with agent_writes(r):
                assert write_row_with_lineage(r, art, {"rowguid": guid, "id": 50, "name": "again", "price": 3,
                                                       "doc": None}, {"7": 4, "1": 1}, generation=1) == "update"
        assert contents(r, art.nickname)[0]["lineage"] == {"7": 4, "1": 1}
        # the triggers track ordinary DML again after the agent's transaction
        r.execute('UPDATE "Parent" SET "name" = \'local\' WHERE "id" = 50')
        assert contents(r, art.nickname)[0]["lineage"] == {"7": 4, "1": 5}
        with r.transaction():
            with agent_writes(r):
                assert delete_row_with_lineage(r, art, guid, {"7": 5, "1": 5}, generation=1)
        assert contents(r, art.nickname) == []
        (t,) = tombstones(r, art.nickname)
        assert t["lineage"] == {"7": 5, "1": 5}


def test_agent_write_with_taken_primary_key_is_a_failed_change(published):
    from sparksync.errors import ConstraintViolation

    url, res = published
    with connect(url) as r:
        art = [tracked_article(a) for a in published_articles(r, res["pubid"]) if a.source_table == "Parent"][0]
        with pytest.raises(ConstraintViolation) as e:
            with r.transaction():
                with agent_writes(r):
                    write_row_with_lineage(r, art, {"rowguid": str(uuid.uuid4()), "id": 1, "name": "dup"},
                                           {"9": 1}, generation=1)
        assert e.value.kind == "primary_key"
        assert r.scalar('SELECT "name" FROM "Parent" WHERE "id" = 1') == "one"


def test_dml_from_the_command_line_clients_is_tracked(published, kind):
    url, res = published
    pnick = min(res["nicknames"].values())
    sql = ('INSERT INTO "Parent" ("id", "name") VALUES (70, \'shell\');\n'
           'UPDATE "Parent" SET "name" = \'shell2\' WHERE "id" = 1;\n'
           'DELETE FROM "Parent" WHERE "id" = 2;\n')
    if kind == "sqlite":
        exe = shutil.which("sqlite3")
        assert exe, "the sqlite3 shell is required (scripts/ensure-services installs it)"
        subprocess.run([exe, url.removeprefix("sqlite:///")], input=sql, text=True, check=True)
    else:
        exe = shutil.which("psql")
        assert exe, "psql is required"
        subprocess.run([exe, url, "-v", "ON_ERROR_STOP=1", "-q"], input=sql, text=True, check=True)
    with connect(url) as r:
        assert len(contents(r, pnick)) == 2
        assert len(tombstones(r, pnick)) == 1


def test_make_generation_closes_whole_and_the_enumeration_cuts_it_by_key(kind, dbs):
    """A generation bigger than the leveling threshold is closed whole (no change is written again) and
    enumerated in batches of at most that many changes, cut by (tablenick, rowguid): every change of it
    in exactly one batch, upserts and deletes alike."""
    url = dbs.url(kind, "lvl")
    make_tables(url, kind)
    publish(url, [{"table": "Parent"}], generation_leveling_threshold=10)
    with connect(url) as r:
        g0 = r.dialect.current_open_generation(r)
        r.executemany(f'INSERT INTO "Parent" ("id", "name") VALUES ({r.p}, {r.p})', [(i, f"n{i}") for i in range(35)])
        pending.flush(r)                 # the inserts are recorded: their deletes are changes too
        r.execute('DELETE FROM "Parent" WHERE "id" < 5')
        res = make_generation(r, 1)
        assert res.closed == [g0] and res.changes == 35
        gens = {g["generation"]: g for g in store.select_rows(r, "MSmerge_genhistory")}
        assert gens[g0]["genstatus"] == 1 and gens[g0]["changecount"] == 35
        assert res.open_generation > g0 and gens[res.open_generation]["genstatus"] == 0
        assert {c["generation"] for c in contents(r)} | {t["generation"] for t in tombstones(r)} == {g0}
        # 35 changes at 10 a unit, one unit a batch: 4 batches, the generation cut by key between them
        bound = enumeration_bound(r)
        plan = plan_link(r, pubid_of(r), "P", 1, 99, 0, g0 - 1, bound, 1, None, threshold=10)
        assert len(plan.batches) == 4 and plan.where == {}
        assert [x.seq for x in plan.ranges] == [0, 1, 2, 3]
        assert [b.hi for b in plan.batches][:-1] == [g0 - 1] * 3 and plan.batches[-1].hi == bound
        everything = sorted([(c["tablenick"], str(c["rowguid"])) for c in contents(r)]
                            + [(t["tablenick"], str(t["rowguid"])) for t in tombstones(r)])
        parts = [[k for k in everything if (x.after is None or k > x.after) and (x.upto is None or k <= x.upto)]
                 for x in plan.ranges]
        assert [len(p) for p in parts] == [10, 10, 10, 5] and sum(parts, []) == everything
        # nothing new: nothing to close
        again = make_generation(r, 1)
        assert again.closed == [] and again.open_generation == res.open_generation
        r.execute('UPDATE "Parent" SET "name" = \'x\' WHERE "id" = 10')
        pending.flush(r)
        assert any(c["generation"] == res.open_generation for c in contents(r))


def test_make_generation_levels_a_web_devices_generation_by_renumbering(kind, dbs):
    """A web device uploads whole generations per request: its big generation is renumbered into
    generations of at most ``level`` changes when it is closed (SQL Server's leveling)."""
    url = dbs.url(kind, "lvl_device")
    make_tables(url, kind)
    publish(url, [{"table": "Parent"}])
    with connect(url) as r:
        g0 = r.dialect.current_open_generation(r)
        r.executemany(f'INSERT INTO "Parent" ("id", "name") VALUES ({r.p}, {r.p})', [(i, f"n{i}") for i in range(35)])
        pending.flush(r)
        r.execute('DELETE FROM "Parent" WHERE "id" < 5')
        res = make_generation(r, 1, level=10)
        # 30 contents + 5 tombstones -> 3 + 1 generations of at most 10 changes
        assert len(res.closed) == 4 and res.closed[0] == g0
        gens = {g["generation"]: g for g in store.select_rows(r, "MSmerge_genhistory")}
        assert all(gens[g]["genstatus"] == 1 and gens[g]["changecount"] <= 10 for g in res.closed)
        assert sum(gens[g]["changecount"] for g in res.closed) == 35
        assert res.open_generation > max(res.closed)
        used = {c["generation"] for c in contents(r)} | {t["generation"] for t in tombstones(r)}
        assert used <= set(res.closed)


def pubid_of(r) -> str:
    return str(store.select_rows(r, "sysmergepublications")[0]["pubid"])


def test_metadata_install_is_idempotent_and_versioned(kind, dbs):
    from sparksync.errors import MetadataVersionError

    url = dbs.url(kind, "meta")
    with connect(url) as r:
        with r.transaction():
            assert store.install_metadata(r) == SCHEMA_VERSION
        with r.transaction():
            assert store.install_metadata(r) == SCHEMA_VERSION
        store.update_rows(r, "sparksync_metadata_version", {"version": SCHEMA_VERSION + 1}, {"id": 1})
        with pytest.raises(MetadataVersionError, match="newer"):
            with r.transaction():
                store.install_metadata(r)


def test_older_metadata_is_refused_until_setup_upgrades_it(kind, dbs):
    """Version 1 had no MSmerge_articlehistory.duration: the agent refuses it with a clear message,
    upgrade_metadata (run by setup) adds the column and moves the version, once."""
    from sparksync.errors import MetadataVersionError

    url = dbs.url(kind, "upgrade")
    with connect(url) as r:
        with r.transaction():
            store.install_metadata(r)
        r.execute(f"ALTER TABLE {r.meta('MSmerge_articlehistory')} DROP COLUMN duration")
        for column in ("row_key", "column_name", "value"):      # version 3's
            r.execute(f"ALTER TABLE {r.meta('MSmerge_failed_changes')} DROP COLUMN {column}")
        for table, columns in (("sysmergepublications", ("partitions_evaluated", "use_partition_groups")),  # v4
                               ("sysmergearticles", ("filter_clause", "join_filters", "partition_options")),
                               ("sysmergesubscriptions", ("login", "partition_id")),
                               ("MSmerge_articlehistory", ("removed",)),
                               ("MSmerge_conflicts_info", ("resolution", "resolved_at")),
                               ("MSmerge_replica", ("max_nickname",)),
                               ("sysmergepublications", ("cleanup_generation", "schema_version")),   # v5
                               ("sysmergearticles", ("rowguid_keyed",))):                             # v10
            for column in columns:
                r.execute(f"ALTER TABLE {r.meta(table)} DROP COLUMN {column}")
        for table in ("MSmerge_partition_groups", "MSmerge_current_partition_mappings",
                      "MSmerge_past_partition_mappings", "MSmerge_partition_changes", "sysmergeschemachange"):
            r.execute(f"DROP TABLE {r.meta(table)}")
        store.update_rows(r, "sparksync_metadata_version", {"version": 1}, {"id": 1})
        with pytest.raises(MetadataVersionError, match="older .* run 'sparksync setup'"):
            store.require_metadata(r)
        assert store.upgrade_metadata(r) is True
        assert store.metadata_version(r) == SCHEMA_VERSION
        store.require_metadata(r)
        store.insert_row(r, "MSmerge_articlehistory", {
            "session_id": store.new_guid(), "subscription": "S", "tablenick": 10, "article": "T", "direction": "upload",
            "inserts": 1, "updates": 0, "deletes": 0, "conflicts": 0, "retries": 0, "failed": 0, "duration": 0.5})
        store.insert_row(r, "MSmerge_failed_changes", {
            "tablenick": 10, "rowguid": store.new_guid(), "source_nickname": 2, "conflict_type": 5, "reason": "r",
            "attempts": 1, "first_time": store.utcnow(), "last_time": store.utcnow(), "row_key": "id=1",
            "column_name": "c", "value": "'x'"})
        assert store.select_rows(r, "MSmerge_partition_groups") == []
        assert store.upgrade_metadata(r) is False


def test_the_tracking_metadata_is_refused_to_a_connection_that_never_flushed(published):
    """The one choke point: every read or write of MSmerge_contents / MSmerge_tombstone names them through
    Replica.meta, which refuses a connection that has not flushed the tracking log; after a flush the
    change logged a moment ago is there."""
    url, res = published
    pnick = min(res["nicknames"].values())
    with connect(url) as r:
        r.execute('INSERT INTO "Parent" ("id", "name") VALUES (77, \'logged\')')
        with pytest.raises(TrackingNotFlushed, match="MSmerge_contents"):
            store.select_rows(r, "MSmerge_contents")
        with pytest.raises(TrackingNotFlushed, match="MSmerge_tombstone"):
            r.meta("MSmerge_tombstone")
        assert r.scalar(f"SELECT count(*) FROM {r.dialect.metadata_table_sql('MSmerge_pending')}") == (
            0 if url.startswith("sqlite") else 1)      # SQLite: a row inserted without a rowguid needs no entry
        assert pending.flush(r) == 1
        assert [c["rowguid"] for c in contents(r, pnick)] == [rowguid_of(r, "Parent", 77)]


def test_status_counts_what_the_log_holds_without_flushing_it(published):
    url, res = published
    with connect(url) as r:
        r.execute('INSERT INTO "Parent" ("id", "name") VALUES (78, \'a\'), (79, \'b\')')
        r.execute('UPDATE "Parent" SET "name" = \'c\' WHERE "id" = 1')
        nicks = list(res["nicknames"].values())
        assert pending.count(r, nicks) == 3           # read-only: the log is still there
        assert pending.flush(r) >= 1
        assert pending.count(r, nicks) == 0


def test_a_flush_that_dies_midway_leaves_the_log_whole_for_the_next(published, failpoints):
    """A flush is one transaction: killed after it wrote some metadata (the failpoint raises there, as a
    crash would end it), nothing of it stays and the log still holds every entry; the next flush
    records each change once."""
    url, res = published
    pnick, cnick = sorted(res["nicknames"].values())
    with connect(url) as r:
        r.execute('UPDATE "Parent" SET "name" = \'p\' WHERE "id" = 1')
        r.execute('INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (9, 1, 1)')
        failpoints(f"tracking.flush {r.label}")
        with pytest.raises(InjectedFault):
            pending.flush(r)
    with connect(url) as r:
        assert pending.count(r, [pnick, cnick]) == 2                  # read-only: both still to be flushed
        assert pending.flush(r) == 2
        assert [c["lineage"] for c in contents(r, pnick)] == [{"1": 1}]
        assert [c["lineage"] for c in contents(r, cnick)] == [{"1": 1}]
