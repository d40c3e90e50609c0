"""Merge throughput: one publisher, N subscribers, changes at the publisher and at every subscriber.

Measured in one run, side by side with the physical limit here: the raw bulk upsert rate of the
same rows into a plain SQLite table (executemany of INSERT ... ON CONFLICT DO UPDATE, one transaction),
and with --pg into a plain PostgreSQL table (COPY into a temporary table, then one INSERT ... SELECT ...
ON CONFLICT DO UPDATE: the faster of the plain ways here), the limit of an upload to a PostgreSQL publisher.

    .venv/bin/python bench/merge_throughput.py [--subscribers 10] [--publisher-changes 100000]
        [--subscriber-changes 10000] [--pg]      # --pg: the publisher is a PostgreSQL database
        [--handler]                              # also one subscriber with a no-op business logic handler

Prints rows/s per phase (wall time of the merge) and of the apply stage alone (time inside the
destinations' batch transactions, from the session summary), each against the raw rate; the
end-to-end time for N subscribers against one; and a warm --continuous-style round that moves one row. With
--handler, the one-subscriber run again with a business logic handler on the article whose methods accept every
row (bench/handler_cost.py's): the apply stage's rate against the same run without it, and the cost per row.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from results import Result

from sparksync.dialects import connect
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.provision import setup
from sparksync.spark.session import spark_session
from sparksync.topology import parse_topology

DDL = 'CREATE TABLE "Item" ("id" {int} PRIMARY KEY, "name" {text}, "qty" {int}, "price" {num})'


def raw_upsert_rate(rows: int, workdir: Path, repeats: int = 3) -> float:
    """The physical limit: an executemany of INSERT ... ON CONFLICT DO UPDATE of the changed rows
    into a plain table that holds their previous version (as a download finds them), one
    transaction, no replication. Best of ``repeats``."""
    best = 0.0
    for k in range(repeats):
        db = workdir / f"raw{k}.db"
        c = sqlite3.connect(db, isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute('CREATE TABLE "Item" ("id" INTEGER PRIMARY KEY, "name" TEXT, "qty" INTEGER, "price" NUMERIC(10,2), '
                  '"rowguid" UUID)')
        c.executemany('INSERT INTO "Item" VALUES (?, ?, 0, 1, ?)', [(i, f"n{i}", str(uuid.uuid4())) for i in range(rows)])
        data = [(i, f"n{i}", 1, 1) for i in range(rows)]
        t0 = time.perf_counter()
        c.execute("BEGIN")
        c.executemany('INSERT INTO "Item" ("id", "name", "qty", "price") VALUES (?, ?, ?, ?) ON CONFLICT ("id") '
                      'DO UPDATE SET "name" = excluded."name", "qty" = excluded."qty", "price" = excluded."price"', data)
        c.execute("COMMIT")
        best = max(best, rows / (time.perf_counter() - t0))
        c.close()
    return best


def raw_pg_upsert_rate(rows: int, pg_url: str, repeats: int = 3) -> float:
    """``raw_upsert_rate`` into PostgreSQL: the rows COPYed into a temporary table, then one INSERT ... SELECT ...
    ON CONFLICT DO UPDATE into a plain table holding their previous version (with a rowguid column and its
    index, as a published table has), one transaction. Best of ``repeats``."""
    import psycopg

    best = 0.0
    with psycopg.connect(pg_url, autocommit=True) as c:
        for _ in range(repeats):
            c.execute("DROP TABLE IF EXISTS sparksync_bench_raw")
            c.execute('CREATE TABLE sparksync_bench_raw ("id" integer PRIMARY KEY, "name" text, "qty" integer, '
                      '"price" numeric(10,2), "rowguid" uuid NOT NULL DEFAULT gen_random_uuid())')
            c.execute('CREATE UNIQUE INDEX ON sparksync_bench_raw ("rowguid")')
            c.execute('INSERT INTO sparksync_bench_raw ("id", "name", "qty", "price") '
                      "SELECT g, 'n' || g, 0, 1 FROM generate_series(0, %s) g", (rows - 1,))
            c.execute("VACUUM ANALYZE sparksync_bench_raw")
            data = [(i, f"n{i}", 1, 1) for i in range(rows)]
            t0 = time.perf_counter()
            with c.transaction():
                c.execute('CREATE TEMP TABLE sparksync_bench_st ("id" integer, "name" text, "qty" integer, '
                          '"price" numeric(10,2)) ON COMMIT DROP')
                with c.cursor().copy('COPY sparksync_bench_st FROM STDIN') as cp:
                    for row in data:
                        cp.write_row(row)
                c.execute('INSERT INTO sparksync_bench_raw ("id", "name", "qty", "price") SELECT * FROM sparksync_bench_st '
                          'ON CONFLICT ("id") DO UPDATE SET "name" = excluded."name", "qty" = excluded."qty", '
                          '"price" = excluded."price"')
            best = max(best, rows / (time.perf_counter() - t0))
        c.execute("DROP TABLE sparksync_bench_raw")
    return best


def build(workdir: Path, subs: int, pg_url: str | None, seed_rows: int, handler: bool = False):
    if pg_url:
        admin = pg_url
        name = f"sparksync_bench_{uuid.uuid4().hex[:8]}"
        import psycopg

        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        pub_url = admin.rsplit("/", 1)[0] + "/" + name
        types = {"int": "integer", "text": "text", "num": "numeric(10,2)"}
    else:
        pub_url, name = f"sqlite:///{workdir / 'pub.db'}", None
        types = {"int": "INTEGER", "text": "TEXT", "num": "NUMERIC(10,2)"}
    with connect(pub_url) as r:
        r.execute(DDL.format(**types))
        r.executemany(f'INSERT INTO "Item" VALUES ({r.p}, {r.p}, {r.p}, {r.p})',
                      [(i, f"n{i}", 0, 1) for i in range(seed_rows)])
    article: dict = {"table": "Item"}
    if handler:
        from handler_cost import NOOP

        (workdir / "bench_noop.py").write_text(NOOP)
        article["business_logic"] = "bench_noop:Noop"
    topo = parse_topology({
        "publisher": {"name": "P", "database": pub_url, "snapshot_dir": str(workdir / "snap")},
        "publications": [{"name": "Bench", "articles": [article], "generation_leveling_threshold": 10_000}],
        "subscriptions": [{"name": f"S{i}", "publication": "Bench", "database": f"sqlite:///{workdir / f's{i}.db'}"}
                          for i in range(subs)],
    }, workdir)
    return topo, name


def timed(agent: MergeAgent, **kw) -> tuple[float, list[float]]:
    """Wall time of one merge, and each destination's apply time (inside its transactions)."""
    t0 = time.perf_counter()
    summary = agent.run(MergeOptions(**kw))
    assert summary.ok, [s.errors for s in summary.subscriptions]
    wall = time.perf_counter() - t0
    direction = kw.get("exchange", "download")
    if direction == "upload":
        applied = [sum(s.total("upload").seconds for s in summary.subscriptions)]   # one destination
    else:
        applied = [s.total("download").seconds for s in summary.subscriptions]
    return wall, applied


