"""Randomized: poison values mixed into a random workload, with crashes (issue 9, "tests and done").

A SQLite publisher P with a SQLite subscriber L and a PostgreSQL subscriber G. Each row has one writer
(rows 1-10 P, 11-20 G, 21-30 L), so what a row must end as is known. L's writes are sometimes poison:
text that is not UTF-8, 'abc' in an INTEGER column, 'not a date' in a DATE column (a row its source
cannot read), or a NUL character (SQLite keeps it; PostgreSQL cannot). Merges of random subscriptions
and directions run between the writes, some crashed at a failpoint. After two full rounds:

* every row whose last write was good holds it at every replica, and no failed change names it;
* every row whose last write was poison is a failed change, listed where it failed, naming the column
  (a poisoned column: poison written to another column since the row's last good write is there too);
* nothing else failed, and no merge of the final rounds reported an error.

SPARKSYNC_POISON_EXAMPLES sets how many examples run (default 4).
"""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksync.merge.conflicts.view import list_failed_changes
from tests.support.cluster import Cluster
from tests.support.databases import databases

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("SPARKSYNC_POISON_EXAMPLES", "4"))
OWNER = {**{i: "P" for i in range(1, 11)}, **{i: "G" for i in range(11, 21)}, **{i: "L" for i in range(21, 31)}}
POISON = {  # kind -> (column, SQL value, where it fails)
    "utf8": ("t", "CAST(X'61FF62' AS TEXT)", "P"),
    "int": ("n", "'abc'", "P"),
    "date": ("d", "'not a date'", "P"),
    "nul": ("t", "'a' || char(0) || 'b'", "G"),
}
counter = itertools.count(1)


def ddl(kind: str) -> list[str]:
    return ['CREATE TABLE "R" ("id" INTEGER PRIMARY KEY, "t" TEXT, "n" INTEGER, "d" DATE)'] + \
        [f"INSERT INTO \"R\" VALUES ({i}, 't{i}', {i}, '2024-01-01')" for i in OWNER]


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    with databases(tmp_path_factory.mktemp("poison"), pg_admin_url) as dbs:
        yield Cluster(spark, dbs, "sqlite", {"L": "sqlite", "G": "postgresql"},
                      ddl, [{"table": "R"}])


write = st.tuples(st.just("write"), st.sampled_from(sorted(OWNER)),
                  st.sampled_from(["good", "good", "utf8", "int", "date", "nul"]))
merge = st.tuples(st.just("merge"), st.sets(st.sampled_from(["L", "G"]), min_size=1),
                  st.sampled_from(["both", "upload", "download"]),
                  st.sampled_from([None, None, "apply.before_commit", "apply.after_commit",
                                   "agent.before_sender_watermark"]))


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=st.lists(st.one_of(write, write, merge), min_size=6, max_size=16))
def test_poison_changes_are_failed_changes_and_everything_else_converges(world, plan):
    last: dict[int, tuple[str, object]] = {}            # row -> ("good", value) | ("poison", {column: kind})
    for step in plan:
        if step[0] == "merge":
            world.merge_crashing(*step[1:])
            continue
        _, row, kind = step
        who = OWNER[row]
        if kind != "good" and who != "L":
            kind = "good"                                # poison is written at the SQLite subscriber
        if kind == "good":
            value = f"{who}-{next(counter)}"
            world.sql(who, f"UPDATE \"R\" SET \"t\" = '{value}', \"n\" = {row}, \"d\" = '2024-02-02' WHERE \"id\" = {row}")
            last[row] = ("good", value)
        else:
            column, sql, _ = POISON[kind]
            world.shell("L", f'UPDATE "R" SET "{column}" = {sql} WHERE "id" = {row};')
            # poison of another column since the last good write is still there too
            earlier = last.get(row, ("good", None))
            last[row] = ("poison", {**(earlier[1] if earlier[0] == "poison" else {}), column: kind})
    for _ in range(2):
        summary = world.merge()
        assert summary.ok, [s.errors for s in summary.subscriptions]
    failed = {(f["where"], f["row_key"]): f for f in list_failed_changes(world.topology)}
    expected = set()
    for row, (state, what) in last.items():
        if state == "good":
            for who in ("P", "L", "G"):
                assert world.value(who, "R", row, "t") == what, (who, row)
            continue
        # the change fails at the publisher when any of its poison is one the publisher cannot read
        # (it never reaches G then), else at G; it names one of the columns poisoned for that reason
        where = "P" if any(POISON[k][2] == "P" for k in what.values()) else "G"
        columns = {c for c, k in what.items() if POISON[k][2] == where}
        expected.add((where, f"id={row}"))
        f = failed.get((where, f"id={row}"))
        assert f is not None and f["column_name"] in columns, (row, what, failed)
    assert set(failed) == expected, (sorted(failed), sorted(expected))     # nothing else failed
    # leave the world clean for the next example: fix the poison at its source
    for row, (state, _) in last.items():
        if state == "poison":
            world.sql("L", f"UPDATE \"R\" SET \"t\" = 'fixed', \"n\" = {row}, \"d\" = '2024-03-03' WHERE \"id\" = {row}")
    for _ in range(2):
        assert world.merge().ok
    assert list_failed_changes(world.topology) == []
