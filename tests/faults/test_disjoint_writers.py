"""Hypothesis, on real databases: writers of disjoint columns never lose a write, in any merge order,
with crashes (issue 9, column-level tracking).

Column ``a`` is written only at the publisher (SQLite), ``b`` only at subscriber L (SQLite), ``c`` only
at subscriber G (PostgreSQL), through their own clients now and then. Merges of random subscriptions
and directions run between the writes, some stopped at a failpoint inside or between batches. After
two full rounds every replica holds, in every row and column, the last value its writer wrote, and no
conflict was ever logged (tests/unit/test_merge_disjoint_writers.py checks the same property on the
decision function alone, with many more examples).

SPARKSYNC_DISJOINT_EXAMPLES sets how many examples run (default 4).
"""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.cluster import Cluster
from tests.support.databases import databases

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("SPARKSYNC_DISJOINT_EXAMPLES", "4"))
ROWS = 6
OWNER = {"a": "P", "b": "L", "c": "G"}
serial = itertools.count(1)


def ddl(kind: str) -> list[str]:
    return ['CREATE TABLE "D" ("id" INTEGER PRIMARY KEY, "a" TEXT, "b" TEXT, "c" TEXT)'] + \
        [f"INSERT INTO \"D\" VALUES ({i}, 'a', 'b', 'c')" for i in range(1, ROWS + 1)]


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    with databases(tmp_path_factory.mktemp("disjoint"), pg_admin_url) as dbs:
        yield Cluster(spark, dbs, "sqlite", {"L": "sqlite", "G": "postgresql"},
                      ddl, [{"table": "D", "column_tracking": True}])


write = st.tuples(st.just("write"), st.sampled_from(sorted(OWNER)), st.integers(1, ROWS), st.booleans())
merge = st.tuples(st.just("merge"), st.sets(st.sampled_from(["L", "G"]), min_size=1),
                  st.sampled_from(["both", "upload", "download"]),
                  st.sampled_from([None, None, "apply.before_commit", "apply.after_commit",
                                   "agent.before_sender_watermark"]))


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=st.lists(st.one_of(write, write, merge), min_size=6, max_size=18))
# the reproduction: L and G write their columns of one row, upload one after the other (the
# publisher merges them), G writes again, downloads: G's second write must survive
@example(plan=[("write", "b", 1, False), ("write", "c", 1, True), ("merge", {"G"}, "upload", None),
               ("merge", {"L"}, "upload", None), ("write", "c", 1, False), ("merge", {"G"}, "download", None)])
def test_writers_of_disjoint_columns_never_lose_a_write(world, plan):
    last = {(i, c): world.value("P", "D", i, c) for i in range(1, ROWS + 1) for c in OWNER}
    conflicts_before = len(world.conflicts("P"))
    for step in plan:
        if step[0] == "merge":
            world.merge_crashing(*step[1:])
            continue
        _, column, row, via_client = step
        who, value = OWNER[column], f"{OWNER[column]}{next(serial)}"
        statement = f"UPDATE \"D\" SET \"{column}\" = '{value}' WHERE \"id\" = {row}"
        if via_client:
            world.shell(who, statement + ";")
        else:
            world.sql(who, statement)
        last[(row, column)] = value
    for _ in range(2):
        summary = world.merge()
        assert summary.ok, [s.errors for s in summary.subscriptions]
    for who in ("P", "L", "G"):
        for (row, column), value in last.items():
            assert world.value(who, "D", row, column) == value, (who, row, column)
    assert len(world.conflicts("P")) == conflicts_before
