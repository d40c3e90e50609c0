"""The floor of a leaner change-tracking design, measured: what the same DML costs when its trigger
only appends (table, row, operation) to an unindexed log table, against the same DML untracked.

sparksync's tracking triggers (``bench/tracking_overhead.py``) write each changed row's metadata in
the write path (rowguid, contents with a lineage bump, tombstones). The "lean trigger" design of
issue 13 records only which row changed and moves the metadata work to a set-based flush before a
merge reads or applies; this script measures the write path that design would leave, so its gain is
known before it is built (docs/benchmarks.md keeps the latest run).

    .venv/bin/python bench/tracking_floor.py [--rows 50000]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from results import Result

OPS = ("insert, row statements", "insert, one statement", "bulk update", "1-row transactions", "bulk delete")


def sqlite_run(path: Path, lean: bool, n: int) -> dict[str, float]:
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=NORMAL")
    c.execute('CREATE TABLE t ("id" integer PRIMARY KEY, "name" text, "qty" integer, "price" numeric(10,2))')
    if lean:
        c.execute("CREATE TABLE log (tablenick integer, rid integer, op integer)")
        for op, row, k in (("INSERT", "NEW", 1), ("UPDATE", "NEW", 2), ("DELETE", "OLD", 3)):
            c.execute(f"CREATE TRIGGER t_{op.lower()} AFTER {op} ON t BEGIN "
                      f"INSERT INTO log VALUES (30, {row}.rowid, {k}); END")
    out = {}
    t0 = time.perf_counter()
    c.execute("BEGIN")
    c.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(i, f"n{i}", i % 7, i / 100) for i in range(n)])
    c.execute("COMMIT")
    out[OPS[0]] = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    c.execute("BEGIN")
    c.execute(f"INSERT INTO t SELECT id + {n}, name, qty, price FROM t")
    c.execute("COMMIT")
    out[OPS[1]] = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    c.execute("BEGIN")
    c.execute("UPDATE t SET qty = qty + 1")
    c.execute("COMMIT")
    out[OPS[2]] = 2 * n / (time.perf_counter() - t0)
    k = max(n // 50, 100)
    t0 = time.perf_counter()
    for i in range(k):
        c.execute("BEGIN")
        c.execute("UPDATE t SET name = ? WHERE id = ?", (f"x{i}", i))
        c.execute("COMMIT")
    out[OPS[3]] = k / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    c.execute("BEGIN")
    c.execute("DELETE FROM t")
    c.execute("COMMIT")
    out[OPS[4]] = 2 * n / (time.perf_counter() - t0)
    c.close()
    return out


def pg_run(url: str, lean: bool, n: int) -> dict[str, float]:
    t = "lean" if lean else "plain"
    out = {}
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"CREATE TABLE {t} (id integer PRIMARY KEY, name text, qty integer, price numeric(10,2), "
                  "row_guid uuid DEFAULT gen_random_uuid())")
        if lean:
            c.execute("CREATE TABLE log (tablenick integer, rowguid uuid, op smallint)")
            for op, ref, src, k in (("INSERT", "NEW TABLE AS new_rows", "new_rows", 1),
                                    ("UPDATE", "NEW TABLE AS new_rows", "new_rows", 2),
                                    ("DELETE", "OLD TABLE AS old_rows", "old_rows", 3)):
                c.execute(f"CREATE FUNCTION lean_{op.lower()}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                          "IF current_setting('sparksync.applying', true) = 'on' THEN RETURN NULL; END IF; "
                          f"INSERT INTO log SELECT 30, row_guid, {k} FROM {src}; RETURN NULL; END $$")
                c.execute(f"CREATE TRIGGER lean_{op.lower()} AFTER {op} ON lean REFERENCING {ref} "
                          f"FOR EACH STATEMENT EXECUTE FUNCTION lean_{op.lower()}()")
        t0 = time.perf_counter()
        with c.transaction(), c.cursor() as cur:
            cur.executemany(f"INSERT INTO {t} (id, name, qty, price) VALUES (%s, %s, %s, %s)",
                            [(i, f"n{i}", i % 7, i / 100) for i in range(n)])
        out[OPS[0]] = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        with c.transaction():
            c.execute(f"INSERT INTO {t} (id, name, qty, price) SELECT id + {n}, name, qty, price FROM {t}")
        out[OPS[1]] = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        with c.transaction():
            c.execute(f"UPDATE {t} SET qty = qty + 1")
        out[OPS[2]] = 2 * n / (time.perf_counter() - t0)
        k = max(n // 50, 100)
        t0 = time.perf_counter()
        for i in range(k):
            with c.transaction():
                c.execute(f"UPDATE {t} SET name = %s WHERE id = %s", (f"x{i}", i))
        out[OPS[3]] = k / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        with c.transaction():
            c.execute(f"DELETE FROM {t}")
        out[OPS[4]] = 2 * n / (time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--pg-url", default=os.environ.get("SPARKSYNC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"))
    a = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as d:
        results["SQLite"] = {lean: sqlite_run(Path(d) / f"{lean}.db", lean, a.rows) for lean in (False, True)}
    db = f"bench_floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(a.pg_url, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{db}"')
    try:
        url = a.pg_url.rsplit("/", 1)[0] + "/" + db
        results["PostgreSQL"] = {lean: pg_run(url, lean, a.rows) for lean in (False, True)}
    finally:
        with psycopg.connect(a.pg_url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    result = Result("tracking_floor", "The floor of lean change tracking (a trigger that only logs the changed row)",
                    "bench/tracking_floor.py")
    rows = [[kind, op, f"{r[False][op]:,.0f}", f"{r[True][op]:,.0f}", r[True][op] / r[False][op]]
            for kind, r in results.items() for op in OPS]
    result.table(["database", "operation", "plain rows/s", "lean-logged rows/s", "lean / plain"], rows,
                 f"{a.rows:,} rows; the same DML on an untracked table and on one whose trigger only appends "
                 "(table, row, operation) to an unindexed log (SQLite: a row trigger; PostgreSQL: a statement "
                 "trigger over the transition table). Compare with tracked / plain in 'What change tracking costs'")
    result.bars("tracking_floor.png", "Lean change tracking: DML rate vs untracked",
                list(OPS), {kind: [r[True][op] / r[False][op] for op in OPS] for kind, r in results.items()},
                "lean / plain")
    result.save()


if __name__ == "__main__":
    main()
