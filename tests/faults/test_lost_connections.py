"""Lost connections and abandoned reads (issue 20, item 4).

A backend terminated while the agent is mid-batch (``pg_terminate_backend`` from another connection,
the agent held at a failpoint with ``!pause``): the apply task (merge) and the delivery (transactional,
one connection or subscription streams) reconnect before they try again, and the batch is applied
exactly once. A failed commit of a subscription stream is a typed error: retried after a reconnect when
the connection was lost, else a stream failure that falls back to one connection. A read stream closed
early by its consumer (the dialects' ``stream``, ``LogicalCapture.read_batch``) leaves no transaction
open.

Every subscriber logs each row its agent applies (a row trigger into ``applied``): an id logged twice
is a change applied twice.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from sparksync.dialects import connect
from sparksync.transactional.capture import capture_method
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.delivery.subscriber import position
from sparksync.transactional.distribution import database as dst
from sparksync.transactional.distribution.logreader import run_logreader
from tests.support.cluster import Cluster, session
from tests.support.databases import databases
from tests.support.transactional import TxTopology, build, setup_topology, vendor_rows

pytestmark = pytest.mark.spark

VENDOR = '"Purchasing"."Vendor"'
APPLIED_LOG = """
CREATE TABLE public.applied (id integer NOT NULL, op text NOT NULL);
CREATE FUNCTION public.log_applied() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN INSERT INTO public.applied VALUES (OLD."{key}", TG_OP);
  ELSE INSERT INTO public.applied VALUES (NEW."{key}", TG_OP); END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER log_applied AFTER INSERT OR UPDATE OR DELETE ON {table} FOR EACH ROW
  EXECUTE FUNCTION public.log_applied();
