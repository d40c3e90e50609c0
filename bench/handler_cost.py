"""The cost of a business logic handler per row: the same merges with and without a handler that accepts every row.

One SQLite publisher and one SQLite subscriber, an article of R rows; in one run, the same topology twice: the article
without a handler (the baseline), and with a handler whose ``insert``, ``update`` and ``delete`` each return
``Accept()`` (every row of every plain change is read and given to it; none goes another way). Measured each time:
a download of R updated rows and an upload of U, the apply stage's rows/s (time inside the destination's batch
transactions), and the handler's cost per row against the baseline.

Usage: .venv/bin/python bench/handler_cost.py [--rows 50000] [--uploads 20000]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from results import Result

from sparksync.dialects import connect
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.provision import setup
from sparksync.spark.session import spark_session
from sparksync.topology import parse_topology

NOOP = '''from sparksync.handlers import Accept, BusinessLogicHandler


class Noop(BusinessLogicHandler):
    def insert(self, ctx, row):
        return Accept()

    def update(self, ctx, row):
        return Accept()

    def delete(self, ctx, row):
        return Accept()
'''


def _apply_seconds(agent: MergeAgent, exchange: str) -> float:
    summary = agent.run(MergeOptions(exchange=exchange))
    assert summary.ok, [s.errors for s in summary.subscriptions]
    return sum(s.total(exchange).seconds for s in summary.subscriptions)


def measure(workdir: Path, rows: int, uploads: int, handler: bool, spark) -> tuple[float, float]:
    """(download, upload) apply seconds."""
    (workdir / "noop_logic.py").write_text(NOOP, encoding="utf-8")
    pub = f"sqlite:///{workdir / 'pub.db'}"
    with connect(pub) as r:
        r.execute('CREATE TABLE "Item" ("id" INTEGER PRIMARY KEY, "name" TEXT, "qty" INTEGER)')
        r.executemany('INSERT INTO "Item" VALUES (?, ?, 0)', [(i, f"n{i}") for i in range(rows)])
    article = {"table": "Item", **({"business_logic": "noop_logic:Noop"} if handler else {})}
    topo = parse_topology({
        "spark": {"driver_round_changes": 10 * rows},
        "publisher": {"name": "P", "database": pub, "snapshot_dir": str(workdir / "snap")},
        "publications": [{"name": "Bench", "articles": [article], "generation_leveling_threshold": 10 * rows}],
        "subscriptions": [{"name": "S", "publication": "Bench", "database": f"sqlite:///{workdir / 's.db'}"}]},
        workdir)
    setup(topo, lambda: spark)
    agent = MergeAgent(topo, spark)
    with connect(pub) as r:                                 # warm-up: one row each way
        r.execute('UPDATE "Item" SET "qty" = -1 WHERE "id" = 0')
    agent.run(MergeOptions())
    with connect(pub) as r:
        r.execute('UPDATE "Item" SET "qty" = "qty" + 1')
    down = _apply_seconds(agent, "download")
    with connect(topo.resolve_url(topo.subscriptions[0].database)) as r:
        r.execute(f'UPDATE "Item" SET "name" = \'s\' WHERE "id" < {uploads}')
    up = _apply_seconds(agent, "upload")
    return down, up


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--uploads", type=int, default=20_000)
    a = ap.parse_args()
    spark = spark_session("local[2]")
    out = {}
    for handler in (False, True, False, True):             # in turns: the machine's drift shared by both
        with tempfile.TemporaryDirectory() as d:
            down, up = measure(Path(d), a.rows, a.uploads, handler, spark)
        best = out.setdefault(handler, [float("inf"), float("inf")])
        out[handler] = [min(best[0], down), min(best[1], up)]
    result = Result("handler_cost", "The cost of a business logic handler per row", "bench/handler_cost.py")
    table = []
    for label, n, i in (("download (publisher -> subscriber)", a.rows, 0), ("upload (subscriber -> publisher)",
                                                                             a.uploads, 1)):
        base, with_handler = out[False][i], out[True][i]
        table.append([label, f"{n:,}", f"{n / base:,.0f}", f"{n / with_handler:,.0f}",
                      f"{with_handler / base:.2f}x", f"{(with_handler - base) / n * 1e6:.1f}"])
    result.table(["apply stage", "rows", "rows/s, no handler", "rows/s, no-op handler", "time ratio",
                  "µs per row of the handler"], table,
                 "best of two runs each, in turns; the handler defines insert, update and delete, each returning Accept()")
    result.save()


if __name__ == "__main__":
    main()
