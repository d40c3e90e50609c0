"""A device's download of many changed rows from ``sparksync serve``: rows per second, cold and warm.

A SQLite publisher (``Item``, R rows) with one web subscription; ``serve`` in a process of its own (its rounds above
``[spark] driver_round_changes`` run on Spark, which it starts when a round first needs it); the device synced
through the public API (``sparksync.Device``) in this process. Measured, each the device's whole sync:

* its first sync: the snapshot of R rows;
* a sync after HQ changed C rows, the first big round since ``serve`` started (cold: the round starts Spark in the
  background and is read in ``serve``'s process meanwhile: the request never waits for a JVM), and the same again
  (warm): each once as soon as HQ committed (the device's request waits for the round ``serve`` is running, or
  runs it), and once after ``serve`` ran the round ahead of the device (its log says the feed took the changes):
  the download then only sends the feed's files, which is what a device syncing after HQ's change gets.

* another device's first sync as its user runs it: ``sparksync sync`` in a process of its own, with the default
  configuration (the process's start and imports, and the validation a new file makes at its first sync, are in it).

Printed: seconds and rows per second of each, and the ratio of the cold sync to the warm one. Targets: a sync of
50,000 changed rows at 50,000 rows/s or more, cold or warm (issue 38); a first sync of 200,000 rows at 150,000
rows/s or more (issue 50).

Usage: .venv/bin/python bench/device_download.py [--rows 200000] [--changes 50000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from results import Result
from served import EXE, free_port, serving

import sparksync
from sparksync.dialects import connect


def config(folder: Path, port: int) -> Path:
    path = folder / "sparksync.toml"
    path.write_text(f"""
[spark]
master = "local[2]"

[publisher]
name = "HQ"
database = "sqlite:///{folder / 'hq.db'}"
snapshot_dir = "{folder / 'snap'}"

[server]
listen = "127.0.0.1:{port}"
monitor = "127.0.0.1:{free_port()}"
feed_dir = "{folder / 'feed'}"

[[publications]]
name = "Shop"

[[publications.articles]]
table = "Item"

[[subscriptions]]
name = "Till"
publication = "Shop"
transport = "web"

[[subscriptions]]
name = "Till2"
publication = "Shop"
transport = "web"
""", encoding="utf-8")
    return path


def timed_sync(device: sparksync.Device) -> tuple[float, int]:
    t0 = time.perf_counter()
    summary = device.sync()
    assert summary.ok, summary
    seconds = time.perf_counter() - t0
    down = summary.subscriptions[0].total("download")
    return seconds, int(down.inserts + down.updates + down.deletes)


def rounds_logged(log: Path) -> int:
    """The feed's rounds ``serve`` logged (``feed Shop: generations (a, b]``)."""
    return log.read_text(errors="replace").count("feed Shop: generations (") if log.exists() else 0


def after_round(log: Path, before: int, timeout: float = 120.0) -> None:
    """Once ``serve`` has logged a round more than ``before``."""
    deadline = time.monotonic() + timeout
    while rounds_logged(log) <= before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"serve ran no round within {timeout:g} s")
        time.sleep(0.05)


def run(rows: int, changes: int) -> dict:
    out: dict = {}
    with TemporaryDirectory(prefix="bench-download-") as tmp:
        folder = Path(tmp)
        with connect(f"sqlite:///{folder / 'hq.db'}") as r:
            r.execute('CREATE TABLE "Item" ("id" integer PRIMARY KEY, "name" text, "price" real, "qty" integer)')
            with r.transaction():
                r.executemany('INSERT INTO "Item" VALUES (?, ?, ?, ?)',
                              [(i, f"item number {i}", i * 0.25, i % 100) for i in range(1, rows + 1)])
        port = free_port()
        cfg = config(folder, port)
        env = {k: v for k, v in os.environ.items() if k != "SPARKSYNC_FAILPOINTS"}
        subprocess.run([EXE, "setup", "-c", str(cfg)], check=True, capture_output=True, env=env)
        token = subprocess.run([EXE, "token", "-c", str(cfg), "-s", "Till"], check=True, capture_output=True,
                               text=True, env=env).stdout.strip()
        with serving(cfg, f"http://127.0.0.1:{port}") as _:
            device = sparksync.Device(str(folder / "till.db"), f"http://127.0.0.1:{port}", "Till", token)
            t0 = time.perf_counter()
            assert device.sync().ok
            out["first"] = (time.perf_counter() - t0, rows)
            # a second till's first sync as its user runs it: the command in a process of its own (its start, its
            # imports, the validation a new file makes at its first sync), with the default configuration
            token2 = subprocess.run([EXE, "token", "-c", str(cfg), "-s", "Till2"], check=True, capture_output=True,
                                    text=True, env=env).stdout.strip()
            t0 = time.perf_counter()
            subprocess.run([EXE, "sync", "--server", f"http://127.0.0.1:{port}", "--database", str(folder / "till2.db"),
                            "--subscription", "Till2"], check=True, capture_output=True,
                           env={**env, "SPARKSYNC_TOKEN": token2})
            out["first command"] = (time.perf_counter() - t0, rows)
            log = cfg.with_suffix(".log")
            for delta, (phase, ahead) in enumerate((("cold", True), ("warm", True), ("warm", False)), 1):
                before = rounds_logged(log)
                with connect(f"sqlite:///{folder / 'hq.db'}") as r:
                    r.execute(f'UPDATE "Item" SET "qty" = "qty" + {delta} WHERE "id" <= {changes}')
                if ahead:
                    after_round(log, before)
                out[f"{phase} {'ahead' if ahead else 'in the request'}"] = timed_sync(device)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--changes", type=int, default=50_000)
    args = ap.parse_args()
    m = run(args.rows, args.changes)
    result = Result("device_download", "A device's download of many changed rows, cold and warm",
                    "bench/device_download.py")
    labels = {"first": f"first sync: snapshot of {args.rows:,} rows",
              "first command": f"another device's first sync through 'sparksync sync' (a process of its own), "
                               f"{args.rows:,} rows",
              "cold ahead": f"{args.changes:,} changed rows, the first big round since serve started, run ahead",
              "warm ahead": f"{args.changes:,} changed rows again, the round run ahead",
              "warm in the request": f"{args.changes:,} changed rows again, synced as soon as HQ committed"}
    result.table(["sync", "seconds", "rows", "rows/s"],
                 [[labels[k], s, n, n / s] for k, (s, n) in m.items()],
                 f"cold / warm (ahead): {m['cold ahead'][0] / m['warm ahead'][0]:.2f}x; in the request / ahead: "
                 f"{m['warm in the request'][0] / m['warm ahead'][0]:.2f}x; target: >= 50,000 rows/s cold or warm")
    result.save()


if __name__ == "__main__":
    main()
