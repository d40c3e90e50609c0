"""Cost per subscriber: one SQLite publisher with 10, 100 and 1,000 SQLite subscribers.

For each size, in one run: ``setup`` (publish, snapshot, initialize every subscriber), a merge after
changes at the publisher (100 rows) and at a tenth of the subscribers (10 rows each), and an idle merge
(nothing changed). Wall seconds, and seconds per subscriber against the smallest size measured in the
same run (the baseline: a ratio near 1 means the cost grows linearly with the subscribers).

Target (issue 23): the idle merge of 1,000 subscribers <= 20 s on this machine.

Usage: .venv/bin/python bench/scale.py [--sizes 10,100,1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from results import Result

from sparksync.dialects import connect
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.provision import setup
from sparksync.spark.session import spark_session
from sparksync.topology import parse_topology

ROWS = 1000


def measure(size: int, spark) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        pub = f"sqlite:///{folder / 'pub.db'}"
        with connect(pub) as r:
            r.execute('CREATE TABLE "Item" ("id" INTEGER PRIMARY KEY, "name" TEXT, "qty" INTEGER)')
            r.executemany('INSERT INTO "Item" VALUES (?, ?, 0)', [(i, f"item {i}") for i in range(ROWS)])
        topology = parse_topology({
            "publisher": {"name": "P", "database": pub, "snapshot_dir": str(folder / "snap")},
            "publications": [{"name": "Bench", "articles": [{"table": "Item"}]}],
            "subscriptions": [{"name": f"S{i:04d}", "publication": "Bench", "database": f"sqlite:///s{i:04d}.db"}
                              for i in range(size)]}, folder)
        out = {}
        t0 = time.perf_counter()
        setup(topology, lambda: spark)
        out["setup"] = time.perf_counter() - t0
        agent = MergeAgent(topology, spark)
        with connect(pub) as r:
            r.execute('UPDATE "Item" SET "qty" = "qty" + 1 WHERE "id" < 100')
        for k, s in enumerate(topology.subscriptions[::10]):
            with connect(topology.resolve_url(s.database)) as r:
                r.execute(f'UPDATE "Item" SET "name" = \'by {s.name}\' WHERE "id" >= {100 + 10 * k} '
                          f'AND "id" < {110 + 10 * k}')
        t0 = time.perf_counter()
        summary = agent.run(MergeOptions())
        out["merge"] = time.perf_counter() - t0
        assert summary.ok, [x.errors for x in summary.subscriptions if x.errors][:3]
        t0 = time.perf_counter()
        summary = agent.run(MergeOptions())
        out["idle"] = time.perf_counter() - t0
        assert summary.ok
        with connect(pub) as r:
            want = r.query('SELECT "id", "name", "qty" FROM "Item" ORDER BY "id"')
        for s in topology.subscriptions[::max(1, size // 10)]:
            with connect(topology.resolve_url(s.database)) as r:
                assert r.query('SELECT "id", "name", "qty" FROM "Item" ORDER BY "id"') == want, s.name
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    spark = spark_session("local[2]")
    results = {n: measure(n, spark) for n in sizes}
    base = results[sizes[0]]
    rows = []
    for n, r in results.items():
        rows.append([n, r["setup"], r["merge"], r["idle"], r["setup"] / n, r["merge"] / n, r["idle"] / n,
                     (r["idle"] / n) / (base["idle"] / sizes[0])])
    result = Result("scale", "Cost per subscriber: 10, 100 and 1,000 SQLite subscribers", "bench/scale.py")
    result.table(["subscribers", "setup (s)", "merge with changes (s)", "idle merge (s)", "setup s / subscriber",
                  "merge s / subscriber", "idle s / subscriber", f"idle per subscriber vs {sizes[0]}"], rows,
                 "One SQLite publisher (1,000 rows); changes at the publisher (100 rows) and at every tenth subscriber "
                 "(10 rows each). Target: an idle merge of 1,000 subscribers <= 20 s")
    result.save()


if __name__ == "__main__":
    main()
