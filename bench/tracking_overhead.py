"""What change tracking costs: the same DML on a plain table and on a published (tracked) table.

Measured side by side in one run on SQLite and PostgreSQL; prints rows/s and the ratio
tracked / plain (1.0 = free). The tracking triggers only log which rows changed; the flush that turns
the log into merge metadata (``merge/tracking/pending.py``, run by the merge agent before it reads) is
timed after each operation: its rows/s, and the total (DML + flush) against the untracked DML.
Usage: .venv/bin/python bench/tracking_overhead.py [--rows N]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

from results import Result

from sparksync.dialects import connect
from sparksync.merge.publish.publication import apply_publication, plan_publication
from sparksync.merge.tracking import capture, pending
from sparksync.metadata import store
from sparksync.topology import parse_topology

DDL = {
    "sqlite": 'CREATE TABLE "{t}" ("id" INTEGER PRIMARY KEY, "name" TEXT, "qty" INTEGER, "price" NUMERIC(10,2))',
    "postgresql": 'CREATE TABLE "{t}" ("id" integer PRIMARY KEY, "name" text, "qty" integer, "price" numeric(10,2))',
}


def workload(r, table: str, n: int, after=None) -> dict[str, float]:
    """rows/s of each operation; ``after(op, rows)``: called after each one (not timed here)."""
    p = r.p
    out = {}
    after = after or (lambda op, rows: None)
    t0 = time.perf_counter()
    with r.transaction():
        r.executemany(f'INSERT INTO "{table}" ("id", "name", "qty", "price") VALUES ({p}, {p}, {p}, {p})',
                      [(i, f"n{i}", i % 7, i / 100) for i in range(n)])
    out["insert, row statements"] = n / (time.perf_counter() - t0)
    after("insert, row statements", n)
    t0 = time.perf_counter()
    with r.transaction():  # one multi-row statement: PostgreSQL's statement triggers see all rows at once
        r.execute(f'INSERT INTO "{table}" ("id", "name", "qty", "price") '
                  f'SELECT "id" + {n}, "name", "qty", "price" FROM "{table}"')
    out["insert, one statement"] = n / (time.perf_counter() - t0)
    after("insert, one statement", n)
    t0 = time.perf_counter()
    with r.transaction():
        r.execute(f'UPDATE "{table}" SET "qty" = "qty" + 1')
    out["bulk update"] = n / (time.perf_counter() - t0)
    after("bulk update", 2 * n)
    k = max(n // 50, 100)
    t0 = time.perf_counter()
    for i in range(k):
        with r.transaction():
            r.execute(f'UPDATE "{table}" SET "name" = {p} WHERE "id" = {p}', (f"x{i}", i))
    out["1-row transactions"] = k / (time.perf_counter() - t0)
    after("1-row transactions", k)
    t0 = time.perf_counter()
    with r.transaction():
        r.execute(f'DELETE FROM "{table}"')
    out["bulk delete"] = n / (time.perf_counter() - t0)
    after("bulk delete", 2 * n)
    return out


def run(kind: str, url: str, n: int, mode: str = "triggers") -> dict[str, tuple[float, float]]:
    """``mode``: how the tracked table's changes are captured (``[publisher] change_capture``): "triggers", or
    on PostgreSQL "log" (read from the write-ahead log by the flush: the writer pays no trigger)."""
    with connect(url) as r:
        for t in ("plain", "tracked"):
            r.execute(DDL[kind].format(t=t))
        topo = parse_topology({"publisher": {"name": "B", "database": url},
                               "publications": [{"name": "P", "articles": [{"table": "tracked"}]}]}, Path("."))
        plan = plan_publication(r, topo.publications[0])
        capture.prepare(r, mode)
        with r.transaction():
            store.install_metadata(r)
            apply_publication(r, topo, plan)
        plain = workload(r, "plain", n)
        flushed: dict[str, tuple[int, float]] = {}
        decoded: dict[str, float] = {}

        def flush(op: str, rows: int) -> None:
            if mode == "log":          # the log read alone, first (a peek: the flush reads the same again)
                t0 = time.perf_counter()
                entries = r.dialect.peek_log(r, pending._articles(r)[1])
                decoded[op] = len(entries) / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            pending.flush(r)
            flushed[op] = (rows, time.perf_counter() - t0)

        tracked = workload(r, "tracked", n, flush)
    out = {}
    for op, (rows, seconds) in flushed.items():
        per = n if op != "1-row transactions" else max(n // 50, 100)    # what the rates are per
        total = 1.0 / (1.0 / tracked[op] + seconds / per)             # the same unit, DML + flush
        out[op] = (plain[op], tracked[op], rows / seconds if seconds > 0 else float("inf"), total, decoded.get(op))
    return out


def on_both(run, rows: int, pg_admin: str, pg_modes: dict[str, dict] | None = None
            ) -> dict[str, dict[str, tuple[float, float]]]:
    """``run(kind, url, rows)`` on a new SQLite file and a new PostgreSQL database (dropped after); ``pg_modes``:
    PostgreSQL runs by their label, each with these keywords of ``run`` (default: one, "PostgreSQL")."""
    import psycopg

    out = {}
    with TemporaryDirectory() as d:
        out["SQLite"] = run("sqlite", f"sqlite:///{Path(d) / 'bench.db'}", rows)
    for label, kw in (pg_modes or {"PostgreSQL": {}}).items():
        name = f"sparksync_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_admin, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        try:
            out[label] = run("postgresql", pg_admin.rsplit("/", 1)[0] + "/" + name, rows, **kw)
        finally:
            with psycopg.connect(pg_admin, autocommit=True) as c:
                c.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    return out


def main_with(run, name: str, title: str, variant: str, ratio: str, caption: str, chart_title: str) -> None:
    """Parse ``--rows`` / ``--pg``, run ``run`` on both databases (:func:`on_both`) and save, as
    ``name``, the table (plain and ``variant`` rows/s, their ``ratio``) and the chart of the ratios."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--pg", default=os.environ.get("SPARKSYNC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    out = on_both(run, args.rows, args.pg)
    result = Result(name, title, f"bench/{name}.py")
    result.table(["database", "operation", "plain rows/s", f"{variant} rows/s", ratio],
                 [[db, op, p, t, t / p] for db, ops in out.items() for op, (p, t) in ops.items()],
                 f"{args.rows:,} rows; {caption}")
    ops = list(next(iter(out.values())))
    result.bars(f"{name}.png", chart_title, ops,
                {db: [t / p for p, t in res.values()] for db, res in out.items()},
                 ratio + (" (1.0 = free)" if variant == "tracked" else ""))
    result.save()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--pg", default=os.environ.get("SPARKSYNC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    out = on_both(run, args.rows, args.pg, {"PostgreSQL, triggers": {"mode": "triggers"},
                                            "PostgreSQL, log": {"mode": "log"}})
    result = Result("tracking_overhead", "What change tracking costs", "bench/tracking_overhead.py")
    result.table(["database", "operation", "plain rows/s", "tracked rows/s", "tracked / plain", "flush rows/s",
                  "tracked + flush / plain", "log read rows/s"],
                 [[db, op, p, t, t / p, f, tot / p, "" if read is None else read]
                  for db, ops in out.items() for op, (p, t, f, tot, read) in ops.items()],
                 f"{args.rows:,} rows; the same DML on an untracked and a published (tracked) table. The triggers "
                 "log which rows changed (PostgreSQL, log: no trigger, the server's write-ahead log holds them); "
                 "the flush (timed after each operation, as the merge agent runs it before it reads) writes their "
                 "merge metadata, reading the log's changes first where the changes are captured from it: its "
                 "rows/s, and DML + flush against the untracked DML; log read: the agent's read of the server's "
                 "log into tracking entries alone (a peek before the flush), in changes/s (target, issue 50: the "
                 "flush >= 150,000 changes/s)")
    ops = list(next(iter(out.values())))
    result.bars("tracking_overhead.png", "Tracked DML as a fraction of untracked DML", ops,
                {**{f"{db} DML": [t / p for p, t, *_ in res.values()] for db, res in out.items()},
                 **{f"{db} DML + flush": [tot / p for p, _, _, tot, _ in res.values()] for db, res in out.items()}},
                "tracked / plain (1.0 = free)")
    result.save()


if __name__ == "__main__":
    main()
