"""Metadata retention cleanup at a publisher holding a year's worth of history, and what it costs the
application writing meanwhile.

A published table of 10,000 rows gets 1,000 closed generations, 35 days old, holding 800,000
tombstones and 200,000 contents rows of rows deleted while tracking was bypassed (1M metadata rows;
written directly into the metadata tables, as a year of merges would have left them). Then ``cleanup``
runs while another connection makes one-row tracked updates in a loop; the same writer runs alone
first for the baseline. Printed per database: rows removed, seconds, rows/s, delete steps, the
longest step (a transaction), and the writer's longest and 99th-percentile wait with and without the
cleanup running. Target: no application write waits more than one second.

Usage: .venv/bin/python bench/cleanup.py [--tombstones N] [--orphans N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import threading
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

from results import Result

from sparksync.dialects import connect
from sparksync.merge.maintenance.cleanup import clean_replica
from sparksync.merge.publish.publication import apply_publication, plan_publication
from sparksync.merge.tracking.generations import make_generation
from sparksync.merge.tracking.pending import flush
from sparksync.metadata import store
from sparksync.topology import parse_topology

DDL = {
    "sqlite": 'CREATE TABLE "item" ("id" INTEGER PRIMARY KEY, "name" TEXT, "qty" INTEGER)',
    "postgresql": 'CREATE TABLE "item" ("id" integer PRIMARY KEY, "name" text, "qty" integer)',
}
GENERATIONS = 1_000
ROWS = 10_000


def _series(kind: str, n: int) -> str:
    """A query of n rows numbered 0..n-1 (column i) and a fresh random GUID (column g)."""
    if kind == "sqlite":
        return (f"WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < {n}) "
                "SELECT i, lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) "
                "|| '-a' || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))) AS g FROM s")
    return f"SELECT i, gen_random_uuid() AS g FROM generate_series(0, {n - 1}) AS i"


def build(kind: str, url: str, tombstones: int, orphans: int) -> None:
    with connect(url) as r:
        r.execute(DDL[kind])
        p = r.p
        with r.transaction():
            r.executemany(f'INSERT INTO "item" ("id", "name", "qty") VALUES ({p}, {p}, {p})',
                          [(i, f"n{i}", i % 7) for i in range(ROWS)])
        topo = parse_topology({"publisher": {"name": "B", "database": url},
                               "publications": [{"name": "P", "retention": 14, "articles": [{"table": "item"}]}]},
                              Path("."))
        plan = plan_publication(r, topo.publications[0])
        with r.transaction():
            store.install_metadata(r)
            apply_publication(r, topo, plan)
        nick = int(r.scalar(f"SELECT nickname FROM {r.meta('sysmergearticles')}"))
        old = store.utcnow() - dt.timedelta(days=35)
        first = int(r.scalar(f"SELECT coalesce(max(generation), 0) FROM {r.meta('MSmerge_genhistory')}")) + 1
        with r.transaction():
            store.insert_rows(r, "MSmerge_genhistory",
                              ("generation", "guidsrc", "pubid", "genstatus", "settled", "nicknames", "changecount",
                               "coldate"),
                              [(first + k, str(uuid.uuid4()), None, 1, 1, [1],
                                (tombstones + orphans) // GENERATIONS, old) for k in range(GENERATIONS)])
            lineage = r.dialect.json_literal('{"1": 1}')
            r.execute(f"INSERT INTO {r.meta('MSmerge_tombstone')} (tablenick, rowguid, type, lineage, generation) "
                      f"SELECT {nick}, g, 1, {lineage}, {first} + i % {GENERATIONS} FROM ({_series(kind, tombstones)}) s")
            r.execute(f"INSERT INTO {r.meta('MSmerge_contents')} (tablenick, rowguid, generation, lineage) "
                      f"SELECT {nick}, g, {first} + i % {GENERATIONS}, {lineage} FROM ({_series(kind, orphans)}) s")
        make_generation(r, 1)                  # the open generation moves above the history
        if kind == "postgresql":
            r.execute("ANALYZE")


def writer(url: str, stop: threading.Event, waits: list[float]) -> None:
    with connect(url) as r:
        p, i = r.p, 0
        while not stop.is_set():
            i += 1
            t0 = time.perf_counter()
            with r.transaction():
                r.execute(f'UPDATE "item" SET "qty" = "qty" + 1 WHERE "id" = {p}', (i % ROWS,))
            waits.append(time.perf_counter() - t0)


def with_writer(url: str, work) -> tuple[object, list[float]]:
    stop, waits = threading.Event(), []
    t = threading.Thread(target=writer, args=(url, stop, waits))
    t.start()
    try:
        out = work()
    finally:
        stop.set()
        t.join()
    return out, waits


def p99(xs: list[float]) -> float:
    return sorted(xs)[int(len(xs) * 0.99)] if xs else 0.0


def run(kind: str, url: str, tombstones: int, orphans: int) -> dict:
    build(kind, url, tombstones, orphans)
    _, alone = with_writer(url, lambda: time.sleep(3))
    t0 = time.perf_counter()

    def clean():
        with connect(url) as r:
            return clean_replica(r, "B", "publisher", store.utcnow(), orphans=True)

    result, during = with_writer(url, clean)
    seconds = time.perf_counter() - t0
    with connect(url) as r:
        flush(r)                               # (the tracking tables are read after the tracking log's flush)
        left = int(r.scalar(f"SELECT count(*) FROM {r.meta('MSmerge_tombstone')}"))
    return {"kind": kind, "removed": result.total, "detail": result.removed, "seconds": seconds,
            "steps": result.steps, "longest_step": result.longest_step, "left": left,
            "alone_max": max(alone), "alone_p99": p99(alone), "during_max": max(during), "during_p99": p99(during),
            "writes": len(during)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tombstones", type=int, default=800_000)
    ap.add_argument("--orphans", type=int, default=200_000)
    ap.add_argument("--pg", default=os.environ.get("SPARKSYNC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    results = []
    with TemporaryDirectory() as d:
        results.append(run("sqlite", f"sqlite:///{d}/cleanup.db", args.tombstones, args.orphans))
    import psycopg

    name = f"bench_cleanup_{os.getpid()}"
    with psycopg.connect(args.pg, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        results.append(run("postgresql", args.pg.rsplit("/", 1)[0] + f"/{name}", args.tombstones, args.orphans))
    finally:
        with psycopg.connect(args.pg, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    result = Result("cleanup", "Retention cleanup of 1M metadata rows, with application writes running",
                    "bench/cleanup.py")
    result.table(["database", "removed", "s", "rows/s", "steps", "longest step s", "tombstones left",
                  "writes during", "write wait max s (alone)", "p99 (alone)", "max s (during cleanup)", "p99 (during)"],
                 [[x["kind"], x["removed"], x["seconds"], x["removed"] / x["seconds"], x["steps"], x["longest_step"],
                   x["left"], x["writes"], x["alone_max"], x["alone_p99"], x["during_max"], x["during_p99"]]
                  for x in results],
                 f"{args.tombstones:,} tombstones + {args.orphans:,} orphaned contents rows in {GENERATIONS:,} "
                 "generations; one-row tracked updates run meanwhile (target: no write waits more than 1 s)")
    result.bars("cleanup.png", "Longest wait of a one-row tracked update", [x["kind"] for x in results],
                {"alone": [x["alone_max"] for x in results], "during cleanup": [x["during_max"] for x in results]},
                "seconds", line=1.0, line_label="target: 1 s")
    result.notes += [f"{x['kind']}: removed {x['detail']}" for x in results]
    result.save()


if __name__ == "__main__":
    main()
