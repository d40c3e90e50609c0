"""Latency under a sustained load: tracer tokens through continuous agents, against PostgreSQL's
logical replication under the same load.

One table (``item``: id, v, s) at two PostgreSQL publishers on the local server. A procedure on
the server commits one-row UPDATEs at a steady rate (``--rate`` transactions per second, paced
every 10 ms) for ``--warmup`` + ``--seconds``; latency is sampled during the last ``--seconds`` (the
steady state: agents that were idle when the load began first work off what piled up meanwhile).
Meanwhile:

- PostgreSQL's own subscription applies them; every ``--every`` seconds the bench inserts a marker
  row whose ``t`` is the publisher's ``clock_timestamp()``; a trigger at the subscriber (ENABLE
  ALWAYS: it fires in the apply worker) stamps ``arrived``. Latency = arrived - t.
- sparksync: ``sparksync logreader --continuous`` and ``sparksync distribute --continuous`` run as
  separate processes (as an operator runs them, with ``--polling-interval``); every ``--every``
  seconds the bench posts a tracer token (``sparksync.transactional.status.tracer.post``); latency = the
  token's commit at the subscriber - its commit at the publisher (MStracer_history).

The two systems are measured one after the other (never both loads at once on this machine).

    .venv/bin/python bench/tracer_latency.py [--rate 1000] [--seconds 30] [--warmup 5] [--every 0.5] [--polling 1 0.1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
from results import Result
from transactional_vs_pg_logical import make_db as make_item_db

from sparksync.topology import load_config
from sparksync.transactional.status import tracer

ROWS = 10_000
MARKER = "CREATE TABLE marker (id integer PRIMARY KEY, t timestamptz NOT NULL, arrived timestamptz)"
PACED = """CREATE OR REPLACE PROCEDURE paced(rate integer, seconds float8) LANGUAGE plpgsql AS $$
DECLARE
  started float8 := extract(epoch FROM clock_timestamp());
  i integer := 0;
  ahead float8;
BEGIN
  WHILE extract(epoch FROM clock_timestamp()) - started < seconds LOOP
    UPDATE item SET v = v + 1 WHERE id = i % 10000 + 1;
    COMMIT;
    i := i + 1;
    IF i % greatest(rate / 100, 1) = 0 THEN          -- every 10 ms of schedule: wait for the clock
      ahead := started + i::float8 / rate - extract(epoch FROM clock_timestamp());
      IF ahead > 0 THEN PERFORM pg_sleep(ahead); END IF;
    END IF;
  END LOOP;
  INSERT INTO load_done VALUES (i);
  COMMIT;
END $$"""
STAMP = """CREATE FUNCTION stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.arrived := clock_timestamp(); RETURN NEW; END $$"""


def make_db(admin: str, name: str, with_rows: bool) -> str:
    """The transactional benchmark's database (``item``), with the marker tables and the paced load."""
    u = make_item_db(admin, name, ROWS if with_rows else 0)
    with psycopg.connect(u, autocommit=True) as c:
        c.execute(MARKER)
        c.execute("CREATE TABLE load_done (n integer)")
        c.execute(PACED)
    return u


def load(u: str, rate: int, seconds: float) -> threading.Thread:
    def go() -> None:
        with psycopg.connect(u, autocommit=True) as c:
            c.execute("CALL paced(%s, %s)", (rate, seconds))
    t = threading.Thread(target=go)
    t.start()
    return t


def every(period: float, until: threading.Thread, action) -> int:
    """Call ``action(n)`` every ``period`` seconds while the load runs; returns how many times."""
    n = 0
    nxt = time.monotonic()
    while until.is_alive():
        action(n)
        n += 1
        nxt += period
        time.sleep(max(0.0, nxt - time.monotonic()))
    return n


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


