"""One bad row never blocks the rest (issue 9, cases 2, 3 and 6).

A publisher (SQLite or PostgreSQL) with a SQLite subscriber L and a PostgreSQL subscriber G. Through
their own clients (sqlite3, psql) the subscribers write values that cannot travel or cannot be stored
somewhere: a NUL character, text that is not UTF-8, 1.5 and 'abc' in an INTEGER column, 'not a date'
in a DATE column, a string too long for varchar(5), an integer out of range, NaN. Next to them are
good changes. One merge runs; every bad change is a failed change of its own (table, row key, column,
value, reason), listed by ``conflicts`` and ``status``, tried again at the next merge; every good
change arrives; once the values are fixed at their source, everything converges.
"""

from __future__ import annotations

import math

import pytest

from sparksync.merge.conflicts.view import list_conflicts, list_failed_changes
from sparksync.status import gather_status
from tests.support.cluster import Cluster, session
from tests.support.databases import databases

pytestmark = pytest.mark.spark

ROWS = range(1, 21)


def ddl(kind: str) -> list[str]:
    if kind == "sqlite":
        create = ('CREATE TABLE "Bad" ("id" INTEGER PRIMARY KEY, "t" TEXT, "n" INTEGER, "d" DATE, "f" DOUBLE, '
                  '"v" VARCHAR(5))')
    else:
        create = ('CREATE TABLE "Bad" ("id" integer PRIMARY KEY, "t" text, "n" integer, "d" date, '
                  '"f" double precision, "v" varchar(5))')
    return [create] + [f"INSERT INTO \"Bad\" VALUES ({i}, 't{i}', {i}, '2024-01-{i:02d}', {i}.5, 'v{i}')"
                       for i in ROWS]


# where each bad change is expected to fail: (row, column, replica holding the failed change, reason)
def expected_failures(pub_kind: str) -> list[tuple[int, str, str, str]]:
    out = [(2, "t", "P", "UTF-8"), (3, "n", "P", "does not fit"), (4, "n", "P", "does not fit"),
           (5, "d", "P", "does not fit")]
    if pub_kind == "sqlite":      # SQLite would store 'toolong' in its varchar(5): the apply refuses it by name
        out += [(1, "t", "G", "NUL"), (6, "v", "P", "too long for text(5)"), (8, "f", "P", "NaN")]
    else:
        out += [(1, "t", "P", "NUL"), (6, "v", "P", "too long for text(5)"), (7, "n", "P", "out of range"),
                (8, "f", "L", "NaN")]
    return out


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory, pg_admin_url):
    tmp = tmp_path_factory.mktemp(f"bad-{request.param}")
    with databases(tmp, pg_admin_url) as dbs:
        c = Cluster(spark, dbs, request.param, {"L": "sqlite", "G": "postgresql"}, ddl,
                    [{"table": "Bad"}], {"conflict_logging": "publisher"})
        c.shell("L", """
            UPDATE "Bad" SET "t" = 'a' || char(0) || 'b' WHERE "id" = 1;
            UPDATE "Bad" SET "t" = CAST(X'61FF62' AS TEXT) WHERE "id" = 2;
            UPDATE "Bad" SET "n" = 1.5 WHERE "id" = 3;
            UPDATE "Bad" SET "n" = 'abc' WHERE "id" = 4;
            UPDATE "Bad" SET "d" = 'not a date' WHERE "id" = 5;
            UPDATE "Bad" SET "v" = 'toolong' WHERE "id" = 6;
            UPDATE "Bad" SET "n" = 3000000000 WHERE "id" = 7;
            UPDATE "Bad" SET "t" = 'fine-L' WHERE "id" = 9;
        """)
        c.shell("G", """
            UPDATE "Bad" SET "f" = 'NaN' WHERE "id" = 8;
            UPDATE "Bad" SET "t" = 'fine-G' WHERE "id" = 10;
        """)
        c.first = c.merge()
        c.failed_after_first = {w: c.failed(w) for w in ("P", "L", "G")}
        c.conflicts_after_first = len(c.conflicts("P"))
        c.second = c.merge()
        yield c


def test_the_merge_completes_for_every_subscription(world):
    for s in (world.first, world.second):
        assert s.ok, [x.errors for x in s.subscriptions]


