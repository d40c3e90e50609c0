"""SQLite keeps the rowguids publishing adds beside the table, keyed by its primary key (merge/tracking/identity.py):
the application's table stays its own, a write pays one append to its article's log, and the flush gives a new row
its rowguid without rewriting it. What that key brings, each against a real SQLite file: a key deleted and inserted
again is a new row; a changed key keeps its row's rowguid; VACUUM, a dump restored, a WITHOUT ROWID table and a
composite key change nothing; INSERT OR REPLACE over a row keeps its rowguid."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest

from sparksync.dialects import connect
from sparksync.merge.session.remote.subscriber import unkeyed, upgrade
from sparksync.merge.tracking import pending
from sparksync.merge.tracking.articles import install_tracking
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow
from sparksync.names import TableName
from tests.support.publishing import contents, make_tables, publish, rowguid_of, rowguids, rows_of, tombstones
from tests.support.upgrade import unkey

ARTICLES = [{"table": "Parent"}, {"table": "Child"}]


@pytest.fixture
def published(dbs):
    url = dbs.url("sqlite", "keyed")
    make_tables(url, "sqlite")
    with connect(url) as r:
        r.execute('INSERT INTO "Parent" ("id", "name") VALUES (1, \'one\'), (2, \'two\')')
    return url, publish(url, ARTICLES)


def _path(url: str) -> str:
    return url.removeprefix("sqlite:///")


def _nick(res, table: str) -> int:
    return res["nicknames"][table]


def test_the_table_stays_the_applications_own(published):
    url, res = published
    with connect(url) as r:
        assert [c.name for c in r.reflect(r.dialect.resolve_name(TableName.parse("Parent"))).columns] == \
            ["id", "name", "price", "doc"]
        assert len(set(rowguids(r, "Parent"))) == 2
    db = sqlite3.connect(_path(url))
    db.execute("INSERT INTO Parent VALUES (3, 'three', 1.5, NULL)")     # positional, as the application wrote it
    db.commit()
    db.close()
    with connect(url) as r:
        (c,) = contents(r, _nick(res, "Parent"))
        assert c["rowguid"] == rowguid_of(r, "Parent", 3) and c["lineage"] == {"1": 1}


def test_new_rows_get_ascending_rowguids_in_the_uuid7_layout(published):
    url, res = published
    with connect(url) as r:
        r.executemany('INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (?, 1, ?)', [(i, i) for i in range(500)])
        pending.flush(r)
        guids = [str(g) for g in rowguids(r, "Child")]
        assert len(set(guids)) == 500 and guids == sorted(guids)
        assert all(len(g) == 36 and g[14] == "7" and g[19] in "89ab" and g == g.lower() for g in guids)


def test_a_key_deleted_and_inserted_again_is_a_new_row(published):
    url, res = published
    with connect(url) as r:
        old = rowguid_of(r, "Parent", 1)
        r.execute('DELETE FROM "Parent" WHERE "id" = 1')
        r.execute('INSERT INTO "Parent" ("id", "name") VALUES (1, \'again\')')
        (c,) = contents(r, _nick(res, "Parent"))
        new = rowguid_of(r, "Parent", 1)
        assert new != old and c["rowguid"] == new and c["lineage"] == {"1": 1}
        (t,) = tombstones(r, _nick(res, "Parent"))
        assert t["rowguid"] == old and t["type"] == 1


def test_a_changed_key_keeps_its_rows_rowguid(published):
    url, res = published
    with connect(url) as r:
        g2 = rowguid_of(r, "Parent", 2)
        r.execute('UPDATE "Parent" SET "id" = 20 WHERE "id" = 2')
        (c,) = contents(r, _nick(res, "Parent"))
        assert rowguid_of(r, "Parent", 20) == g2 and c["rowguid"] == g2 and tombstones(r) == []
        # and a key taken over by the row of another, deleted in the same flush
        g1 = rowguid_of(r, "Parent", 1)
        r.execute('DELETE FROM "Parent" WHERE "id" = 1')
        r.execute('UPDATE "Parent" SET "id" = 1 WHERE "id" = 20')
        pending.flush(r)
        assert rowguid_of(r, "Parent", 1) == g2
        assert [t["rowguid"] for t in tombstones(r, _nick(res, "Parent"))] == [g1]


def test_insert_or_replace_over_a_row_keeps_its_rowguid(published):
    url, res = published
    with connect(url) as r:
        g1 = rowguid_of(r, "Parent", 1)
        r.execute('INSERT OR REPLACE INTO "Parent" ("id", "name") VALUES (1, \'replaced\')')
        (c,) = contents(r, _nick(res, "Parent"))
        assert rowguid_of(r, "Parent", 1) == g1 and c["rowguid"] == g1 and tombstones(r) == []


def test_vacuum_and_a_restored_dump_change_no_rows_identity(published, tmp_path):
    """Rowids of a table without an INTEGER PRIMARY KEY may change (VACUUM; a dump loaded again numbers them
    afresh): the rowguids are keyed by the primary key, so every row keeps its own."""
    url, _ = published
    with connect(url) as r:
        r.execute('CREATE TABLE "Tag" ("code" TEXT PRIMARY KEY, "label" TEXT)')
        r.executemany('INSERT INTO "Tag" VALUES (?, ?)', [(f"t{i:03}", str(i)) for i in range(300)])
    res = publish(url, [*ARTICLES, {"table": "Tag"}])
    with connect(url) as r:
        before = dict(r.query(f'SELECT "code", "rowguid" FROM {rows_of(r, "Tag")} AS t'))
        r.execute('DELETE FROM "Tag" WHERE "label" % 3 = 0')
        r.execute('UPDATE "Tag" SET "label" = "label" || \'!\' WHERE "label" % 3 = 1')
    db = sqlite3.connect(_path(url))
    db.execute("VACUUM")
    dump = list(db.iterdump())
    db.close()
    with connect(url) as r:                  # the log read after the rowids moved: keyed by code, all still right
        pending.flush(r)
        after = dict(r.query(f'SELECT "code", "rowguid" FROM {rows_of(r, "Tag")} AS t'))
        assert after == {k: v for k, v in before.items() if int(k[1:]) % 3 != 0}
        nick = _nick(res, "Tag")
        assert sorted(c["rowguid"] for c in contents(r, nick)) == sorted(before[f"t{i:03}"] for i in range(300)
                                                                          if i % 3 == 1)
        assert len(tombstones(r, nick)) == 100
    restored = tmp_path / "restored.db"
    db = sqlite3.connect(str(restored))
    db.executescript("\n".join(dump))
    db.close()
    with connect(f"sqlite:///{restored}") as r:
        assert dict(r.query(f'SELECT "code", "rowguid" FROM {rows_of(r, "Tag")} AS t')) == after


@pytest.mark.parametrize("ddl", [
    'CREATE TABLE "Pair" ("a" INTEGER, "b" TEXT, "v" TEXT, PRIMARY KEY ("b", "a"))',
    'CREATE TABLE "Pair" ("a" INTEGER, "b" TEXT, "v" TEXT, PRIMARY KEY ("b", "a")) WITHOUT ROWID',
], ids=["composite key", "without rowid"])
def test_a_composite_key_and_a_table_without_rowid_are_tracked(dbs, ddl):
    url = dbs.url("sqlite", "pair")
    with connect(url) as r:
        r.execute(ddl)
        r.execute('INSERT INTO "Pair" VALUES (1, \'x\', \'old\'), (2, \'x\', \'old\')')
    res = publish(url, [{"table": "Pair"}])
    nick = _nick(res, "Pair")
    with connect(url) as r:
        guid = dict(((a, b), g) for a, b, g in r.query(f'SELECT "a", "b", "rowguid" FROM {rows_of(r, "Pair")} AS t'))
        assert len(set(guid.values())) == 2
        r.execute('INSERT INTO "Pair" VALUES (3, \'y\', \'new\')')
        r.execute('UPDATE "Pair" SET "v" = \'changed\' WHERE "a" = 1')
        r.execute('UPDATE "Pair" SET "a" = 5 WHERE "a" = 2')           # a key column changed: the rowguid follows
        r.execute('DELETE FROM "Pair" WHERE "a" = 3')
        rows = {c["rowguid"]: c["lineage"] for c in contents(r, nick)}
        assert rows == {guid[(1, "x")]: {"1": 1}, guid[(2, "x")]: {"1": 1}}
        now = dict(((a, b), g) for a, b, g in r.query(f'SELECT "a", "b", "rowguid" FROM {rows_of(r, "Pair")} AS t'))
        assert now == {(1, "x"): guid[(1, "x")], (5, "x"): guid[(2, "x")]}
        assert tombstones(r, nick) == []          # inserted and deleted between two flushes: never a row anywhere


def test_a_file_of_this_release_with_its_rowguid_columns_moves_them_beside_the_tables_when_told(published):
    """A device file whose metadata an earlier build upgraded without keying its rowguids (it could not know which
    columns the publisher added): told by the door's hello which ones were, its next sync moves them beside the
    tables, every row keeping its rowguid, once; told nothing, nothing moves."""
    url, _ = published
    with connect(url) as r, r.transaction():
        pending.flush(r)
        nickname = store.replica_identity(r).nickname
        for row in store.select(r, ArticleRow):
            art = tracked_article(row)
            unkey(r, art)
            store.update(r, ArticleRow, {"rowguid_keyed": 0}, {"pubid": row.pubid, "artid": row.artid})
            install_tracking(r, replace(art, keyed=False), nickname)
        r.execute('INSERT INTO "Parent" ("id", "name") VALUES (3, \'three\')')     # tracked with the column
    with connect(url) as r:
        pending.flush(r)
        before = {int(i): str(g) for i, g in r.query('SELECT "id", "rowguid" FROM "Parent"')}
        assert len(before) == 3 and all(before.values())
        assert unkeyed(r, ()) == [] and not upgrade(r, ())
        added = {row.artid for row in store.select(r, ArticleRow)}
        assert sorted(unkeyed(r, added)) == ["Child", "Parent"]
        assert upgrade(r, added)
        assert unkeyed(r, added) == [] and not upgrade(r, added)          # once
        assert r.reflect(r.dialect.resolve_name(TableName.parse("Parent"))).column("rowguid") is None
        assert {int(i): str(g) for i, g in r.query(f'SELECT "id", "rowguid" FROM {rows_of(r, "Parent")} AS t')} == before
        r.execute('INSERT INTO "Parent" ("id", "name") VALUES (4, \'four\')')   # and the keyed tracking records it
        pending.flush(r)
        assert rowguid_of(r, "Parent", 4) not in before.values()