def builtin(admin: str, tag: str, rate: int, seconds: float, warmup: float, period: float) -> tuple[list[float], float]:
    pub, sub = make_db(admin, f"bench_tlpub_{tag}", True), make_db(admin, f"bench_tlsub_{tag}", False)
    with psycopg.connect(sub, autocommit=True) as c:
        c.execute(STAMP)
        c.execute("CREATE TRIGGER stamp BEFORE INSERT ON marker FOR EACH ROW EXECUTE FUNCTION stamp()")
        c.execute("ALTER TABLE marker ENABLE ALWAYS TRIGGER stamp")
    slot = f"bench_tlsub_{tag}"
    with psycopg.connect(pub, autocommit=True) as c:
        c.execute("CREATE PUBLICATION bench FOR TABLE item, marker, load_done")
        # created here: CREATE SUBSCRIPTION creating it on the same server would wait for itself
        c.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    conninfo = f"host=127.0.0.1 port=5432 user=postgres dbname=bench_tlpub_{tag}"
    with psycopg.connect(sub, autocommit=True) as c:
        c.execute(f"CREATE SUBSCRIPTION bench CONNECTION '{conninfo}' PUBLICATION bench "
                  f"WITH (create_slot = false, slot_name = '{slot}')")
        while c.execute("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'").fetchone()[0]:
            time.sleep(0.1)
    try:
        worker = load(pub, rate, warmup + seconds)
        time.sleep(warmup)
        with psycopg.connect(pub, autocommit=True) as c:
            n = every(period, worker, lambda i: c.execute("INSERT INTO marker VALUES (%s, clock_timestamp())", (i,)))
        worker.join()
        with psycopg.connect(sub, autocommit=True) as c:
            deadline = time.monotonic() + 120
            while c.execute("SELECT count(*) FROM marker WHERE arrived IS NOT NULL").fetchone()[0] < n:
                if time.monotonic() > deadline:
                    raise TimeoutError("PostgreSQL's subscription did not deliver every marker")
                time.sleep(0.05)
            lat = [r[0] for r in c.execute("SELECT extract(epoch FROM arrived - t)::float8 FROM marker")]
        with psycopg.connect(pub, autocommit=True) as c:
            done = c.execute("SELECT n FROM load_done").fetchone()[0]
        return lat, done / (warmup + seconds)
    finally:
        with psycopg.connect(sub, autocommit=True) as c:
            c.execute("ALTER SUBSCRIPTION bench DISABLE")
            c.execute("ALTER SUBSCRIPTION bench SET (slot_name = NONE)")
            c.execute("DROP SUBSCRIPTION bench")


