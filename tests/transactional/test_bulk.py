"""The set-based apply gives exactly what calling the procedures (or running the statements) one
command at a time gives, on both databases, for every call syntax: random batches with several
commands per row, a subscriber-side edit SCALL must keep, 20598, and a key update (command by command)."""

from __future__ import annotations

import json
import random

import pytest

from sparksync.dialects import connect
from sparksync.errors import RowNotFound
from sparksync.names import TableName
from sparksync.rows import RowCodec
from sparksync.transactional.delivery.bulk import BulkApplier
from sparksync.transactional.delivery.calls import effective_command, procedure_statements
from sparksync.transactional.delivery.subscriber import Applier, ArticleTarget, Command
from sparksync.types import Kind, SqlType

COLS = [("id", SqlType(Kind.INTEGER)), ("name", SqlType(Kind.TEXT, length=40)), ("qty", SqlType(Kind.INTEGER)),
        ("price", SqlType(Kind.DECIMAL, precision=10, scale=2)), ("note", SqlType(Kind.TEXT))]
CODEC = RowCodec(COLS)
NAMES = [c for c, _ in COLS]


def _target(kind: str, table: TableName, upd: str | None) -> ArticleTarget:
    pg = kind == "postgresql"
    specs = [effective_command(None if pg else "SQL", "ins", table, pg),
             effective_command(upd if pg else "SQL", "upd", table, pg),
             effective_command(None if pg else "SQL", "del", table, pg)]
    return ArticleTarget(1, str(table), table, tuple((c, t.to_dict()) for c, t in COLS), ("id",), *specs)


def _make(url: str, kind: str, upd: str | None) -> tuple[ArticleTarget, str]:
    table = TableName("public", "item") if kind == "postgresql" else TableName(None, "item")
    t = _target(kind, table, upd)
    with connect(url) as r:
        d = r.dialect
        r.execute(f"CREATE TABLE {d.table_sql(table)} (id integer PRIMARY KEY, name varchar(40), qty integer, "
                  f"price numeric(10,2), note text)")
        r.execute(f"INSERT INTO {d.table_sql(table)} VALUES " + ", ".join(
            f"({i}, 'n{i}', {i}, {i}.25, 'local')" for i in range(1, 41)))
        if kind == "postgresql":
            for op in ("ins", "upd", "del"):
                if t.spec(op).uses_procedure:
                    for stmt in procedure_statements(d, t.spec(op), table, COLS, ["id"]):
                        r.execute(stmt)
    return t, d.table_sql(table)


def _batch(rng: random.Random) -> list[Command]:
    """Commands valid in order: the publisher's rows 1..40 (note 'pub'), updated, deleted, inserted."""
    rows = {i: {"id": i, "name": f"n{i}", "qty": i, "price": f"{i}.25", "note": "pub"} for i in range(1, 41)}
    out, nxt = [], 100
    for n in range(1, 400):
        choice = rng.random()
        if choice < 0.2 or not rows:
            row = {"id": nxt, "name": f"new{nxt}", "qty": 0, "price": "1.00", "note": "pub"}
            rows[nxt] = row
            nxt += 1
            out.append(Command(n, 1, 1, "ins", None, CODEC.encode([row[c] for c in NAMES]), None))
        elif choice < 0.85:
            key = rng.choice(sorted(rows))
            before = dict(rows[key])
            after = dict(before, **({"qty": rng.randint(0, 9)} if rng.random() < 0.5 else {"name": f"x{n}"}))
            rows[key] = after
            # the log reader's compact before image: the key and the columns that changed
            compact = {"id": key, **{c: before[c] for c in NAMES if before[c] != after[c]}}
            out.append(Command(n, 1, 1, "upd", None, CODEC.encode([after[c] for c in NAMES]), json.dumps(compact)))
        else:
            key = rng.choice(sorted(rows))
            before = rows.pop(key)
            out.append(Command(n, 1, 1, "del", None, None, CODEC.encode([before[c] for c in NAMES])))
    return out


@pytest.mark.parametrize("kind,upd", [("sqlite", None), ("postgresql", None),
                                      ("postgresql", "MCALL sp_MSupd_publicitem"),
                                      ("postgresql", "CALL sp_MSupd_publicitem"),
                                      ("postgresql", "XCALL sp_MSupd_publicitem"), ("postgresql", "SQL")])
@pytest.mark.parametrize("seed", [1, 2])
def test_set_based_equals_one_command_at_a_time(dbs, kind, upd, seed):
    one, many = dbs.url(kind, f"one{seed}"), dbs.url(kind, f"many{seed}")
    (t, table), _ = _make(one, kind, upd), _make(many, kind, upd)
    batch = _batch(random.Random(seed))
    with connect(one) as r, r.transaction():
        Applier(r, {1: t}).apply(batch)
    with connect(many) as r, r.transaction():
        bulk = BulkApplier(r, {1: t})
        assert bulk.eligible(batch) and bulk.apply(batch) is True
    with connect(one) as a, connect(many) as b:
        expected = a.query(f"SELECT * FROM {table} ORDER BY id")
        assert b.query(f"SELECT * FROM {table} ORDER BY id") == expected
    # SCALL/MCALL kept the subscriber's own 'note' on rows the publisher never changed that column of
    if kind == "postgresql" and (upd is None or upd.startswith("MCALL")):
        assert any(row[4] == "local" for row in expected)


def test_twenty_five_ninety_eight_and_key_updates(dbs, pg_admin_url):
    url = dbs.url("postgresql", "bulkerr")
    t, table = _make(url, "postgresql", None)
    enc = lambda row: CODEC.encode([row.get(c) for c in NAMES])  # noqa: E731
    missing = [Command(i, 1, 1, "upd", None, enc({"id": 900 + i, "qty": 1}), f'{{"id": {900 + i}}}')
               for i in range(30)]
    with connect(url) as r:
        with pytest.raises(RowNotFound, match="30 of 30 updates"):
            with r.transaction():
                BulkApplier(r, {1: t}).apply(missing)
        moves = [Command(i, 1, 1, "upd", None, enc({"id": 500 + i, "name": "m"}), f'{{"id": {i + 1}}}')
                 for i in range(25)]
        with r.transaction():
            assert BulkApplier(r, {1: t}).apply(moves) is False       # a key update: command by command
            Applier(r, {1: t}).apply(moves)
        assert r.scalar(f"SELECT count(*) FROM {table} WHERE id >= 500") == 25