"""


def _log_applied(url: str, table: str, key: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(APPLIED_LOG.format(table=table, key=key))


def _applied(url: str) -> Counter:
    """How many times the agent applied each row (id -> count) since the last call; the log is emptied."""
    with psycopg.connect(url, autocommit=True) as c:
        return Counter(i for (i,) in c.execute("DELETE FROM public.applied RETURNING id").fetchall())


def _terminate_agent(admin_url: str, db_url: str, newest: bool = False, writing: bool = True) -> None:
    """Terminate the agent's backend at ``db_url``: the one inside a writing transaction (with
    ``newest``, the one of those that started last: a subscription's second stream), or (not
    ``writing``) the one idle between transactions; and wait until it is gone."""
    where = "state = 'idle in transaction' AND backend_xid IS NOT NULL" if writing else "state = 'idle'"
    deadline = time.monotonic() + 10
    with psycopg.connect(admin_url, autocommit=True) as c:
        while True:      # (a backend of a connection the test just closed may still be on its way out)
            pids = [p for (p,) in c.execute(
                f"SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' "
                f"AND {where} ORDER BY backend_start", (db_url.rsplit("/", 1)[1],)).fetchall()]
            if (pids and newest) or len(pids) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert pids and (newest or len(pids) == 1), f"agent backends where {where}: {pids}"
        row = c.execute("SELECT pg_terminate_backend(%s, 10000)", (pids[-1],)).fetchone()
        assert row is not None and row[0]


def _killed_at(failpoints, run: Callable[[], Any], *stops: tuple[str, str, Callable[[], None]]) -> Any:
    """``run()`` in a background thread, paused at each failpoint ``(point, key, kill)`` in turn and
    ``kill()`` there; its result."""
    failpoints(*(f"{point} {key} !pause" for point, key, _ in stops))
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(run)
        for point, key, kill in stops:
            try:
                failpoints.wait_paused(point, key)
                kill()
            finally:
                failpoints.resume(point, key)
        return future.result(timeout=300)


# -- merge: the apply task ------------------------------------------------------------------------

def _merge_ddl(kind: str) -> list[str]:
    return ['CREATE TABLE "T" ("id" integer PRIMARY KEY, "v" text, "n" integer)'] + \
        [f"INSERT INTO \"T\" VALUES ({i}, 'v{i}', 0)" for i in range(1, 11)]


@pytest.fixture(scope="module")
def merge_world(spark, tmp_path_factory, pg_admin_url) -> Iterator[Cluster]:
    with databases(tmp_path_factory.mktemp("lost-merge"), pg_admin_url) as dbs:
        c = Cluster(spark, dbs, "postgresql", {"S1": "postgresql"},
                    _merge_ddl, [{"table": "T"}])
        _log_applied(c.urls["S1"], '"T"', "id")
        yield c


def _rows(url: str, sql: str) -> list[tuple]:
    with connect(url) as r:
        return [tuple(x) for x in r.query(sql)]


def test_the_apply_task_reconnects_after_its_backend_is_terminated_mid_batch(merge_world, failpoints, pg_admin_url):
    w = merge_world
    w.sql("P", 'UPDATE "T" SET "v" = \'lost\', "n" = "n" + 1 WHERE "id" <= 3',
          "INSERT INTO \"T\" VALUES (100, 'new', 0)")
    _applied(w.urls["S1"])
    summary = _killed_at(failpoints, w.merge,
                         ("apply.before_commit", "S1:0", lambda: _terminate_agent(pg_admin_url, w.urls["S1"])))
    s1 = session(summary, "S1")
    assert summary.ok, s1.errors
    down = s1.total("download")
    assert (down.inserts, down.updates) == (1, 3)
    assert _applied(w.urls["S1"]) == Counter({1: 1, 2: 1, 3: 1, 100: 1})      # once each: nothing twice
    everything = 'SELECT "id", "v", "n" FROM "T" ORDER BY "id"'
    assert _rows(w.urls["S1"], everything) == _rows(w.urls["P"], everything)
    assert w.merge().ok                                                          # nothing left over
    assert _applied(w.urls["S1"]) == Counter()


# -- transactional: the delivery ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tx_world(spark, tmp_path_factory, pg_admin_url) -> Iterator[TxTopology]:
    """A PostgreSQL publisher; subscriber ``One`` applies over one connection, ``Streams`` over two
    subscription streams for every batch."""
    tmp = tmp_path_factory.mktemp("lost-tx")
    with databases(tmp, pg_admin_url) as dbs:
        tx = build(dbs, tmp, "postgresql", {"One": "postgresql", "Streams": "postgresql"},
                   subscription={"Streams": {"subscription_streams": 2, "subscription_streams_threshold": 0}},
                   seed_ids=range(1, 41))
        setup_topology(tx, spark)
        for name in tx.subscriber_urls:
            _log_applied(tx.subscriber_urls[name], VENDOR, "VendorID")
        yield tx


def _changes(tx: TxTopology, tag: str, new: range, deleted: int) -> Counter:
    """Updates of vendors 1..20, inserts of ``new``, a delete; what each subscriber must apply once."""
    tx.publish(*[f'UPDATE {VENDOR} SET "Name" = \'{tag}{i}\' WHERE "VendorID" = {i}' for i in range(1, 21)],
               vendor_rows("postgresql", new), f'DELETE FROM {VENDOR} WHERE "VendorID" = {deleted}')
    run_logreader(tx.topology)
    return Counter([*range(1, 21), *new, deleted])


def _delivered_once(tx: TxTopology, name: str, expected: Counter) -> None:
    applied = _applied(tx.subscriber_urls[name])
    assert applied == expected, {k: n for k, n in applied.items() if n != expected.get(k)}
    assert tx.subscriber_rows(name, "*") == tx.publisher_rows("*")


def _errors(summary) -> list[tuple[str, str]]:
    return [(s.subscription, s.message) for s in summary.subscriptions if not s.ok]


def _distribute(tx: TxTopology, spark) -> Callable[[], Any]:
    return lambda: DistributionAgent(tx.topology, spark).run(DistributeOptions())


def test_a_delivery_over_one_connection_reconnects_after_its_backend_is_terminated(tx_world, spark, failpoints,
                                                                                  pg_admin_url):
    """Terminated inside the batch's transaction, then again before the durability flush."""
    tx = tx_world
    url = tx.subscriber_urls["One"]
    expected = _changes(tx, "one", range(100, 105), 40)
    summary = _killed_at(failpoints, _distribute(tx, spark),
                         ("distribute.before_commit", "One:0", lambda: _terminate_agent(pg_admin_url, url)),
                         ("distribute.make_durable", "One", lambda: _terminate_agent(pg_admin_url, url, writing=False)))
    assert summary.ok, _errors(summary)
    one = next(s for s in summary.subscriptions if s.subscription == "One")
    assert one.errors == [] and one.batches == 1
    for name in tx.subscriber_urls:
        _delivered_once(tx, name, expected)


