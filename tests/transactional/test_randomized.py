"""Randomized exactly-once: random transactions at a PostgreSQL publisher (some through psql),
random log reader and distribution agent passes with crashes injected in the log reader, between
and inside commit batches and between subscription streams' commits, random commit batch sizes.
After a final pass every subscriber (PostgreSQL with 3 streams, SQLite, PostgreSQL committing every
two transactions) holds exactly the publisher's rows: nothing lost, nothing applied twice (an insert or
delete applied twice would stop the subscription).

SPARKSYNC_TX_RANDOM_EXAMPLES sets how many examples run (default 5); the count is printed.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparksync import failpoints as fp
from sparksync.dialects import connect
from sparksync.failpoints import InjectedFault
from sparksync.provision import setup
from sparksync.topology import parse_topology
from sparksync.transactional.delivery.agent import DistributionAgent
from sparksync.transactional.distribution.logreader import run_logreader
from tests.support.databases import databases

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("SPARKSYNC_TX_RANDOM_EXAMPLES", "5"))
SUBS = {"Streams": ("postgresql", {"subscription_streams": 3, "subscription_streams_threshold": 0}), "Lite": ("sqlite", {}),
        "Plain": ("postgresql", {})}
ids = itertools.count(10_000)
ran = {"examples": 0, "transactions": 0, "passes": 0, "crashes": 0}

statement = st.tuples(st.sampled_from(["insert", "update", "update_key", "delete"]), st.integers(0, 10_000))
transaction = st.tuples(st.just("txn"), st.lists(statement, min_size=1, max_size=4), st.booleans())
deliver = st.tuples(st.just("pass"), st.integers(1, 4),
                    st.sampled_from([None, "logreader.before_commit", "logreader.before_confirm",
                                     "distribute.before_commit", "distribute.after_commit",
                                     "distribute.stream_committed"]))
steps = st.lists(st.one_of(transaction, transaction, deliver), min_size=6, max_size=16)


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    tmp = tmp_path_factory.mktemp("txrandom")
    with databases(tmp, pg_admin_url) as dbs:
        pub = dbs.url("postgresql", "txr_pub")
        with connect(pub) as r:
            r.execute('CREATE TABLE "Item" ("id" integer PRIMARY KEY, "v" text, "n" integer)')
            r.executemany('INSERT INTO "Item" VALUES (%s, %s, %s)', [(i, f"v{i}", 0) for i in range(1, 41)])
        urls = {n: dbs.url(kind, n) for n, (kind, _) in SUBS.items()}
        article = {"table": "Item"}
        data = {
            "distributor": {"database": f"sqlite:///{tmp / 'distribution.db'}"},
            "publisher": {"name": "P", "database": pub, "snapshot_dir": str(tmp / "snap")},
            "publications": [{"name": "Pub", "kind": "transactional", "articles": [article]}],
            "subscriptions": [{"name": n, "publication": "Pub", "database": urls[n], **extra}
                              for n, (_, extra) in SUBS.items()],
        }
        data["subscriptions"][2]["commit_batch_size"] = 2
        topo = parse_topology(data, tmp)
        setup(topo, lambda: spark)
        yield topo, pub, urls, data, tmp, spark
        print(f"\ntransactional random: {ran['examples']} examples, {ran['transactions']} transactions, "
              f"{ran['passes']} agent passes, {ran['crashes']} injected crashes")


def _rows(url: str) -> list[tuple]:
    with connect(url) as r:
        return [tuple(x) for x in r.query('SELECT "id", "v", "n" FROM "Item" ORDER BY "id"')]


def _transaction(pub: str, statements, via_psql: bool) -> None:
    existing = [r[0] for r in _rows(pub)]
    sql = []
    for op, pick in statements:
        if op == "insert" or not existing:
            i = next(ids)
            sql.append(f'INSERT INTO "Item" VALUES ({i}, \'ins{i}\', 1)')
            existing.append(i)
            continue
        i = existing[pick % len(existing)]
        if op == "update":
            sql.append(f'UPDATE "Item" SET "n" = "n" + 1, "v" = \'u{pick}\' WHERE "id" = {i}')
        elif op == "update_key":
            j = next(ids)
            sql.append(f'UPDATE "Item" SET "id" = {j} WHERE "id" = {i}')
            existing[existing.index(i)] = j
        else:
            sql.append(f'DELETE FROM "Item" WHERE "id" = {i}')
            existing.remove(i)
    text = "BEGIN;\n" + ";\n".join(sql) + ";\nCOMMIT;\n"
    if via_psql and shutil.which("psql"):
        subprocess.run(["psql", pub, "-q", "-v", "ON_ERROR_STOP=1"], input=text, text=True, check=True,
                       capture_output=True)
    else:
        with connect(pub) as r, r.transaction():
            for s in sql:
                r.execute(s)


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(plan=steps)
def test_every_transaction_arrives_exactly_once(world, plan):
    topo, pub, urls, _, _, spark = world
    agent = DistributionAgent(topo, spark)
    fp_file = os.environ["SPARKSYNC_FAILPOINTS"]
    ran["examples"] += 1
    for step in plan:
        if step[0] == "txn":
            _transaction(pub, step[1], step[2])
            ran["transactions"] += 1
            continue
        _, batch, crash = step
        if crash:
            target = {"distribute.stream_committed": f"Streams:0:{batch % 3}"}.get(crash, f"Lite:{batch % 2}")
            fp.arm(fp_file, f"{crash} {'Pub' if crash.startswith('logreader') else target}")
        try:
            run_logreader(topo)
            agent.run()
        except InjectedFault:
            pass
        ran["passes"] += 1
        if crash and (not os.path.exists(fp_file) or not Path(fp_file).read_text().strip()):
            ran["crashes"] += 1
        if os.path.exists(fp_file):
            os.remove(fp_file)
    run_logreader(topo)
    summary = agent.run()
    assert summary.ok, summary.to_dict()
    expected = _rows(pub)
    for name, url in urls.items():
        assert _rows(url) == expected, name
