"""Transactional replication against PostgreSQL's built-in logical replication, in the same run.

Copies of one table (``item``: id, v, s) on the local server: two replicated by PostgreSQL
(``CREATE PUBLICATION`` / ``CREATE SUBSCRIPTION`` between two databases; one subscription with the defaults,
one with ``streaming = on, binary = true``: a big transaction applied as it is decoded, values sent in
binary), one by sparksync (log
reader + distribution agent, a PostgreSQL subscriber, a SQLite distribution database). Each workload
runs at both publishers while replication is paused (the subscription disabled; the agents not
running), then the clock starts at the last commit: PostgreSQL's subscription is enabled, sparksync
runs one log reader pass and one distribution agent pass (warm Spark session). The time until the
subscriber holds the last change (a marker row committed last, polled every 10 ms) is the catch-up
time; rates and ratios are taken from it.

sparksync is measured two ways: one pass after the other (log reader, then distribution agent; with
1 stream and with ``--streams``), and as a pipeline, the way continuous agents run: the workload
runs again, then the log reader (read batches of ``--read-batch`` changes) and distribution agent
rounds run at the same time, each stored batch waking a round (as ``serve`` does), so delivery starts with
the first stored batch.

    .venv/bin/python bench/transactional_vs_pg_logical.py [--transactions 50000] [--rows 500000] [--streams 4]

Workloads: (a) single-row transactions (an UPDATE each, committed one by one, from a procedure on
the server), (b) one UPDATE of every row in one transaction.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
from results import Result

from sparksync.provision import setup
from sparksync.spark.session import spark_session
from sparksync.topology import parse_topology
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.distribution.logreader import read_publication, run_logreader

TABLE = "CREATE TABLE item (id integer PRIMARY KEY, v integer NOT NULL, s text NOT NULL)"
WORKER = """CREATE OR REPLACE PROCEDURE one_row_transactions(n integer) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    UPDATE item SET v = v + 1 WHERE id = i;
    COMMIT;
  END LOOP;
