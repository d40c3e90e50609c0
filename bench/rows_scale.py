"""How the cost grows with the rows: one table of 10^5, 10^6 and 10^7 rows, a SQLite and a PostgreSQL publisher.

At each size, each step through the CLI as a user runs it, cold (a process of its own, Spark started by it where it
uses Spark): ``sparksync setup`` (publish, snapshot, initialize one direct SQLite subscriber), a device's first sync
right after it (``sparksync sync`` of the whole table from ``sparksync serve``), ``sparksync merge`` after 1%
and after 10% of the rows changed at the publisher, and the device's sync of both merges' changes (a download of
11% of the rows' changes: its memory must not follow them). Printed per step: seconds, rows/s, and the driver's
peak memory (the Python process's high-water mark, read from /proc while it runs; the JVM is not in it). Then the
marginal rate of each step from the middle size to the largest against the one from the smallest to the middle: 1.0
means the cost grows as the rows do; a curve that bends up (a step, a sort that spills, memory that follows the data
into the driver) shows as less. Targets (issue 50): marginal ratio >= 0.8 for setup and a 10% merge; peak memory <= 1 GiB.

Usage: .venv/bin/python bench/rows_scale.py [--sizes 100000,1000000,10000000] [--kinds sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

import psycopg
from results import Result
from served import EXE, free_port, serving

from sparksync.dialects import connect

STEPS = ["setup", "device's first sync", "merge, 1% changed", "merge, 10% changed", "device's sync after the merges"]


def fill(url: str, kind: str, rows: int) -> None:
    """The publisher's table, filled in SQL (the driver holds no rows)."""
    with connect(url) as r:
        r.execute('CREATE TABLE "Item" ("id" integer PRIMARY KEY, "name" text, "price" real, "qty" integer)')
        with r.transaction():
            if kind == "sqlite":
                r.execute('WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) '
                          'INSERT INTO "Item" SELECT i, \'item number \' || i, i * 0.25, i % 100 FROM n', (rows,))
            else:
                r.execute('INSERT INTO "Item" SELECT i, \'item number \' || i, i * 0.25, i %% 100 '
                          'FROM generate_series(1, %s) AS i', (rows,))
        if kind == "postgresql":
            r.execute('VACUUM ANALYZE "Item"')


