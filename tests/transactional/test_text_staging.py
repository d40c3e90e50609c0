"""A PostgreSQL publisher's changes are stored as the server's messages and decoded by the distribution
agent's tasks; at a PostgreSQL subscriber a batch is staged in the log's own text form (``bulk_text.py``).
The oracle: the same commands, decoded to JSON and applied one at a time by the procedures or
statements, give the same table, for every call syntax; and both equal the publisher's table. The
values are the awkward ones: tabs, newlines, backslashes, bytea, NaN, time zones, JSON, unchanged
TOASTed text, rows changed several times in one batch (waves)."""

from __future__ import annotations

import dataclasses
import os
import random

import pytest

from sparksync.dialects import connect
from sparksync.transactional.delivery import bulk_text
from sparksync.transactional.delivery.bulk import BulkApplier
from sparksync.transactional.delivery.bulk_text import TextStaging
from sparksync.transactional.delivery.calls import effective_command, procedure_statements
from sparksync.transactional.delivery.decoding import Decoder
from sparksync.transactional.delivery.subscriber import Applier, article_targets
from sparksync.transactional.distribution import database as dst
from sparksync.transactional.distribution.logreader import run_logreader
from sparksync.types import SqlType
from tests.support.transactional import build, setup_topology

pytestmark = pytest.mark.spark

DDL = ('CREATE TABLE "T" (id integer PRIMARY KEY, name varchar(40) NOT NULL, qty integer, price numeric(10,2), '
       'note text, blob bytea, at timestamptz, day date, doc jsonb, tag uuid, f double precision, flag boolean, '
       'big text)')
SEED = ("INSERT INTO \"T\" SELECT g, 'n' || g, g, g + 0.25, 'pub', '\\x00ff'::bytea, '2024-05-01 10:00+02', "
        "'2024-05-01', '{\"a\": 1}', md5(g::text)::uuid, g / 3.0, g % 2 = 0, repeat('x', 5000) || g "
        "FROM generate_series(1, 40) g")
AWKWARD = ["tab\there", "new\nline", "back\\slash", "cr\rhere", "quote'\"", "ünï©ødé", "\\N", "", "a\\tb"]


def _workload(rng: random.Random) -> list[str]:
    """Statements changing the publisher: updates of rows 1..10 never touch note (a subscriber's own note
    there must survive SCALL and MCALL); rows change several times in a transaction."""
    out = []
    nxt = 100
    for _ in range(6):
        stmts = []
        for _ in range(60):
            x = rng.random()
            i = rng.randint(1, 40)
            s = rng.choice(AWKWARD).replace("'", "''")
            if x < 0.2:
                stmts.append(f"INSERT INTO \"T\" (id, name, qty, price, note, blob, at, doc, f, flag) VALUES ({nxt}, "
                             f"'{s}', NULL, 1.5, E'n\\\\{nxt}', '\\x5c09'::bytea, '1999-12-31 23:59:59.999999+05:30', "
                             f"'[1, \"{rng.choice(['t', 'x'])}\"]', 'NaN', NULL)")
                nxt += 1
            elif x < 0.85:
                col = rng.choice(["name", "qty", "price", "blob", "at", "doc", "f", "flag", "day"] +
                                 ([] if i <= 10 else ["note", "big"]))
                value = {"name": f"'{s}'", "qty": str(rng.randint(-5, 5)), "price": "price + 0.01",
                         "blob": "'\\x0a0d5c'::bytea", "at": "at + interval '1 hour'", "doc": "doc || '{\"b\": \"\\t\"}'",
                         "f": "'Infinity'", "flag": "NOT flag", "day": "day - 1", "note": f"'{s}'",
                         "big": "big || 'y'"}[col]
                stmts.append(f'UPDATE "T" SET {col} = {value} WHERE id = {i}')
            else:
                stmts.append(f'DELETE FROM "T" WHERE id = {rng.randint(11, 40)}')
        out.append("BEGIN; " + "; ".join(stmts) + "; COMMIT")
    return out


def _rows(url: str) -> list[str]:
    with connect(url) as r:
        return [x[0] for x in r.query('SELECT t::text FROM "T" t ORDER BY id')]


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    from tests.support.databases import databases

    tmp = tmp_path_factory.mktemp("txtext")
    with databases(tmp, pg_admin_url) as dbs:
        tx = build(dbs, tmp, "postgresql", {"S": "postgresql"}, articles=[{"table": "public.T"}],
                   extra_tables=[DDL, SEED], seed_ids=None)
        setup_topology(tx, spark)
        tx.publish(*_workload(random.Random(7)))
        run_logreader(tx.topology)
        with connect(tx.topology.distributor_url) as d:
            p = dst.require_publication(d, "Purchasing")
            rows = d.query(dst.commands_query(d, ordered=True), ["S", p.publication_id, 0, 0, 2**62, dst.LAST_COMMAND])
            decoder = Decoder(dst.shapes(d, p.publication_id))
            commands = [c for row in rows for c in decoder.commands(row[1:])]
        yield tx, dbs, p, commands


def _notes(url: str) -> dict[int, str]:
    with connect(url) as r:
        return dict(r.query('SELECT id, note FROM "T" WHERE id <= 10'))


