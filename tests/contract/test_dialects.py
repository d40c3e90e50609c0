"""Dialect contract: the same behaviour on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.errors import ConstraintViolation, DatabaseError
from sparksync.merge.tracking.articles import published_articles
from sparksync.metadata import store
from sparksync.names import TableName
from tests.support.publishing import contents, make_tables, publish, tombstones

ODD_NAMES = {
    "sqlite": ['CREATE TABLE "Order Lines" ("line no" INTEGER PRIMARY KEY, "unit price" NUMERIC(8,2), "Ünïcode" TEXT)'],
    "postgresql": ['CREATE TABLE "Order Lines" ("line no" integer PRIMARY KEY, "unit price" numeric(8,2), "Ünïcode" text)'],
}


def test_odd_but_valid_names_are_quoted_everywhere(kind, dbs):
    url = dbs.url(kind, "odd")
    make_tables(url, kind, ODD_NAMES[kind])
    publish(url, [{"table": "Order Lines", "column_tracking": True}])
    with connect(url) as r:
        r.execute('INSERT INTO "Order Lines" ("line no", "unit price", "Ünïcode") VALUES (1, 2.5, \'x\')')
        contents(r)                      # the insert is recorded; the update is a change of its own
        r.execute('UPDATE "Order Lines" SET "Ünïcode" = \'y\' WHERE "line no" = 1')
        (c,) = contents(r)
        assert c["colv"] == {"line no": [1, 1], "unit price": [1, 1], "Ünïcode": [1, 2]}
        r.execute('DELETE FROM "Order Lines"')
        assert len(tombstones(r)) == 1


GUID_TABLE = {
    "sqlite": ['CREATE TABLE "Doc" ("id" INTEGER PRIMARY KEY, "guid" UUID UNIQUE, "body" TEXT)'],
    "postgresql": ['CREATE TABLE "Doc" ("id" integer PRIMARY KEY, "guid" uuid UNIQUE, "body" text)'],
}


def test_an_existing_unique_guid_column_is_used_as_the_rowguid(kind, dbs):
    url = dbs.url(kind, "guid")
    make_tables(url, kind, GUID_TABLE[kind])
    with connect(url) as r:
        r.execute('INSERT INTO "Doc" ("id", "guid", "body") VALUES '
                  '(1, \'6F9619FF-8B86-D011-B42D-00C04FC964FF\', \'a\'), (2, NULL, \'b\')')
    res = publish(url, [{"table": "Doc"}])
    with connect(url) as r:
        info = r.reflect(TableName.parse("Doc"))
        assert [c.name for c in info.columns] == ["id", "guid", "body"]   # no rowguid column added
        (a,) = published_articles(r, res["pubid"])
        assert a.rowguid_column == "guid" and a.rowguid_added == 0
        guids = dict(r.query('SELECT "id", "guid" FROM "Doc"'))
        assert str(guids[1]) == "6f9619ff-8b86-d011-b42d-00c04fc964ff"    # canonical lower case
        assert guids[2] is not None                                         # filled
        r.execute('INSERT INTO "Doc" ("id", "body") VALUES (3, \'c\')')    # no guid given: one is made
        contents(r)                                     # (on SQLite by the flush)
        g3 = r.scalar('SELECT "guid" FROM "Doc" WHERE "id" = 3')
        assert g3 is not None
        assert [str(c["rowguid"]) for c in contents(r)] == [str(g3)]


def test_configured_rowguid_column_must_be_a_unique_guid(kind, dbs):
    from sparksync.errors import SchemaError

    url = dbs.url(kind, "badguid")
    make_tables(url, kind, GUID_TABLE[kind])
    with pytest.raises(SchemaError, match="rowguid_column 'body' must be a unique GUID column"):
        publish(url, [{"table": "Doc", "rowguid_column": "body"}])
    with connect(url) as r:
        assert store.metadata_version(r) is None


def test_constraint_errors_are_terminal_and_typed(kind, dbs):
    url = dbs.url(kind, "cons")
    make_tables(url, kind)
    with connect(url) as r:
        r.execute('INSERT INTO "Parent" ("id") VALUES (1)')
        with pytest.raises(ConstraintViolation) as e:
            r.execute('INSERT INTO "Child" ("id", "parent_id") VALUES (1, 99)')
        assert e.value.kind == "foreign_key" and e.value.transient is False


def test_lock_conflicts_are_transient(kind, dbs):
    url = dbs.url(kind, "busy")
    make_tables(url, kind)
    with connect(url) as a, connect(url) as b:
        a.execute('INSERT INTO "Parent" ("id") VALUES (1)')
        with a.transaction():
            a.execute('UPDATE "Parent" SET "name" = \'a\' WHERE "id" = 1')
            if kind == "sqlite":
                b.execute("PRAGMA busy_timeout = 50")
            else:
                b.execute("SET lock_timeout = '50ms'")
            with pytest.raises(DatabaseError) as e:
                with b.transaction():
                    b.execute('UPDATE "Parent" SET "name" = \'b\' WHERE "id" = 1')
            assert e.value.transient is True
