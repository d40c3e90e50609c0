"""The cost of a small round from the command line: a cold ``sparksync merge`` that moves a few changes.

One SQLite publisher, 10 SQLite subscribers (set up once). Each measurement changes 10 rows at the
publisher and runs ``sparksync merge -c CFG`` in a process of its own, as a user or a cron job would, and
takes its wall time (median of ``--repeats``):

* as configured (``[spark] driver_round_changes`` = 5,000: a round this small is applied in the agent's
  own process and no Spark session is started);
* the same with ``driver_round_changes = 0`` (every direction on Spark: the JVM starts), the baseline;
* the start of a Spark session alone in a fresh process (how much of the baseline is the JVM).

Target (issue 23): a cold merge of 10 changes with 10 SQLite subscribers <= 10 s on this machine.

Usage: .venv/bin/python bench/small_rounds.py [--subscribers 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import Result

from sparksync.dialects import connect
from sparksync.provision import setup
from sparksync.spark.session import spark_session, stop_spark
from sparksync.topology import load_config

EXE = str(Path(sys.executable).with_name("sparksync"))


def config(folder: Path, subscribers: int, driver_round_changes: int, name: str) -> Path:
    subs = "".join(f'[[subscriptions]]\nname = "S{i}"\npublication = "Bench"\ndatabase = "sqlite:///s{i}.db"\n\n'
                   for i in range(subscribers))
    path = folder / name
    path.write_text(f'[publisher]\nname = "P"\ndatabase = "sqlite:///pub.db"\nsnapshot_dir = "snap"\n\n'
                    f'[spark]\nmaster = "local[2]"\ndriver_round_changes = {driver_round_changes}\n\n'
                    '[[publications]]\nname = "Bench"\n  [[publications.articles]]\n  table = "Item"\n\n' + subs)
    return path


def cold_merge(cfg: Path, pub: str, k: int) -> tuple[float, bool]:
    """Change 10 rows at the publisher, then one ``sparksync merge`` in a new process: (seconds, Spark started)."""
    with connect(pub) as r:
        r.execute(f'UPDATE "Item" SET "qty" = "qty" + 1 WHERE "id" % 100 = {k % 100}')
    t0 = time.perf_counter()
    p = subprocess.run([EXE, "merge", "-c", str(cfg)], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    return seconds, "starting Spark" in p.stdout + p.stderr


def jvm_start() -> float:
    code = "from sparksync.spark.session import spark_session; spark_session('local[2]').range(1).count()"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - t0


def run(subscribers: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        driver = config(folder, subscribers, 5000, "driver.toml")
        spark_cfg = config(folder, subscribers, 0, "spark.toml")
        topology = load_config(driver)
        pub = topology.publisher_url
        with connect(pub) as r:
            r.execute('CREATE TABLE "Item" ("id" INTEGER PRIMARY KEY, "name" TEXT, "qty" INTEGER)')
            r.executemany('INSERT INTO "Item" VALUES (?, ?, 0)', [(i, f"item {i}") for i in range(1000)])
        setup(topology, lambda: spark_session("local[2]"))
        stop_spark()
        out: dict = {"driver": [], "spark": [], "jvm": [], "started": set()}
        for k in range(repeats):
            seconds, started = cold_merge(driver, pub, 2 * k)
            out["driver"].append(seconds)
            out["started"].add(("driver", started))
            seconds, started = cold_merge(spark_cfg, pub, 2 * k + 1)
            out["spark"].append(seconds)
            out["started"].add(("spark", started))
            out["jvm"].append(jvm_start())
        with connect(pub) as r:
            want = r.query('SELECT "id", "qty" FROM "Item" ORDER BY "id"')
        for s in topology.subscriptions:
            with connect(topology.resolve_url(s.database)) as r:
                assert r.query('SELECT "id", "qty" FROM "Item" ORDER BY "id"') == want, s.name
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subscribers", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    r = run(args.subscribers, args.repeats)
    driver, spark, jvm = (statistics.median(r[k]) for k in ("driver", "spark", "jvm"))
    result = Result("small_rounds", "A cold sparksync merge of 10 changes", "bench/small_rounds.py")
    result.table(["subscribers", "cold merge, as configured (s)", "Spark started", "cold merge on Spark (s)",
                  "Spark session start alone (s)", "as configured / on Spark"],
                 [[args.subscribers, driver, "yes" if ("driver", True) in r["started"] else "no", spark, jvm,
                   driver / spark]],
                 f"Medians of {args.repeats}; target: a cold merge of 10 changes with 10 SQLite subscribers <= 10 s")
    result.save()


if __name__ == "__main__":
    main()