def _target_db(dbs, name: str, p, upd: str | None):
    """A database holding the publisher's table as it was before the workload (SEED is deterministic)."""
    url = dbs.url("postgresql", name)
    with connect(url) as r:
        d = r.dialect
        r.execute(DDL)
        r.execute(SEED)
        r.execute("UPDATE \"T\" SET note = 'local' WHERE id <= 10")            # the subscriber's own edit
        (t,) = article_targets(d, p.articles).values()
        t = dataclasses.replace(t, upd=effective_command(upd, "upd", t.table, True))
        cols = [(c, SqlType.from_dict(x)) for c, x in t.columns]
        for op in ("ins", "upd", "del"):
            if t.spec(op).uses_procedure:
                for stmt in procedure_statements(d, t.spec(op), t.table, cols, list(t.key)):
                    r.execute(stmt)
    return url, t


def test_the_log_reader_stores_messages_not_json(world):
    _, _, _, commands = world
    rows = [c for c in commands if c.type in ("ins", "upd", "del")]
    assert len(rows) > 200 and all(c.change is not None for c in rows)
    assert len({c.change.shape.article_id for c in rows}) == 1


@pytest.mark.parametrize("upd", [None, "MCALL sp_MSupd_publicT", "CALL sp_MSupd_publicT", "XCALL sp_MSupd_publicT",
                                 "SQL"])
def test_text_staging_equals_one_command_at_a_time(world, monkeypatch, upd):
    tx, dbs, p, commands = world
    tag = (upd or "scall").split()[0].lower()
    (one, t), (many, _) = _target_db(dbs, f"one_{tag}", p, upd), _target_db(dbs, f"many_{tag}", p, upd)
    with connect(one) as r, r.transaction():
        Applier(r, {t.article_id: t}).apply(commands)
    taken = []
    real = TextStaging.apply
    monkeypatch.setattr(TextStaging, "apply", lambda self, *a: taken.append(1) or real(self, *a))
    with connect(many) as r, r.transaction():
        bulk = BulkApplier(r, {t.article_id: t})
        assert bulk.eligible(commands) and bulk.apply(commands) is True
    assert taken, "the batch did not take the text staging"
    assert _rows(many) == _rows(one)
    notes = _notes(many)
    if upd is None or upd.startswith("MCALL"):      # only the changed columns: the subscriber's notes stay
        assert set(notes.values()) == {"local"}
    else:                                          # the whole row: the publisher's note on updated rows
        assert "pub" in notes.values()
    # with the subscriber's own notes put back to the publisher's, it is the publisher's table
    with connect(many) as r:
        r.execute("UPDATE \"T\" SET note = 'pub' WHERE id <= 10")
    assert _rows(many) == _rows(tx.publisher_url)


@pytest.mark.parametrize("child_fails", [False, True], ids=["ranges", "a-child-fails"])
@pytest.mark.parametrize("upd", [None, "XCALL sp_MSupd_publicT"])
def test_a_big_batch_made_in_ranges_at_once_equals_one_command_at_a_time(world, monkeypatch, upd, child_fails):
    """A batch of many commands is cut into ranges whose lines are made by forked processes, one per
    core, and applied range after range: the same table as one command at a time (rows change several
    times, across ranges too). A child that fails has its range made by the parent."""
    tx, dbs, p, commands = world
    tag = ("x" if upd else "s") + ("f" if child_fails else "r")
    (one, t), (many, _) = _target_db(dbs, f"one_rng_{tag}", p, upd), _target_db(dbs, f"many_rng_{tag}", p, upd)
    with connect(one) as r, r.transaction():
        Applier(r, {t.article_id: t}).apply(commands)
    monkeypatch.setattr(bulk_text, "RANGE_COMMANDS", 40)
    monkeypatch.setattr(bulk_text, "_cores", lambda: 3)
    parent, forks, remade = os.getpid(), [], []
    real_fork, real_range = bulk_text._fork, TextStaging._range
    def fork(*a):
        child = real_fork(*a)
        forks.append(child[0] if child else None)
        return child
    monkeypatch.setattr(bulk_text, "_fork", fork)

    def made(self, cs):
        if os.getpid() != parent and child_fails:
            raise RuntimeError("a child that fails")
        remade.append(os.getpid() == parent)
        return real_range(self, cs)
    monkeypatch.setattr(TextStaging, "_range", made)
    with connect(many) as r, r.transaction():
        bulk = BulkApplier(r, {t.article_id: t}, processes=3)
        assert bulk.eligible(commands) and bulk.apply(commands) is True
    assert len(forks) == 2, "the batch was not cut into three ranges"
    assert remade == [True] * (3 if child_fails else 1)        # the parent's range, and the failed children's
    assert _rows(many) == _rows(one)
    for pid in forks:                                           # every child was waited for
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_key_update_goes_command_by_command(world):
    tx, dbs, p, _ = world
    url, t = _target_db(dbs, "keymove", p, None)
    tx.publish('UPDATE "T" SET id = id + 1000 WHERE id BETWEEN 1 AND 5')
    run_logreader(tx.topology)
    with connect(tx.topology.distributor_url) as d:
        rows = d.query(dst.commands_query(d, ordered=True), ["S", p.publication_id, 0, 0, 2**62, dst.LAST_COMMAND])
        decoder = Decoder(dst.shapes(d, p.publication_id))
        last = max(row[1] for row in rows)
        moves = [c for row in rows if row[1] == last for c in decoder.commands(row[1:])]
    assert len(moves) == 5
    with connect(url) as r, r.transaction():
        assert BulkApplier(r, {t.article_id: t}).apply(moves) is False