def ours(admin: str, tag: str, rate: int, seconds: float, warmup: float, period: float, polling: float, work: Path
         ) -> tuple[list[float], float, list[float]]:
    work.mkdir()
    pub, sub = make_db(admin, f"bench_tlspub_{tag}", True), make_db(admin, f"bench_tlssub_{tag}", False)
    cfg = work / "sparksync.toml"
    cfg.write_text(f'''
[distributor]
database = "sqlite:///{work / 'distribution.db'}"

[publisher]
name = "P"
database = "{pub}"
snapshot_dir = "{work / 'snap'}"

[[publications]]
name = "Bench"
kind = "transactional"
  [[publications.articles]]
  table = "item"

[[subscriptions]]
name = "one"
publication = "Bench"
database = "{sub}"
''', encoding="utf-8")
    cli = [str(Path(sys.executable).with_name("sparksync"))]
    subprocess.run([*cli, "setup", "-c", str(cfg)], check=True, stdout=subprocess.DEVNULL)
    topology = load_config(cfg)
    logs = {what: (work / f"{what}.log").open("w") for what in ("logreader", "distribute")}
    agents = [subprocess.Popen([*cli, what, "-c", str(cfg), "--continuous", "--polling-interval", str(polling)],
                               stdout=log, stderr=subprocess.STDOUT) for what, log in logs.items()]
    try:
        warm = tracer.post(topology, "Bench")           # the agents are up (Spark started) once it arrives
        deadline = time.monotonic() + 180
        while not tracer.report(topology, "Bench", warm).complete:
            if time.monotonic() > deadline or any(a.poll() is not None for a in agents):
                raise RuntimeError(f"the agents did not deliver a first token; see {work}/*.log")
            time.sleep(0.2)
        worker = load(pub, rate, warmup + seconds)
        time.sleep(warmup)
        ids: list[str] = []
        every(period, worker, lambda i: ids.append(tracer.post(topology, "Bench")))
        worker.join()
        deadline = time.monotonic() + 300
        reports = [tracer.report(topology, "Bench", t) for t in ids]
        while not all(r.complete for r in reports):
            if time.monotonic() > deadline:
                raise TimeoutError("sparksync did not deliver every tracer token")
            time.sleep(0.5)
            reports = [tracer.report(topology, "Bench", t) for t in ids]
        lat = [(r.subscribers["one"] - r.publisher_commit).total_seconds() for r in reports]
        to_dist = [r.publisher_to_distributor for r in reports]
        with psycopg.connect(pub, autocommit=True) as c:
            done = c.execute("SELECT n FROM load_done").fetchone()[0]
        return lat, done / (warmup + seconds), [x for x in to_dist if x is not None]
    finally:
        for a in agents:
            a.terminate()
        for a in agents:
            a.wait(30)
        for log in logs.values():
            log.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=1000, help="transactions per second at the publisher")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=5, help="seconds of load before sampling starts")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between tracer tokens / markers")
    ap.add_argument("--polling", type=float, nargs="+", default=[1.0, 0.1],
                    help="the agents' --polling-interval (one sparksync run each)")
    ap.add_argument("--pg-url", default=os.environ.get("SPARKSYNC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"))
    a = ap.parse_args()
    tag = uuid.uuid4().hex[:8]
    dbs = [f"bench_tlpub_{tag}", f"bench_tlsub_{tag}"]
    runs = []
    try:
        with tempfile.TemporaryDirectory() as d:
            pg, pg_rate = builtin(a.pg_url, tag, a.rate, a.seconds, a.warmup, a.every)
            for k, polling in enumerate(a.polling):
                dbs += [f"bench_tlspub_{tag}{k}", f"bench_tlssub_{tag}{k}"]
                runs.append((polling, *ours(a.pg_url, f"{tag}{k}", a.rate, a.seconds, a.warmup, a.every, polling,
                                            Path(d) / str(k))))
    finally:
        with psycopg.connect(a.pg_url, autocommit=True) as c:
            for db in dbs:
                c.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                          (db,))
                c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    result = Result("tracer_latency", "Latency under a sustained load (continuous agents)", "bench/tracer_latency.py")
    rows = [["PostgreSQL logical (marker rows)", f"{pg_rate:,.0f}", len(pg), statistics.median(pg),
             percentile(pg, 99), max(pg)]]
    for polling, ss, ss_rate, to_dist in runs:
        rows.append([f"sparksync, continuous agents, polling {polling:g} s (tracer tokens)", f"{ss_rate:,.0f}",
                     len(ss), statistics.median(ss), percentile(ss, 99), max(ss)])
        rows.append(["(of which publisher -> distributor)", "", len(to_dist), statistics.median(to_dist),
                     percentile(to_dist, 99), max(to_dist)])
    result.table(["system", "load txn/s", "tokens", "p50 s", "p99 s", "max s"], rows,
                 f"one-row UPDATE transactions at {a.rate:,}/s; after {a.warmup:g} s of load, a token or marker every "
                 f"{a.every:g} s for {a.seconds:g} s; latency from its commit at the publisher to its commit at the "
                 "subscriber")
    result.bars("tracer_latency.png", "Publisher -> subscriber latency under load",
                ["p50", "p99"], {"PostgreSQL logical": [statistics.median(pg), percentile(pg, 99)],
                                 **{f"sparksync, polling {polling:g} s": [statistics.median(ss), percentile(ss, 99)]
                                    for polling, ss, _, _ in runs}}, "seconds")
    result.save()


if __name__ == "__main__":
    main()
