"""Randomized convergence: random DML at a publisher and three subscribers (mixed SQLite/PostgreSQL,
some through the sqlite3 shell / psql), random merges (subsets, directions, batch sizes), crashes
injected between and inside batches. After a final full round every replica holds the same rows and
every change that had no competing change survived.

SPARKSYNC_CONVERGENCE_EXAMPLES sets how many examples run (default 6); the count is printed.
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
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.provision import setup
from sparksync.topology import parse_topology
from sparksync.validation.compare import compare_replicas
from tests.support.clients import client_exec, existing_ids
from tests.support.databases import databases

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("SPARKSYNC_CONVERGENCE_EXAMPLES", "6"))
REPLICAS = ["P", "S1", "S2", "S3"]
KINDS = {"P": "postgresql", "S1": "sqlite", "S2": "sqlite", "S3": "postgresql"}
TABLES = {"Item": {}, "ItemCol": {"column_tracking": True}}
ids = itertools.count(1000)
ran = {"examples": 0, "merges": 0, "crashes": 0, "ops": 0}

dml = st.tuples(st.sampled_from(REPLICAS), st.sampled_from(list(TABLES)),
                st.sampled_from(["insert", "update_v", "update_n", "delete"]), st.integers(0, 10_000),
                st.booleans())
merge = st.tuples(st.just("merge"), st.sets(st.sampled_from(["S1", "S2", "S3"]), min_size=1),
                  st.sampled_from(["both", "upload", "download"]), st.integers(1, 3),
                  st.sampled_from([None, "apply.before_commit", "apply.after_commit", "agent.before_sender_watermark"]),
                  st.sampled_from([0, None]))    # on Spark, or in the agent's process (a small round)
steps = st.lists(st.one_of(dml, dml, dml, merge), min_size=8, max_size=20)


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    tmp = tmp_path_factory.mktemp("convergence")
    with databases(tmp, pg_admin_url) as dbs:
        urls = dbs.urls(KINDS, "conv")
        with connect(urls["P"]) as r:
            for t in TABLES:
                r.execute(f'CREATE TABLE "{t}" ("id" integer PRIMARY KEY, "v" text, "n" integer)')
                r.executemany(f'INSERT INTO "{t}" VALUES (%s, %s, %s)', [(i, f"v{i}", 0) for i in range(1, 31)])
        topo = parse_topology({
            "publisher": {"name": "P", "database": urls["P"], "snapshot_dir": str(tmp / "snap")},
            "publications": [{"name": "Pub", "articles": [{"table": t, **o} for t, o in TABLES.items()]}],
            "subscriptions": [{"name": "S1", "publication": "Pub", "database": urls["S1"], "subscriber_type": "global",
                               "priority": 60}, {"name": "S2", "publication": "Pub", "database": urls["S2"]},
                              {"name": "S3", "publication": "Pub", "database": urls["S3"]}],
        }, tmp)
        setup(topo, lambda: spark)
        yield topo, urls, MergeAgent(topo, spark)
        print(f"\nconvergence: {ran['examples']} examples, {ran['ops']} DML statements, {ran['merges']} merges, "
              f"{ran['crashes']} injected crashes")


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(plan=steps)
def test_random_workloads_converge(world, plan):
    topo, urls, agent = world
    fp_file = os.environ["SPARKSYNC_FAILPOINTS"]
    writers: dict[tuple[str, int], set[str]] = {}      # (table, id) -> replicas that changed it
    last: dict[tuple[str, int, str], object] = {}      # (table, id, column) -> last value written
    deleted: set[tuple[str, int]] = set()
    ran["examples"] += 1
    for step in plan:
        if step[0] == "merge":
            _, subs, exchange, per_batch, crash, in_driver = step
            if crash:
                target = sorted(subs)[0]
                point = (f"{crash} {target}" if crash == "agent.before_sender_watermark"
                         else f"{crash} {('P' if exchange == 'upload' else target)}:0")
                fp.arm(fp_file, point)
            with contextlib.suppress(InjectedFault):
                agent.run(MergeOptions(exchange, per_batch, per_batch, sorted(subs), driver_round_changes=in_driver))
            ran["merges"] += 1
            if crash and (not os.path.exists(fp_file) or not Path(fp_file).read_text().strip()):
                ran["crashes"] += 1
            if os.path.exists(fp_file):
                os.remove(fp_file)
            continue
        who, table, op, pick, via_client = step
        url = urls[who]
        ran["ops"] += 1
        if op == "insert":
            i = next(ids)
            client_exec(url, f'INSERT INTO "{table}" ("id", "v", "n") VALUES ({i}, \'{who}-ins\', 1)', via_client)
            writers.setdefault((table, i), set()).add(who)
            last[(table, i, "v")] = f"{who}-ins"
            last[(table, i, "n")] = 1
            continue
        rows = existing_ids(url, table)
        if not rows:
            continue
        i = rows[pick % len(rows)]
        writers.setdefault((table, i), set()).add(who)
        if op == "delete":
            client_exec(url, f'DELETE FROM "{table}" WHERE "id" = {i}', via_client)
            deleted.add((table, i))
        elif op == "update_v":
            val = f"{who}-{pick}"
            client_exec(url, f'UPDATE "{table}" SET "v" = \'{val}\' WHERE "id" = {i}', via_client)
            last[(table, i, "v")] = val
        else:
            client_exec(url, f'UPDATE "{table}" SET "n" = {pick} WHERE "id" = {i}', via_client)
            last[(table, i, "n")] = pick
    for _ in range(2):   # a full round, then one more so resolutions made at the publisher reach everyone
        assert agent.run(MergeOptions()).ok
    diffs, _ = compare_replicas(topo, "Pub")
    assert not diffs, diffs
    # Every change without a competing change survived, everywhere.
    with connect(urls["P"]) as r:
        for (table, i), who in writers.items():
            if len(who) != 1:
                continue
            row = r.query_one(f'SELECT "v", "n" FROM "{table}" WHERE "id" = %s', [i])
            if (table, i) in deleted:
                assert row is None, (table, i)
                continue
            assert row is not None, (table, i)
            for col, idx in (("v", 0), ("n", 1)):
                if (table, i, col) in last:
                    assert row[idx] == last[(table, i, col)], (table, i, col)
