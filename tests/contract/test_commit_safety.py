"""Commit safety on PostgreSQL: a transaction in flight while its generation is closed is never lost.

Several transactions write at once. An application's transaction only appends to the tracking log,
which a flush reads once it has committed: its changes go to the generation open then. A flush writes
into the open generation and holds it as a writer until it ends. The tests hold transactions open
across make_generation and an enumeration, then prove their changes are enumerated once they commit.
"""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest

from sparksync.dialects import connect
from sparksync.merge.tracking import pending
from sparksync.merge.tracking.generations import enumeration_bound, make_generation
from tests.support.publishing import make_tables, publish, rows_of


def enumerate_window(r, after: int, upto: int) -> list[str]:
    rows = r.query(f"SELECT rowguid::text FROM {r.meta('MSmerge_contents')} WHERE generation > %s AND generation <= %s",
                   (after, upto))
    return [x for (x,) in rows]


@pytest.fixture
def pg_pub(dbs, pg_admin_url):
    url = dbs.url("postgresql", "safety")
    make_tables(url, "postgresql")
    publish(url, [{"table": "Parent"}])
    return url


@pytest.mark.parametrize("isolation", ["READ COMMITTED", "REPEATABLE READ"])
def test_transaction_in_flight_across_make_generation_is_enumerated_later(pg_pub, isolation):
    url = pg_pub
    with connect(url) as agent, psycopg.connect(url, autocommit=True) as app, psycopg.connect(url, autocommit=True) as other:
        app.execute(f"BEGIN ISOLATION LEVEL {isolation}")
        app.execute('INSERT INTO "Parent" ("id", "name") VALUES (1, \'in flight\')')
        g_app = agent.dialect.current_open_generation(agent)

        res = make_generation(agent, 1)
        assert res.unsettled == [], "an application's transaction holds no generation: the log is flushed after it"
        bound = enumeration_bound(agent)
        seen = enumerate_window(agent, 0, bound)
        assert seen == [], "nothing of the transaction in flight is enumerated before it commits"

        # A later transaction goes to the new open generation and commits first.
        other.execute('INSERT INTO "Parent" ("id", "name") VALUES (2, \'later\')')
        # The in-flight transaction writes more, then commits after the close and the enumeration.
        app.execute('INSERT INTO "Parent" ("id", "name") VALUES (3, \'in flight too\')')
        app.execute("COMMIT")

        res2 = make_generation(agent, 1)
        assert g_app in res2.closed and res2.unsettled == []
        bound2 = enumeration_bound(agent)
        seen += enumerate_window(agent, bound, bound2)
        parents = rows_of(agent, "Parent")
        expected = [str(g) for (g,) in agent.query(f"SELECT rowguid FROM {parents} AS t WHERE id IN (1, 2, 3)")]
        assert sorted(seen) == sorted(expected)


def test_enumeration_waits_while_a_flush_holds_generation(pg_pub):
    url = pg_pub
    with connect(url) as agent, connect(url) as flusher, psycopg.connect(url, autocommit=True) as app:
        app.execute('INSERT INTO "Parent" ("id", "name") VALUES (10, \'committed\')')
        g = agent.dialect.current_open_generation(agent)
        flusher.begin()
        assert pending.flush(flusher) == 1        # in flusher's transaction, still open
        make_generation(agent, 1)
        assert enumeration_bound(agent) == g - 1, "a generation a flush writes into is not enumerated yet"
        app.execute('UPDATE "Parent" SET "name" = \'held\' WHERE id = 10')   # skipped by the held flush
        make_generation(agent, 1)
        assert enumeration_bound(agent) == g - 1
        flusher.rollback()                        # a rolled back flush gives its entries back, and settles
        make_generation(agent, 1)
        bound = enumeration_bound(agent)
        assert bound >= g
        parents = rows_of(agent, "Parent")
        assert enumerate_window(agent, 0, bound) == [str(agent.scalar(f"SELECT rowguid FROM {parents} AS t WHERE id = 10"))]


def test_an_application_transaction_in_flight_does_not_hold_enumeration(pg_pub):
    url = pg_pub
    with connect(url) as agent, psycopg.connect(url, autocommit=True) as app:
        app.execute('INSERT INTO "Parent" ("id", "name") VALUES (10, \'committed\')')
        app.execute("BEGIN")
        app.execute('UPDATE "Parent" SET "name" = \'held\' WHERE id = 10')
        make_generation(agent, 1)
        first = enumerate_window(agent, 0, enumeration_bound(agent))
        assert len(first) == 1
        app.execute("ROLLBACK")                   # rolled back: nothing logged, nothing to send
        make_generation(agent, 1)
        assert enumerate_window(agent, enumeration_bound(agent) - 100, enumeration_bound(agent)) == first


def test_concurrent_writers_every_change_enumerated_exactly_once(pg_pub):
    """Writers commit continuously while an agent closes generations and enumerates."""
    url = pg_pub
    errors: list[BaseException] = []
    next_id = iter(range(1000, 10_000_000))
    id_lock = threading.Lock()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with psycopg.connect(url, autocommit=True) as c:
                for _ in range(60):
                    c.execute(rng.choice(["BEGIN ISOLATION LEVEL READ COMMITTED", "BEGIN ISOLATION LEVEL REPEATABLE READ"]))
                    for _ in range(rng.randint(1, 4)):
                        with id_lock:
                            i = next(next_id)
                        c.execute('INSERT INTO "Parent" ("id", "name") VALUES (%s, %s)', (i, f"w{seed}"))
                        time.sleep(rng.random() * 0.004)
                    c.execute("COMMIT")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    seen: list[str] = []
    with connect(url) as agent:
        threads = [threading.Thread(target=writer, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        last = 0
        rounds = 0
        while any(t.is_alive() for t in threads):
            make_generation(agent, 1)
            bound = enumeration_bound(agent)
            seen += enumerate_window(agent, last, bound)
            last = bound
            rounds += 1
            time.sleep(0.01)
        for t in threads:
            t.join()
        make_generation(agent, 1)
        bound = enumeration_bound(agent)
        seen += enumerate_window(agent, last, bound)
        assert not errors
        all_rows = [str(g) for (g,) in agent.query(f'SELECT rowguid FROM {rows_of(agent, "Parent")} AS t WHERE id >= 1000')]
        assert len(all_rows) > 200 and rounds > 3
        assert len(seen) == len(set(seen)), "a change was enumerated twice"
        assert sorted(seen) == sorted(all_rows), "a committed change was never enumerated"