def test_a_stream_whose_backend_is_terminated_before_its_commit_is_finished_after_a_reconnect(
        tx_world, spark, failpoints, pg_admin_url):
    """Stream 0 commits, stream 1's connection is gone: the retry reconnects, reads the streams'
    watermarks and applies over one connection what stream 1 had not committed, nothing twice."""
    tx = tx_world
    expected = _changes(tx, "streams", range(110, 130), 39)
    url = tx.subscriber_urls["Streams"]
    summary = _killed_at(failpoints, _distribute(tx, spark),
                         ("distribute.before_commit", "Streams:0", lambda: _terminate_agent(pg_admin_url, url, newest=True)))
    assert summary.ok, _errors(summary)
    streams = next(s for s in summary.subscriptions if s.subscription == "Streams")
    # finished over one connection: stream 0 had committed (with nothing committed it goes over the streams again)
    assert (streams.errors, streams.batches, streams.parallel, streams.fallbacks) == ([], 1, 0, 0)
    for name in tx.subscriber_urls:
        _delivered_once(tx, name, expected)


FAIL_FIRST_COMMIT = """
CREATE SEQUENCE public.commits;
CREATE FUNCTION public.fail_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('public.commits') = 1 THEN
    RAISE EXCEPTION 'refused at commit' USING ERRCODE = '23514';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER fail_first_commit AFTER INSERT OR UPDATE OR DELETE ON "Purchasing"."Vendor"
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.fail_first_commit();
"""


def test_a_stream_commit_that_fails_is_a_stream_failure_and_the_batch_falls_back(tx_world, spark):
    """A deferred constraint refuses the first commit (not a lost connection): a typed error, the
    streams fall back to one connection, which applies the batch once."""
    tx = tx_world
    url = tx.subscriber_urls["Streams"]
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(FAIL_FIRST_COMMIT)
    try:
        expected = _changes(tx, "deferred", range(130, 140), 38)
        summary = _distribute(tx, spark)()
        assert summary.ok, _errors(summary)
        streams = next(s for s in summary.subscriptions if s.subscription == "Streams")
        assert (streams.fallbacks, streams.parallel, streams.errors) == (1, 0, [])
        for name in tx.subscriber_urls:
            _delivered_once(tx, name, expected)
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f"DROP TRIGGER fail_first_commit ON {VENDOR}")
            c.execute("DROP FUNCTION public.fail_first_commit(); DROP SEQUENCE public.commits")


def _watermark(tx: TxTopology, name: str, to: int | None = None) -> int:
    """The subscription's position at its subscriber (``to``: set every stream's to it first)."""
    with connect(tx.subscriber_urls[name]) as r:
        if to is not None:
            r.execute(f"UPDATE {r.meta('MSreplication_subscriptions')} SET transaction_timestamp = %s "
                      "WHERE subscription = %s", (to, name))
        at = position(r, "Purchasing", name)
    assert at is not None
    return at