def config(folder: Path, publisher: str, port: int) -> Path:
    """The configuration, its server on ``port`` (chosen again before ``serve`` starts: a port free when the
    configuration was first written may be taken by then)."""
    path = folder / "sparksync.toml"
    path.write_text(f"""
[spark]
master = "local[2]"

[publisher]
name = "HQ"
database = "{publisher}"
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
name = "Branch"
publication = "Shop"
database = "sqlite:///{folder / 'branch.db'}"

[[subscriptions]]
name = "Till"
publication = "Shop"
transport = "web"
""", encoding="utf-8")
    return path


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak resident MiB of the command's own process) of ``sparksync argv``; fails loudly."""
    t0 = time.perf_counter()
    p = subprocess.Popen([EXE, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    peak = 0
    status = Path(f"/proc/{p.pid}/status")
    while p.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError):
            pass
        time.sleep(0.05)
    seconds = time.perf_counter() - t0
    out = p.stdout.read().decode(errors="replace") if p.stdout else ""
    if p.returncode != 0:
        raise RuntimeError(f"sparksync {' '.join(argv[:1])} exited {p.returncode}:\n{out[-3000:]}")
    return seconds, peak / 1024


def change(url: str, modulus: int, residue: int) -> int:
    """Change the rows whose id is ``residue`` modulo ``modulus`` at the publisher; returns how many."""
    with connect(url) as r, r.transaction():
        return int(r.execute(f'UPDATE "Item" SET "qty" = "qty" + 1 WHERE mod("id", {modulus}) = {residue}').rowcount)


def measure(kind: str, publisher: str, rows: int) -> dict[str, tuple[float, int, float]]:
    """step -> (seconds, rows it moved, peak MiB)."""
    env = {k: v for k, v in os.environ.items() if k != "SPARKSYNC_FAILPOINTS"}
    out: dict[str, tuple[float, int, float]] = {}
    with TemporaryDirectory(prefix=f"bench-rows-{kind}-") as tmp:
        folder = Path(tmp)
        url = publisher if kind == "postgresql" else f"sqlite:///{folder / 'hq.db'}"
        fill(url, kind, rows)
        port = free_port()
        cfg = config(folder, url, port)
        s, mib = timed(["setup", "-c", str(cfg)], env)
        out["setup"] = (s, rows, mib)
        # the device's first sync right after setup: the snapshot alone (a snapshot older than changes adds their
        # download, a step of its own)
        token = subprocess.run([EXE, "token", "-c", str(cfg), "-s", "Till"], check=True, capture_output=True,
                               text=True, env=env).stdout.strip()

        def device_sync() -> tuple[float, float]:
            port = free_port()
            cfg = config(folder, url, port)
            with serving(cfg, f"http://127.0.0.1:{port}", timeout=600):
                return timed(["sync", "--server", f"http://127.0.0.1:{port}", "--database", str(folder / "till.db"),
                              "--subscription", "Till"], {**env, "SPARKSYNC_TOKEN": token})

        s, mib = device_sync()
        with connect(f"sqlite:///{folder / 'till.db'}") as d:
            assert int(d.scalar('SELECT count(*) FROM "Item"')) == rows, "the device's first sync missed rows"
        out["device's first sync"] = (s, rows, mib)
        for step, modulus in (("merge, 1% changed", 100), ("merge, 10% changed", 10)):
            n = change(url, modulus, 1)
            s, mib = timed(["merge", "-c", str(cfg)], env)
            out[step] = (s, n, mib)
        # the device's download of both merges' changes (the rows of the 1% are among the 10%'s: n rows moved)
        s, mib = device_sync()
        out["device's sync after the merges"] = (s, n, mib)
        q = 'SELECT count(*), sum("qty") FROM "Item"'
        for replica in ("branch.db", "till.db"):
            with connect(f"sqlite:///{folder / replica}") as b, connect(url) as p:
                assert b.query(q) == p.query(q), f"{replica} does not hold the publisher's rows"
    return out


def run_kind(kind: str, sizes: list[int], pg_admin: str) -> dict[int, dict]:
    results = {}
    for n in sizes:
        if kind == "sqlite":
            results[n] = measure(kind, "", n)
            print(f"{kind} {n:,} rows: " + ", ".join(f"{k} {v[0]:.1f} s" for k, v in results[n].items()), flush=True)
            continue
        name = f"sparksync_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_admin, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        try:
            results[n] = measure(kind, pg_admin.rsplit("/", 1)[0] + "/" + name, n)
        finally:
            with psycopg.connect(pg_admin, autocommit=True) as c:
                c.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        print(f"{kind} {n:,} rows: " + ", ".join(f"{k} {v[0]:.1f} s" for k, v in results[n].items()), flush=True)
    return results


def marginal(results: dict[int, dict], step: str, a: int, b: int, c: int) -> float:
    """The step's marginal rows/s from ``b`` to ``c`` rows against the one from ``a`` to ``b``."""
    (ta, na, _), (tb, nb, _), (tc, nc, _) = (results[x][step] for x in (a, b, c))
    return ((nc - nb) / (tc - tb)) / ((nb - na) / (tb - ta)) if tc > tb and tb > ta else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--kinds", default="sqlite,postgresql")
    ap.add_argument("--pg", default=os.environ.get("SPARKSYNC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    sizes = sorted(int(x) for x in args.sizes.split(","))
    kinds = args.kinds.split(",")
    measured = {kind: run_kind(kind, sizes, args.pg) for kind in kinds}
    label = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
    result = Result("rows_scale", "How the cost grows with the rows", "bench/rows_scale.py")
    result.table(["publisher", "rows", "step", "seconds", "rows moved", "rows/s", "driver peak MiB"],
                 [[label[k], n, step, s, moved, moved / s, mib] for k, res in measured.items() for n, steps in res.items()
                  for step, (s, moved, mib) in steps.items()],
                 "Each step through the CLI, cold (a process of its own); one direct SQLite subscriber; the device's "
                 "first sync from `sparksync serve`. Driver peak: the command's Python process (not its JVM)")
    if len(sizes) >= 3:
        a, b, c = sizes[-3:]
        result.table(["publisher", "step", f"marginal rows/s {b:,} -> {c:,} vs {a:,} -> {b:,}"],
                     [[label[k], step, marginal(res, step, a, b, c)] for k, res in measured.items() for step in STEPS],
                     "1.0: the cost grows as the rows do; target >= 0.8 for setup and a 10% merge")
    result.lines("rows_scale.png", "Rows per second as the table grows", sizes,
                 {f"{label[k]}, {step}": [res[n][step][1] / res[n][step][0] for n in sizes]
                  for k, res in measured.items() for step in STEPS}, "rows in the table", "rows/s")
    result.save()


if __name__ == "__main__":
    main()
