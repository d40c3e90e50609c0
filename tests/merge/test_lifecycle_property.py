"""Randomized merge lifecycle: random DML at a publisher and two subscribers (SQLite and PostgreSQL, some
through the sqlite3 shell / psql), random merges with injected crashes, and between them the operations
of a topology that runs for months: the fake clock advancing by days (every time the replicas recorded
moves back), retention cleanup, and schema changes (a column added at the publisher by a client and
picked up by setup, or added / dropped with the schema-change command). A subscription that expires
is reinitialized, as an operator would. After a final round every replica holds the same rows and
columns, validation (with checksums) passes, and every change made at the publisher with no competing
change survived everywhere.

SPARKSYNC_LIFECYCLE_EXAMPLES sets how many examples run (default 2); the count is printed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksync import failpoints as fp
from sparksync.dialects import connect
from sparksync.failpoints import InjectedFault
from sparksync.merge.maintenance.cleanup import cleanup
from sparksync.merge.publish import schema_change as merge_schema_change
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.names import TableName
from sparksync.provision import setup
from sparksync.reinit import reinitialize
from sparksync.topology import parse_topology
from sparksync.validation.compare import compare_replicas
from sparksync.validation.subscriptions import validate
from tests.support.clients import client_exec, existing_ids
from tests.support.clock import advance
from tests.support.databases import databases

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("SPARKSYNC_LIFECYCLE_EXAMPLES", "2"))
RETENTION = 5
KINDS = {"P": "sqlite", "S1": "postgresql", "S2": "sqlite"}
TABLES = {"Item": {}, "ItemCol": {"column_tracking": True}}
ids = itertools.count(5000)
columns = itertools.count(1)
ran = {"examples": 0, "merges": 0, "crashes": 0, "ops": 0, "days": 0, "cleanups": 0, "removed": 0,
       "schema_changes": 0, "reinits": 0}

dml = st.tuples(st.sampled_from(["P", "P", "S1", "S2"]), st.sampled_from(list(TABLES)),
                st.sampled_from(["insert", "update", "update_extra", "delete"]), st.integers(0, 10_000),
                st.booleans())
merge = st.tuples(st.just("merge"), st.sets(st.sampled_from(["S1", "S2"]), min_size=1),
                  st.sampled_from(["both", "both", "upload", "download"]),
                  st.sampled_from([None, None, "apply.before_commit", "apply.after_commit"]),
                  st.sampled_from([0, None]))    # on Spark, or in the agent's process (a small round)
clock = st.tuples(st.just("days"), st.integers(1, 3))
clean = st.tuples(st.just("cleanup"))
schema = st.tuples(st.just("schema"), st.sampled_from(["client_add", "command_add", "command_drop"]),
                   st.sampled_from(list(TABLES)), st.integers(0, 100))
steps = st.lists(st.one_of(dml, dml, dml, merge, merge, clock, clean, schema), min_size=10, max_size=22)


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    tmp = tmp_path_factory.mktemp("lifecycle")
    with databases(tmp, pg_admin_url) as dbs:
        urls = dbs.urls(KINDS, "life")
        with connect(urls["P"]) as r:
            for t in TABLES:
                r.execute(f'CREATE TABLE "{t}" ("id" integer PRIMARY KEY, "v" text, "n" integer)')
                r.executemany(f'INSERT INTO "{t}" VALUES (?, ?, ?)', [(i, f"v{i}", 0) for i in range(1, 31)])
        topo = parse_topology({
            "publisher": {"name": "P", "database": urls["P"], "snapshot_dir": str(tmp / "snap")},
            "publications": [{"name": "Pub", "retention": RETENTION,
                              "articles": [{"table": t, **o} for t, o in TABLES.items()]}],
            "subscriptions": [{"name": "S1", "publication": "Pub", "database": urls["S1"], "subscriber_type": "global",
                               "priority": 60}, {"name": "S2", "publication": "Pub", "database": urls["S2"]}],
        }, tmp)
        setup(topo, lambda: spark)
        yield topo, urls, spark
        print(f"\nlifecycle: {ran['examples']} examples, {ran['ops']} DML statements, {ran['merges']} merges, "
              f"{ran['crashes']} injected crashes, {ran['days']} days passed, {ran['cleanups']} cleanups removing "
              f"{ran['removed']} rows, {ran['schema_changes']} schema changes, {ran['reinits']} reinitializations")


def _columns(url: str, table: str) -> list[str]:
    """The table's columns but its rowguid (a column of it on PostgreSQL, kept beside it on SQLite)."""
    with connect(url) as r:
        info = r.reflect(TableName(None, table))
        assert info is not None
        return [c.name for c in info.columns if c.name != "rowguid"]