def test_after_a_reconnect_a_subscriber_that_lost_committed_batches_is_not_trusted(tx_world, spark, failpoints,
                                                                                  pg_admin_url):
    """Batches are committed without waiting for the disk: a server that restarted may have lost the
    last ones, with their watermarks. Simulated by moving the watermarks back while the connection
    is lost: the delivery stops and claims no position (inside a batch, and before the durability
    flush), instead of going on past the lost commands."""
    tx = tx_world
    url = tx.subscriber_urls["One"]
    expected = _changes(tx, "kept", range(140, 143), 37)
    start = _watermark(tx, "One")

    def lose_batches(writing: bool, back_to: int) -> Callable[[], None]:
        def kill() -> None:
            _terminate_agent(pg_admin_url, url, writing=writing)
            _watermark(tx, "One", back_to)
        return kill

    summary = _killed_at(failpoints, _distribute(tx, spark),
                         ("distribute.before_commit", "One:0", lose_batches(True, start - 1)))
    one = next(s for s in summary.subscriptions if s.subscription == "One")
    assert not one.ok and "no longer has batches" in one.message and one.batches == 0
    assert _watermark(tx, "One", start) == start and _applied(url) == Counter()      # nothing was applied
    summary = _killed_at(failpoints, _distribute(tx, spark),
                         ("distribute.make_durable", "One", lose_batches(False, start)))
    one = next(s for s in summary.subscriptions if s.subscription == "One")
    assert not one.ok and "could not be made durable" in one.message and "no longer has batches" in one.message
    assert one.last_seqno == start                                                    # no position claimed
    with connect(tx.topology.distributor_url) as dist:
        p = dst.require_publication(dist, "Purchasing")
        assert {s.subscription: s.delivered_seqno for s in dst.subscriptions(dist, p.publication_id)}["One"] <= start
    _watermark(tx, "One", _watermark(tx, "Streams"))          # what it really has: the batch, as Streams
    for name in tx.subscriber_urls:
        _delivered_once(tx, name, expected)


# -- read streams closed early --------------------------------------------------------------------

def _no_transaction_left(replica, table: str) -> None:
    """The connection is idle, outside any transaction, and another one can lock the table at once."""
    assert replica.raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with psycopg.connect(replica.url, autocommit=True) as other:
        other.execute("BEGIN")
        other.execute("SET LOCAL lock_timeout = '2s'")
        other.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        other.execute("ROLLBACK")


def test_the_postgresql_stream_closed_early_leaves_no_transaction(tx_world):
    with connect(tx_world.publisher_url) as r:
        rows = r.dialect.stream(r, f'SELECT "VendorID" FROM {VENDOR} ORDER BY 1', [], 5)
        assert len(next(rows)) == 5
        rows.close()                      # the consumer stops early
        _no_transaction_left(r, VENDOR)
        assert r.scalar(f"SELECT count(*) FROM {VENDOR}") > 5     # and the connection goes on


def test_a_slot_read_closed_early_leaves_no_transaction(tx_world):
    tx = tx_world
    tx.publish(*[f'UPDATE {VENDOR} SET "CreditRating" = 1 WHERE "VendorID" = {i}' for i in range(1, 6)])
    with connect(tx.topology.distributor_url) as dist, connect(tx.publisher_url) as pub:
        p = dst.require_publication(dist, "Purchasing")
        reader = capture_method(pub).reader(pub, p, [a for a in p.articles if a.active], 1000)
        events = reader.read_batch(p.logreader_seqno)
        first = [next(events) for _ in range(3)]          # Begin and two of the five updates
        assert len(first) == 3
        events.close()
        _no_transaction_left(pub, VENDOR)
        assert not reader.confirm()                       # nothing was stored: the slot keeps it all


def test_the_sqlite_stream_closed_early_holds_no_read_snapshot(tmp_path):
    url = f"sqlite:///{tmp_path / 'read.db'}"
    with connect(url) as r, connect(url) as other:
        r.execute('CREATE TABLE "t" ("id" INTEGER PRIMARY KEY)')
        r.executemany('INSERT INTO "t" VALUES (?)', [(i,) for i in range(100)])
        rows = r.dialect.stream(r, 'SELECT "id" FROM "t" ORDER BY 1', [], 10)
        assert len(next(rows)) == 10
        rows.close()
        assert not r.raw.in_transaction
        other.execute('INSERT INTO "t" VALUES (1000)')
        assert r.scalar('SELECT count(*) FROM "t"') == 101                   # not the old snapshot
        assert other.query("PRAGMA wal_checkpoint(TRUNCATE)")[0][0] == 0    # no reader holds the log
