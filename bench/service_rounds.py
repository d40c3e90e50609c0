"""Rounds of ``sparksync serve`` against the same rounds as cold commands, on the demo's topology (SQLite files).

The demo is built once (``sparksync demo``'s scenario). Then, ``--repeats`` times each:

* baseline: one changed product at the publisher, then ``sparksync merge -c CFG -s Store1 -s Store2 -s Store3``
  in a process of its own (what a cron job pays per round): its wall time;
* the service: ``sparksync serve`` running, with the merge agent of the ``Sales`` publication on
  ``every 1s``: one changed product at the publisher, and the time until it is at all three stores
  (at most a second of waiting for the slot, plus the round); and each round's own time, from the agents'
  history (``/api/history``: the merge agent's runs that moved rows, and the idle ones).

It checks the service never started a JVM (no round was above ``[spark] driver_round_changes``).

Usage: .venv/bin/python bench/service_rounds.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import httpx
from results import Result
from rich.console import Console

from sparksync.cli.demo_scenario import run_demo
from sparksync.progress import silent
from sparksync.spark.session import stop_spark

EXE = str(Path(sys.executable).with_name("sparksync"))
STORES = ("store1.db", "store2.db", "store3.db")


def sql(db: Path, statement: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(db, timeout=30) as c:
        rows = c.execute(statement, params).fetchall()
    c.close()
    return rows


def change(folder: Path, value: float) -> None:
    sql(folder / "hq.db", "UPDATE Product SET ListPrice = ? WHERE ProductID = (SELECT min(ProductID) FROM Product)",
        (value,))


def arrived(folder: Path, value: float) -> bool:
    return all(sql(folder / db, "SELECT count(*) FROM Product WHERE ListPrice = ?", (value,))[0][0] for db in STORES)


def serve_config(folder: Path) -> Path:
    text = (folder / "sparksync.toml").read_text()
    data = tomllib.loads(text)
    port = 8470 + 17
    text = text.replace('agent_schedule = "every 30s"', 'agent_schedule = "every 1s"')
    text = text.replace('agent_schedule = "every 1m"', 'agent_schedule = "every 1h"')
    text = text.replace('agent_schedule = "continuous"', 'agent_schedule = "every 1h"')
    text = text.replace(f'monitor = "{data["server"]["monitor"]}"', f'monitor = "127.0.0.1:{port}"')
    path = folder / "bench-serve.toml"
    path.write_text(text)
    return path


def run(repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "demo"
        assert run_demo(folder, Console(file=io.StringIO()), silent).ok
        stop_spark()
        cfg = folder / "sparksync.toml"
        cold = []
        for k in range(repeats):
            change(folder, 1000 + k)
            t0 = time.perf_counter()
            p = subprocess.run([EXE, "merge", "-c", str(cfg), "-s", "Store1", "-s", "Store2", "-s", "Store3"],
                               capture_output=True, text=True)
            cold.append(time.perf_counter() - t0)
            assert p.returncode == 0 and arrived(folder, 1000 + k), p.stdout + p.stderr
        scfg = serve_config(folder)
        monitor = f"http://{tomllib.loads(scfg.read_text())['server']['monitor']}"
        log = folder / "serve.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([EXE, "serve", "-c", str(scfg)], stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{monitor}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.1)
            started = dt.datetime.now(dt.UTC)
            end_to_end = []
            for k in range(repeats):
                value = 2000 + k
                change(folder, value)
                t0 = time.perf_counter()
                while not arrived(folder, value):
                    assert time.perf_counter() - t0 < 60, log.read_text()[-2000:]
                    time.sleep(0.02)
                end_to_end.append(time.perf_counter() - t0)
            time.sleep(4.0)             # a few rounds with nothing to do
            runs = httpx.get(f"{monitor}/api/history?limit=500", timeout=60).json()["runs"]
        finally:
            proc.terminate()
            proc.wait(60)
        text = log.read_text()
        assert "starting Spark" not in text, "the service started a JVM"
        sessions: dict[str, list[dict]] = {}
        for r in runs:
            if r["agent"] == "merge agent" and r["publication"] == "Sales" \
                    and dt.datetime.fromisoformat(r["start_time"]) >= started:
                sessions.setdefault(r["start_time"], []).append(r)
        busy = [max(x["seconds"] for x in rs) for rs in sessions.values() if sum(x["rows"] for x in rs)]
        idle = [max(x["seconds"] for x in rs) for rs in sessions.values() if not sum(x["rows"] for x in rs)]
        return {"cold": cold, "end_to_end": end_to_end, "busy": busy, "idle": idle}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    r = run(args.repeats)
    med = {k: statistics.median(v) if v else float("nan") for k, v in r.items()}
    result = Result("service_rounds", "Rounds of sparksync serve vs cold commands (the demo's topology)",
                    "bench/service_rounds.py")
    result.table(["what", "median (s)", "rounds", "vs a cold sparksync merge"],
                 [["cold sparksync merge of one change, 3 stores (baseline)", med["cold"], len(r["cold"]), 1.0],
                  ["serve: a round that moved the change (agents' history)", med["busy"], len(r["busy"]),
                   med["busy"] / med["cold"]],
                  ["serve: an idle round", med["idle"], len(r["idle"]), med["idle"] / med["cold"]],
                  ["serve: change to all 3 stores, end to end (schedule every 1s)", med["end_to_end"],
                   len(r["end_to_end"]), med["end_to_end"] / med["cold"]]],
                 f"Medians of {args.repeats} changes; the service started no JVM")
    result.save()


if __name__ == "__main__":
    main()