END $$"""


def url(base: str, db: str) -> str:
    return base.rsplit("/", 1)[0] + "/" + db


def make_db(admin: str, name: str, rows: int) -> str:
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    u = url(admin, name)
    with psycopg.connect(u, autocommit=True) as c:
        c.execute(TABLE)
        if rows:
            c.execute("INSERT INTO item SELECT g, 0, md5(g::text) FROM generate_series(1, %s) g", (rows,))
        c.execute(WORKER)
    return u


def wait_for(u: str, marker: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(u, autocommit=True) as c:
        while c.execute("SELECT count(*) FROM item WHERE id = %s", (marker,)).fetchone()[0] == 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{u}: marker {marker} did not arrive")
            time.sleep(0.01)


def workload(u: str, kind: str, n: int, marker: int) -> None:
    with psycopg.connect(u, autocommit=True) as c:
        if kind == "transactions":
            c.execute("CALL one_row_transactions(%s)", (n,))
        else:
            c.execute("UPDATE item SET v = v + 1")
        c.execute("INSERT INTO item VALUES (%s, 0, 'marker')", (marker,))     # the last commit


class Builtin:
    def __init__(self, admin: str, rows: int, tag: str, options: str = ""):
        self.pub = make_db(admin, f"bench_pgpub_{tag}", rows)
        self.sub = make_db(admin, f"bench_pgsub_{tag}", 0)
        self.slot = f"bench_pgsub_{tag}"
        with psycopg.connect(self.pub, autocommit=True) as c:
            c.execute("CREATE PUBLICATION bench FOR TABLE item")
            c.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,))
        conninfo = f"host=127.0.0.1 port=5432 user=postgres dbname=bench_pgpub_{tag}"
        with psycopg.connect(self.sub, autocommit=True) as c:
            c.execute(f"CREATE SUBSCRIPTION {self.slot} CONNECTION '{conninfo}' PUBLICATION bench "
                      f"WITH (create_slot = false, slot_name = '{self.slot}'{', ' + options if options else ''})")
            while c.execute("SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'").fetchone()[0]:
                time.sleep(0.1)

    def run(self, kind: str, n: int, marker: int) -> float:
        with psycopg.connect(self.sub, autocommit=True) as c:
            c.execute(f"ALTER SUBSCRIPTION {self.slot} DISABLE")
            while c.execute("SELECT count(*) FROM pg_stat_subscription WHERE subname = %s AND pid IS NOT NULL",
                            (self.slot,)).fetchone()[0]:
                time.sleep(0.05)       # the apply worker has stopped: nothing is applied during the workload
        workload(self.pub, kind, n, marker)
        t0 = time.perf_counter()
        with psycopg.connect(self.sub, autocommit=True) as c:
            c.execute(f"ALTER SUBSCRIPTION {self.slot} ENABLE")
        wait_for(self.sub, marker)
        return time.perf_counter() - t0

    def drop(self, admin: str) -> None:
        with psycopg.connect(self.sub, autocommit=True) as c:
            c.execute(f"ALTER SUBSCRIPTION {self.slot} DISABLE")
            c.execute(f"ALTER SUBSCRIPTION {self.slot} SET (slot_name = NONE)")
            c.execute(f"DROP SUBSCRIPTION {self.slot}")


class Sparksync:
    def __init__(self, admin: str, rows: int, tag: str, workdir: Path, streams: int, spark):
        self.pub = make_db(admin, f"bench_sspub_{tag}", rows)
        self.subs = {"one": make_db(admin, f"bench_sssub1_{tag}", 0), "many": make_db(admin, f"bench_sssubn_{tag}", 0),
                     "pipe": make_db(admin, f"bench_sssubp_{tag}", 0)}
        self.topology = parse_topology({
            "distributor": {"database": f"sqlite:///{workdir / 'distribution.db'}"},
            "publisher": {"name": "P", "database": self.pub, "snapshot_dir": str(workdir / "snap")},
            "publications": [{"name": "Bench", "kind": "transactional", "articles": [{"table": "item"}]}],
            "subscriptions": [{"name": "one", "publication": "Bench", "database": self.subs["one"],
                               "subscription_streams": 1},
                              {"name": "many", "publication": "Bench", "database": self.subs["many"],
                               "subscription_streams": streams},
                              {"name": "pipe", "publication": "Bench", "database": self.subs["pipe"]}],
        }, workdir)
        setup(self.topology, lambda: spark)
        self.agent = DistributionAgent(self.topology, spark)
        with psycopg.connect(self.pub, autocommit=True) as c:      # warm the session: one small round
            c.execute("UPDATE item SET v = v WHERE id = 1")
        run_logreader(self.topology)
        self.agent.run()

    def run(self, kind: str, n: int, marker: int) -> dict[str, float]:
        workload(self.pub, kind, n, marker)
        t0 = time.perf_counter()
        run_logreader(self.topology)
        read = time.perf_counter() - t0
        out = {"logreader": read}
        self._catch_up(["pipe"])        # (untimed) so the pipeline below delivers only its own workload
        for name in ("one", "many"):
            # the clock stops when the subscriber holds the last change (the agent's bookkeeping after
            # that, history and retention cleanup, is not apply time), as for PostgreSQL's subscription
            arrived: dict[str, float] = {}
            watcher = threading.Thread(target=lambda url=self.subs[name], seen=arrived: (
                wait_for(url, marker), seen.setdefault("t", time.perf_counter())))
            t1 = time.perf_counter()
            watcher.start()
            summary = self.agent.run(DistributeOptions([name]))
            assert summary.ok, summary.to_dict()
            watcher.join()
            out[name] = read + arrived["t"] - t1
        return out

    def pipeline(self, kind: str, n: int, marker: int, read_batch: int) -> float:
        """The workload again; then the log reader (in batches) and distribution rounds overlap, as in
        ``sparksync serve``: each batch the log reader stores wakes a distribution round."""
        workload(self.pub, kind, n, marker)
        stored = threading.Event()
        t0 = time.perf_counter()
        reader = threading.Thread(target=read_publication, args=(self.topology, "Bench", read_batch),
                                  kwargs={"stored": stored.set})
        reader.start()
        with psycopg.connect(self.subs["pipe"], autocommit=True) as c:
            def arrived() -> bool:
                return c.execute("SELECT count(*) FROM item WHERE id = %s", (marker,)).fetchone()[0] > 0
            while not arrived():
                stored.wait(1.0)
                stored.clear()
                summary = self.agent.run(DistributeOptions(["pipe"]))
                assert summary.ok, summary.to_dict()
            took = time.perf_counter() - t0
        reader.join()
        self._catch_up(["one", "many"])
        return took

    def _catch_up(self, names: list[str]) -> None:
        assert self.agent.run(DistributeOptions(names)).ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transactions", type=int, default=50_000)
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--read-batch", type=int, default=10_000, help="the pipeline's log reader read batch")
    ap.add_argument("--pg-url", default=os.environ.get("SPARKSYNC_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"))
    a = ap.parse_args()
    tag = uuid.uuid4().hex[:8]
    spark = spark_session(os.environ.get("SPARK_MASTER", "local[*]"))
    created: list[str] = []
    subscribed: list[Builtin] = []
    with tempfile.TemporaryDirectory() as d:
        try:
            rows = max(a.rows, a.transactions)
            created += [f"bench_pgpub_{tag}", f"bench_pgsub_{tag}"]
            builtin = Builtin(a.pg_url, rows, tag)
            subscribed.append(builtin)
            created += [f"bench_pgpub_{tag}s", f"bench_pgsub_{tag}s"]
            streaming = Builtin(a.pg_url, rows, f"{tag}s", "streaming = on, binary = true")
            subscribed.append(streaming)
            ours = Sparksync(a.pg_url, rows, tag, Path(d), a.streams, spark)
            created += [f"bench_sspub_{tag}", f"bench_sssub1_{tag}", f"bench_sssubn_{tag}", f"bench_sssubp_{tag}"]
            results = []
            for label, kind, n, changes in (("(a) single-row transactions", "transactions", a.transactions,
                                             a.transactions),
                                            ("(b) one UPDATE of every row", "update", 0, rows)):
                marker = -(len(results) + 1)
                pg = builtin.run(kind, n, marker)
                pgs = streaming.run(kind, n, marker)
                ss = ours.run(kind, n, marker)
                ss["pipe"] = ours.pipeline(kind, n, marker - 100, a.read_batch)
                results.append((label, changes, pg, pgs, ss))
            systems = (("one", "sparksync, 1 stream"), ("many", f"sparksync, {a.streams} streams"),
                       ("pipe", "sparksync pipelined, 1 stream"))
            head = (f"  {'workload':<32}{'changes':>10}{'system':>38}{'seconds':>10}{'changes/s':>12}{'vs PG':>8}"
                    f"{'vs PG streaming':>17}")
            print(f"\ncatch-up time from the last commit at the publisher to fully applied at the subscriber "
                  f"(sparksync: log reader + distribution agent; streams > 1: {a.streams})")
            print(head)
            rows_out: list[list[object]] = []
            for label, changes, pg, pgs, ss in results:
                lines = [(label, changes, "PostgreSQL logical", pg),
                         ("", "", "PostgreSQL logical, streaming + binary", pgs)]
                lines += [("", "", what, ss[name]) for name, what in systems]
                for first, count, what, secs in lines:
                    rows_out.append([first, count, what, secs, changes / secs, pg / secs, pgs / secs])
                    print(f"  {first:<32}{count if count == '' else f'{count:,}':>10}{what:>38}{secs:>10.2f}"
                          f"{changes / secs:>12,.0f}{pg / secs:>8.2f}{pgs / secs:>17.2f}")
                rows_out.append(["", "", "(of which log reader)", ss["logreader"], "", "", ""])
                print(f"  {'':<32}{'':>10}{'(of which log reader)':>38}{ss['logreader']:>10.2f}")
            print("  target (issue 50): sparksync with 1 stream >= 1.0x of PostgreSQL's rate")
            result = Result("transactional_vs_pg_logical", "Transactional replication vs PostgreSQL logical replication",
                            "bench/transactional_vs_pg_logical.py")
            result.table(["workload", "changes", "system", "seconds", "changes/s", "vs PG", "vs PG streaming"], rows_out,
                         "catch-up time from the last commit at the publisher to fully applied at the subscriber "
                         "(sparksync: log reader, then distribution agent; pipelined: both at once, the log reader in "
                         f"batches of {a.read_batch:,} changes; PostgreSQL streaming: a subscription with streaming = on, "
                         "binary = true); target (issue 50): 1 stream >= 1.0x PostgreSQL's rate")
            result.bars("transactional_vs_pg_logical.png", "Catch-up rate as a fraction of PostgreSQL's",
                        [label for label, *_ in results],
                        {"sparksync, 1 stream": [pg / ss["one"] for _, _, pg, _, ss in results],
                         f"sparksync, {a.streams} streams": [pg / ss["many"] for _, _, pg, _, ss in results],
                         "sparksync pipelined": [pg / ss["pipe"] for _, _, pg, _, ss in results],
                         "PostgreSQL, streaming + binary": [pg / pgs for _, _, pg, pgs, _ in results]},
                        "vs PostgreSQL logical replication", line=1.0, line_label="target 1.0x")
            result.save()
        finally:
            for b in subscribed:
                with contextlib.suppress(Exception):
                    b.drop(a.pg_url)
            with psycopg.connect(a.pg_url, autocommit=True) as c:
                for db in created:
                    c.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                              (db,))
                    c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


if __name__ == "__main__":
    main()