def test_good_changes_next_to_bad_ones_arrive_everywhere(world):
    for who in ("P", "L", "G"):
        assert world.value(who, "Bad", 9, "t") == "fine-L"
        assert world.value(who, "Bad", 10, "t") == "fine-G"


def test_every_bad_change_is_a_failed_change_naming_row_column_and_reason(world):
    pub_kind = world.kinds["P"]
    for row, column, where, reason in expected_failures(pub_kind):
        found = [f for f in world.failed_after_first[where] if f["row_key"] == f"id={row}"]
        assert len(found) == 1, (row, where, world.failed_after_first[where])
        f = found[0]
        assert reason.lower() in f["reason"].lower(), f
        if column:
            assert f["column_name"] == column, f
        assert f["conflict_type"] in range(5, 11)
    listed = {(w, f["row_key"]) for w, rows in world.failed_after_first.items() for f in rows}
    assert listed == {(w, f"id={r}") for r, _, w, _ in expected_failures(pub_kind)}


def test_failed_changes_are_tried_again_at_each_merge_without_new_conflict_rows(world):
    for where in ("P", "L", "G"):
        for f in world.failed(where):
            assert f["attempts"] >= 2, f
    assert len(world.conflicts("P")) == world.conflicts_after_first


def test_failed_changes_are_listed_by_conflicts_and_status(world):
    conflicts = list_conflicts(world.topology)
    rows = {c["rowguid"] for c in conflicts if c["conflict_type"] in range(5, 11)}
    assert len(rows) == len(expected_failures(world.kinds["P"]))
    failed = list_failed_changes(world.topology)
    assert {(f["where"], f["row_key"]) for f in failed} == {
        ({"P": "P", "L": "L", "G": "G"}[w], f"id={r}") for r, _, w, _ in expected_failures(world.kinds["P"])}
    st = gather_status(world.topology)
    subs = {s["name"]: s for s in st["subscriptions"]}
    total = sum(subs[n].get("failed_upload", 0) + subs[n].get("failed_download", 0) for n in ("L", "G"))
    assert total == len(expected_failures(world.kinds["P"]))


def test_the_values_that_can_be_stored_are_kept_exactly(world):
    # NUL: the merge path keeps it at every SQLite replica (the snapshot path does too)
    assert world.value("L", "Bad", 1, "t") == "a\x00b"
    if world.kinds["P"] == "sqlite":
        assert world.value("P", "Bad", 1, "t") == "a\x00b"
        assert world.value("P", "Bad", 7, "n") == 3000000000
        assert world.value("G", "Bad", 7, "n") == 3000000000
    else:
        assert math.isnan(world.value("P", "Bad", 8, "f"))
    assert math.isnan(world.value("G", "Bad", 8, "f"))
    # where a value failed, the replica keeps its previous value (nothing half-applied)
    assert world.value("P", "Bad", 2, "t") == "t2"
    assert world.value("G", "Bad", 3, "n") == 3


def test_fixed_at_the_source_everything_converges_and_nothing_stays_failed(world):
    world.sql("L", 'UPDATE "Bad" SET "t" = \'one\' WHERE "id" = 1', 'UPDATE "Bad" SET "t" = \'two\' WHERE "id" = 2',
              'UPDATE "Bad" SET "n" = 3 WHERE "id" = 3', 'UPDATE "Bad" SET "n" = 4 WHERE "id" = 4',
              'UPDATE "Bad" SET "d" = \'2024-02-05\' WHERE "id" = 5', 'UPDATE "Bad" SET "v" = \'short\' WHERE "id" = 6',
              'UPDATE "Bad" SET "n" = 7 WHERE "id" = 7')
    world.sql("G", 'UPDATE "Bad" SET "f" = 8.25 WHERE "id" = 8')
    summary = world.merge()
    assert summary.ok, [x.errors for x in summary.subscriptions]
    for who in ("P", "L", "G"):
        assert world.failed(who) == [], who
    for who in ("P", "L", "G"):
        assert [world.value(who, "Bad", 1, "t"), world.value(who, "Bad", 2, "t")] == ["one", "two"]
        assert [world.value(who, "Bad", i, "n") for i in (3, 4, 7)] == [3, 4, 7]
        assert world.value(who, "Bad", 6, "v") == "short"
        assert world.value(who, "Bad", 8, "f") == 8.25
    assert session(summary, "L").total("upload").failed == 0