def run(subs: int, pub_changes: int, sub_changes: int, pg_url: str | None, spark, handler: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as d:
        workdir = Path(d)
        seed = max(pub_changes, sub_changes)
        topo, pg_db = build(workdir, subs, pg_url, seed, handler)
        try:
            setup(topo, lambda: spark)
            agent = MergeAgent(topo, spark)
            # Warm-up: a round that moves a row each way, so the session's one-time costs (Python
            # workers, code generation) are paid before the clock runs, as in a --continuous agent.
            with connect(topo.publisher_url) as r:
                r.execute(f'UPDATE "Item" SET "qty" = -1 WHERE "id" = {seed - 1}')
            for i, s in enumerate(topo.subscriptions):
                with connect(topo.resolve_url(s.database)) as r:
                    r.execute(f'UPDATE "Item" SET "price" = 2 WHERE "id" = {seed - 2 - i}')
            timed(agent)
            with connect(topo.publisher_url) as r:
                r.execute(f'UPDATE "Item" SET "qty" = "qty" + 1 WHERE "id" < {pub_changes}')
            down, down_apply = timed(agent, exchange="download")
            for i, s in enumerate(topo.subscriptions):
                with connect(topo.resolve_url(s.database)) as r:
                    lo = i * sub_changes % seed
                    r.execute(f'UPDATE "Item" SET "name" = \'s{i}\' WHERE "id" >= {lo} AND "id" < {lo + sub_changes}')
            up, up_apply = timed(agent, exchange="upload")
            spread, _ = timed(agent, exchange="download")
            with connect(topo.publisher_url) as r:
                r.execute('UPDATE "Item" SET "qty" = -1 WHERE "id" = 0')
            timed(agent)
            with connect(topo.publisher_url) as r:
                r.execute('UPDATE "Item" SET "qty" = -2 WHERE "id" = 0')
            one, _ = timed(agent)
            return {"download_s": down, "download_rows": pub_changes * subs, "upload_s": up,
                    "upload_rows": sub_changes * subs, "spread_s": spread,
                    "spread_rows": sub_changes * subs * (subs - 1), "one_row_s": one,
                    "download_apply_rate": pub_changes / statistics.median(down_apply),
                    "upload_apply_rate": sub_changes * subs / up_apply[0]}
        finally:
            if pg_db:
                import psycopg

                with psycopg.connect(pg_url, autocommit=True) as c:
                    c.execute(f'DROP DATABASE "{pg_db}" WITH (FORCE)')


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subscribers", type=int, default=10)
    ap.add_argument("--publisher-changes", type=int, default=100_000)
    ap.add_argument("--subscriber-changes", type=int, default=10_000)
    ap.add_argument("--pg", action="store_true", help="also run with a PostgreSQL publisher")
    ap.add_argument("--handler", action="store_true", help="also one subscriber with a no-op business logic handler")
    ap.add_argument("--pg-url", default=os.environ.get("SPARKSYNC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"))
    a = ap.parse_args()
    spark = spark_session(os.environ.get("SPARK_MASTER", "local[*]"))
    with tempfile.TemporaryDirectory() as d:
        raw = raw_upsert_rate(a.publisher_changes, Path(d))
    print(f"raw bulk upsert into a plain SQLite table: {raw:,.0f} rows/s")
    raw_pg = {n: raw_pg_upsert_rate(n, a.pg_url) for n in (a.subscriber_changes, a.subscriber_changes * a.subscribers)} \
        if a.pg else {}
    for n, rate in raw_pg.items():
        print(f"raw bulk upsert of {n:,} rows into a plain PostgreSQL table: {rate:,.0f} rows/s")

    def at_destination(pg: str | None, phase: str, n: int) -> float:
        """The raw rate where ``phase`` writes with ``n`` subscribers: they are SQLite; the publisher ``pg`` or SQLite."""
        return raw_pg[a.subscriber_changes * n] if pg and phase == "upload" else raw

    configs = [("SQLite publisher", None)] + ([("PostgreSQL publisher", a.pg_url)] if a.pg else [])
    result = Result("merge_throughput", "Merge throughput", "bench/merge_throughput.py" + (" --pg" if a.pg else ""))
    chart: dict[str, list[float]] = {}
    phases: list[str] = []
    for publisher, pg in configs:
        one = run(1, a.publisher_changes, a.subscriber_changes, pg, spark)
        many = run(a.subscribers, a.publisher_changes, a.subscriber_changes, pg, spark)
        print(f"\n{publisher}")
        print(f"  {'phase':<54}{'rows':>10}{'seconds':>10}{'rows/s':>12}{'vs raw':>8}{'vs raw at destination':>22}")
        labels = {"download": "publisher changes -> every subscriber", "upload": "subscriber changes -> publisher",
                  "spread": "uploaded changes -> the other subscribers"}
        for n, res in ((1, one), (a.subscribers, many)):
            for phase in ("download", "upload", "spread"):
                rows, secs = res[f"{phase}_rows"], res[f"{phase}_s"]
                if not rows:
                    continue
                print(f"  {f'{labels[phase]}, {n} sub(s)':<54}{rows:>10,}{secs:>10.2f}{rows / secs:>12,.0f}"
                      f"{rows / secs / raw:>8.2f}{rows / secs / at_destination(pg, phase, n):>8.2f}")
        for n, res in ((1, one), (a.subscribers, many)):
            for phase, label in (("download", "download apply stage, per subscriber"),
                                 ("upload", "upload apply stage, at the publisher")):
                rate = res[f"{phase}_apply_rate"]
                print(f"  {f'{label}, {n} sub(s)':<54}{'':>20}{rate:>12,.0f}{rate / raw:>8.2f}"
                      f"{rate / at_destination(pg, phase, n):>8.2f}")
        if a.handler:
            handled = run(1, a.publisher_changes, a.subscriber_changes, pg, spark, handler=True)
            for phase, label in (("download", "download apply stage"), ("upload", "upload apply stage")):
                base, with_ = one[f"{phase}_apply_rate"], handled[f"{phase}_apply_rate"]
                cost = (1 / with_ - 1 / base) * 1e6
                line = (f"{label}, 1 sub, a no-op handler on the article: {with_:,.0f} rows/s, {with_ / base:.2f}x the "
                        f"same run without it ({base:,.0f}); {cost:.1f} us per row")
                print(f"  {line}")
                result.notes.append(f"{publisher}: {line}.")
        total = {k: v["download_s"] + v["upload_s"] + v["spread_s"] for k, v in (("one", one), ("many", many))}
        ratio = total["many"] / total["one"]
        print(f"  end-to-end time, {a.subscribers} subscribers vs 1: {ratio:.2f}x (target <= 6x)")
        print(f"  warm round moving one row to {a.subscribers} subscribers: {many['one_row_s']:.2f} s (target <= 1 s)")
        rows_out: list[list[object]] = []
        for n, res in ((1, one), (a.subscribers, many)):
            for phase in ("download", "upload", "spread"):
                rows, secs = res[f"{phase}_rows"], res[f"{phase}_s"]
                if rows:
                    rows_out.append([f"{labels[phase]}, {n} sub(s)", rows, secs, rows / secs, rows / secs / raw,
                                     rows / secs / at_destination(pg, phase, n)])
        for n, res in ((1, one), (a.subscribers, many)):
            for phase, what in (("download", "download apply stage, per subscriber"),
                                ("upload", "upload apply stage, at the publisher")):
                rate = res[f"{phase}_apply_rate"]
                rows_out.append([f"{what}, {n} sub(s)", "", "", rate, rate / raw, rate / at_destination(pg, phase, n)])
        into_pg = "".join(f"; of {n:,} rows into a plain PostgreSQL table {r:,.0f} rows/s" for n, r in raw_pg.items()) \
            if pg else ""
        result.table(["phase", "rows", "seconds", "rows/s", "vs raw", "vs raw at destination"], rows_out,
                     f"{publisher}; raw bulk upsert into a plain SQLite table: {raw:,.0f} rows/s{into_pg} "
                     "(vs raw at destination: against the raw upsert into the database the phase writes to)")
        result.notes += [f"{publisher}: end-to-end time, {a.subscribers} subscribers vs 1: {ratio:.2f}x (target <= 6x); "
                         f"warm round moving one row to {a.subscribers} subscribers: {many['one_row_s']:.2f} s "
                         "(target <= 1 s)."]
        phases = [r[0] for r in rows_out]
        chart[publisher] = [float(r[4]) for r in rows_out]
    result.bars("merge_throughput.png", "Merge phases as a fraction of a raw bulk upsert", phases, chart, "vs raw")
    result.save()


if __name__ == "__main__":
    main()