def _reinit_expired(topo, spark, reinitialized: set[str]) -> None:
    """What an operator does about a subscription that expired: reinitialize it (its changes go)."""
    from sparksync.status import gather_status

    for s in gather_status(topo)["subscriptions"]:
        if s["status"] == "expired":
            reinitialize(topo, lambda: spark, s["name"], discard=True)
            reinitialized.add(s["name"])
            ran["reinits"] += 1


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(plan=steps)
def test_random_lifecycles_converge(world, plan):
    topo, urls, spark = world
    agent = MergeAgent(topo, spark)
    fp_file = os.environ["SPARKSYNC_FAILPOINTS"]
    writers: dict[tuple[str, int], set[str]] = {}
    last: dict[tuple[str, int], str] = {}
    deleted: set[tuple[str, int]] = set()
    reinitialized: set[str] = set()
    ran["examples"] += 1
    for step in plan:
        kind = step[0]
        if kind == "merge":
            _, subs, exchange, crash, in_driver = step
            if crash:
                fp.arm(fp_file, f"{crash} {('P' if exchange == 'upload' else sorted(subs)[0])}:0")
            with contextlib.suppress(InjectedFault):
                agent.run(MergeOptions(exchange, subscriptions=sorted(subs), driver_round_changes=in_driver))
            ran["merges"] += 1
            if crash and (not os.path.exists(fp_file) or not Path(fp_file).read_text().strip()):
                ran["crashes"] += 1
            if os.path.exists(fp_file):
                os.remove(fp_file)
        elif kind == "days":
            advance(list(urls.values()), step[1])
            ran["days"] += step[1]
            _reinit_expired(topo, spark, reinitialized)
        elif kind == "cleanup":
            done = cleanup(topo)
            assert done.ok, [r.error for r in done.replicas]
            ran["cleanups"] += 1
            ran["removed"] += sum(r.total for r in done.replicas)
        elif kind == "schema":
            _, how, table, pick = step
            extra = [c for c in _columns(urls["P"], table) if c.startswith("x")]
            if how == "command_drop":
                if extra:
                    merge_schema_change.change(topo, "Pub", table, drop=extra[pick % len(extra)])
                    ran["schema_changes"] += 1
                continue
            name = f"x{next(columns)}"
            if how == "client_add":
                client_exec(urls["P"], f'ALTER TABLE "{table}" ADD COLUMN "{name}" integer DEFAULT {pick}', True)
                setup(topo, lambda: spark)
            else:
                merge_schema_change.change(topo, "Pub", table, add=f"{name} integer")
            ran["schema_changes"] += 1
        else:
            who, table, op, pick, via_client = step
            url = urls[who]
            ran["ops"] += 1
            if op == "insert":
                i = next(ids)
                client_exec(url, f'INSERT INTO "{table}" ("id", "v", "n") VALUES ({i}, \'{who}-ins\', 1)', via_client)
                writers.setdefault((table, i), set()).add(who)
                last[(table, i)] = f"{who}-ins"
                continue
            rows = existing_ids(url, table)
            if not rows:
                continue
            i = rows[pick % len(rows)]
            writers.setdefault((table, i), set()).add(who)
            if op == "delete":
                client_exec(url, f'DELETE FROM "{table}" WHERE "id" = {i}', via_client)
                deleted.add((table, i))
            elif op == "update":
                last[(table, i)] = f"{who}-{pick}"
                client_exec(url, f'UPDATE "{table}" SET "v" = \'{who}-{pick}\' WHERE "id" = {i}', via_client)
            else:
                extra = [c for c in _columns(url, table) if c.startswith("x")]
                if extra:       # a column this replica has (a subscriber may not have replayed it yet)
                    client_exec(url, f'UPDATE "{table}" SET "{extra[pick % len(extra)]}" = {pick} WHERE "id" = {i}',
                          via_client)
    _reinit_expired(topo, spark, reinitialized)
    for _ in range(2):
        summary = agent.run(MergeOptions())
        assert summary.ok, [(s.subscription, s.errors) for s in summary.subscriptions if not s.ok]
    diffs, _ = compare_replicas(topo, "Pub")
    assert not diffs, diffs
    for table in TABLES:
        assert _columns(urls["S1"], table) == _columns(urls["P"], table) == _columns(urls["S2"], table), table
    report = validate(topo, lambda: spark, checksum=True)
    assert report.ok, [(s.subscription, s.error) for s in report.subscriptions if not s.ok]
    # every change made at the publisher alone survived everywhere (a subscriber's may have been
    # discarded by a reinitialization after it expired)
    with connect(urls["P"]) as r:
        for (table, i), who in writers.items():
            if who != {"P"}:
                continue
            row = r.query_one(f'SELECT "v" FROM "{table}" WHERE "id" = ?', [i])
            if (table, i) in deleted:
                assert row is None, (table, i)
            elif (table, i) in last:
                assert row is not None and row[0] == last[(table, i)], (table, i)
