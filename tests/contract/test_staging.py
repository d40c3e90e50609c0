"""The set-based apply (merge/apply/staging.py) against real SQLite files and a real PostgreSQL server.

Two properties make it safe to skip Python for plain changes:

* its SQL verdicts agree with ``decide.decide`` for every combination of local state and lineages;
* values read from the staged JSON are stored exactly as the row-at-a-time path stores them.
"""

from __future__ import annotations

import contextlib
import json
import random
import uuid

import pytest

from sparksync.dialects import connect
from sparksync.dialects.model import Column, TableInfo
from sparksync.dialects.postgres.staging import copies_binary
from sparksync.merge.apply.decide import ArticleRules, Incoming, Local, decide
from sparksync.merge.apply.staging import Misfits, Staging
from sparksync.merge.conflicts.resolvers import PUBLISHER_PRIORITY, Replicas
from sparksync.merge.tracking import identity, pending
from sparksync.merge.tracking import lineage as lin
from sparksync.merge.tracking.articles import (
    agent_writes,
    delete_row_with_lineage,
    published_articles,
    write_row_with_lineage,
)
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.names import TableName
from sparksync.rows import RowCodec
from tests.support.all_types import COLS, ROWS
from tests.support.publishing import publish

NICKS = (1, 10, 20)
REPLICAS = Replicas(publisher=1, priority={1: PUBLISHER_PRIORITY, 10: 50.0, 20: 40.0}, local=frozenset(),
                    names={1: "P", 10: "S1", 20: "S2"})


@contextlib.contextmanager
def flushed(r):
    """As the apply: the tracking log flushed inside the transaction, before the agent writes."""
    pending.flush(r)
    yield r


def _random_lineage(rng: random.Random) -> dict[int, int]:
    return {n: rng.randint(1, 3) for n in NICKS if rng.random() < 0.7}


def _incoming_lineage(rng: random.Random, local: dict[int, int]) -> dict[int, int]:
    """Random, or (half the time) the local lineage with the source's (10) entry moved by -1 .. past
    ``MAX_ADVANCE``, sometimes another entry moved too: the cases the classification's shortcut judges."""
    if rng.random() < 0.5:
        return _random_lineage(rng)
    out = dict(local)
    out[10] = out.get(10, 0) + rng.choice([-1, 0, 1, 2, lin.MAX_ADVANCE, lin.MAX_ADVANCE + 1])
    if out[10] <= 0:
        del out[10]
    if rng.random() < 0.3:
        n = rng.choice([1, 20])
        out[n] = out.get(n, 0) + rng.choice([-1, 1])
        if out[n] <= 0:
            del out[n]
    return out


def _articles(r, pubid):
    return {a.source_table: tracked_article(a) for a in published_articles(r, pubid)}


@pytest.mark.parametrize("where", ["subscriber", "publisher"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sql_verdicts_agree_with_decide(kind, dbs, seed, where):
    """Random local states (row present with a lineage, deleted with a tombstone lineage, never
    seen) against random incoming upserts and deletes: 'apply' and 'skip' must be exactly what
    decide() does; everything else must go to decide() ('slow'). At the publisher, a change whose
    lineage claims a version of another replica the publisher never had goes to Python too (refused
    there by the trust model)."""
    url = dbs.url(kind, f"verdicts{seed}")
    with connect(url) as r:
        r.execute('CREATE TABLE "T" ("id" integer PRIMARY KEY, "name" text)')
    res = publish(url, [{"table": "T"}])
    rng = random.Random(seed)
    cases = []
    with connect(url) as r:
        art = _articles(r, res["pubid"])["T"]
        with r.transaction(), flushed(r), agent_writes(r):
            for i in range(150):
                g = str(uuid.uuid4())
                state = rng.choice(["present", "deleted", "absent"])
                local_lin = _random_lineage(rng)
                if state in ("present", "deleted"):
                    write_row_with_lineage(r, art, {"rowguid": g, "id": i, "name": "local"}, local_lin, 1)
                if state == "deleted":
                    delete_row_with_lineage(r, art, g, local_lin, 1)
                op = rng.choice(["upsert", "upsert", "delete"])
                cases.append((g, i, state, local_lin, op, _incoming_lineage(rng, local_lin)))
        codec = RowCodec([(c.name, c.type) for c in art.info.columns])
        with r.transaction():
            staging = Staging(r)
            staging.stage(art, [
                (g, op, json.dumps(lin.to_json(inc)), None,
                 codec.encode([i, "incoming", g]) if op == "upsert" else None)
                for g, i, _, _, op, inc in cases])
            staged = staging.classify(art, forged_from=10 if where == "publisher" else None, source=10)
            verdicts = staging.verdicts(art)
    rules = ArticleRules(art.nickname, False)
    seen = {"apply": 0, "skip": 0, "slow": 0}
    for g, i, state, local_lin, op, inc in cases:
        local = Local(exists=state == "present", lineage=local_lin if state == "present" else None, colv=None,
                      tombstone=local_lin if state == "deleted" else None,
                      load_values=lambda i=i, g=g: {"id": i, "name": "local", "rowguid": g})
        change = Incoming(op, g, {"id": i, "name": "incoming", "rowguid": g} if op == "upsert" else None, inc, None, 10)
        d = decide(change, local, rules, REPLICAS, 20, upload=False)
        plain = (d.action == op and not d.send_back and d.conflict is None and d.lineage == inc)
        verdict = verdicts[g]
        seen[verdict] += 1
        known = local_lin if state != "absent" else {}
        if where == "publisher" and (any(v > known.get(n, 0) for n, v in inc.items() if n != 10)
                                     or inc.get(10, 0) > max(known.values(), default=0) + lin.MAX_ADVANCE):
            assert verdict == "slow", f"forged: {state} local {local_lin}, incoming {op} {inc}: SQL said {verdict}"
            continue
        case = f"{state} local {local_lin}, incoming {op} {inc}: SQL said {verdict}, decide said {d.action}"
        if verdict == "apply":
            assert plain, case
        elif verdict == "skip":
            assert d.action == "skip", case
        else:
            assert not plain, case
            assert d.action != "skip" or (op == "delete" and state != "present"), case
            assert str(g) in staged.slow
    assert min(seen.values()) > 0, seen          # every verdict was exercised
    assert staged.skipped == seen["skip"]


def _statements(r) -> list[tuple[str, int]]:
    """Every statement ``r`` executes from now on, with the rows it changed."""
    seen: list[tuple[str, int]] = []
    execute = r.execute

    def counting(sql, *args, **kwargs):
        cur = execute(sql, *args, **kwargs)
        seen.append((sql, getattr(cur, "rowcount", -1)))
        return cur

    r.execute = counting
    return seen


def _make_all_types(r, name: str, cols=COLS) -> TableInfo:
    info = TableInfo(TableName(None, name), tuple(Column(n, t, n != "id") for n, t in cols), ("id",))
    for stmt in r.dialect.render_create_table(info, rowguid=None):
        r.execute(stmt)
    return info


def _stored(r, table: str, cols=COLS) -> list[tuple]:
    """Every value as the database holds it: SQLite with its storage class, PostgreSQL as text."""
    d = r.dialect
    t = d.table_sql(d.resolve_name(TableName(None, table)))
    if d.capabilities.name == "sqlite":
        sql = ", ".join(f'typeof("{n}"), "{n}"' for n, _ in cols)
    else:
        sql = ", ".join(f'"{n}"::text' for n, _ in cols)
    return r.query(f'SELECT {sql} FROM {t} ORDER BY "id"')


# the types PostgreSQL stages by binary COPY (dialects/postgres/staging.py); with any other, text COPY
BINARY_COPY = ("id", "b", "s", "big", "f", "money", "wide", "t", "blob", "d", "ts")


@pytest.mark.parametrize("types", ["every type", "binary COPY types"])
def test_staged_values_are_stored_like_the_row_at_a_time_path(kind, dbs, types):
    """Every logical type, inserted and then updated, once through write_row_with_lineage (Python
    values bound as parameters) and once through the typed staging table: identical storage."""
    keep = [i for i, (n, _) in enumerate(COLS) if types == "every type" or n in BINARY_COPY]
    cols = [COLS[i] for i in keep]
    url = dbs.url(kind, "values" if types == "every type" else "binvalues")
    with connect(url) as r:
        src = _make_all_types(r, "Src", cols)
        rows = [tuple(json.dumps(row[i]) if COLS[i][0] == "doc" and row[i] is not None else row[i] for i in keep)
                for row in ROWS]
        r.dialect.bulk_load(r, src.name if kind == "sqlite" else r.dialect.resolve_name(src.name),
                            [n for n, _ in cols], [t for _, t in cols], rows)
        _make_all_types(r, "ByRow", cols)
        _make_all_types(r, "ByStage", cols)
    res = publish(url, [{"table": "ByRow"}, {"table": "ByStage"}])
    with connect(url) as r:
        arts = _articles(r, res["pubid"])
        d = r.dialect
        if kind == "postgresql":    # the case stages by the COPY format it is named for
            oids = [o for (o,) in r.query("SELECT atttypid::int FROM pg_attribute WHERE attrelid = "
                                          "'public.\"ByStage\"'::regclass AND attnum > 0 AND attname <> 'rowguid'")]
            assert copies_binary(oids) == (types == "binary COPY types")
        names = ", ".join(d.quote(n) for n, _ in cols)
        driver_rows = r.query(f"SELECT {names} FROM {d.table_sql(d.resolve_name(TableName(None, 'Src')))} "
                              f"ORDER BY \"id\"")
        codec = RowCodec(cols)
        row_codec = RowCodec([(c.name, c.type) for c in arts["ByRow"].info.columns])
        guids = [str(uuid.uuid4()) for _ in driver_rows]
        for round_ in ("insert", "update"):
            if round_ == "update":     # every row's values move one position: each column changes
                driver_rows = [(a[0],) + b[1:] for a, b in zip(driver_rows, driver_rows[1:] + driver_rows[:1])]
            texts = [codec.encode(v) for v in driver_rows]
            with r.transaction(), flushed(r), agent_writes(r):
                for g, text in zip(guids, texts):
                    values = row_codec.decode(text)
                    values["rowguid"] = g
                    write_row_with_lineage(r, arts["ByRow"], values, {1: 2}, 1)
                staging = Staging(r)
                staging.stage(arts["ByStage"],
                              [(g, "upsert", json.dumps({"1": 5 if round_ == "update" else 2}), None, text)
                               for g, text in zip(guids, texts)])
                staged = staging.classify(arts["ByStage"])
                assert (staged.inserts, staged.updates) == ((3, 0) if round_ == "insert" else (0, 3))
                staging.apply(arts["ByStage"], "upsert", 1, clear_failed=False)
            assert _stored(r, "ByStage", cols) == _stored(r, "ByRow", cols)
        assert len(_stored(r, "ByStage", cols)) == 3


def test_staged_delete_writes_tombstones(kind, dbs):
    url = dbs.url(kind, "deletes")
    with connect(url) as r:
        r.execute('CREATE TABLE "T" ("id" integer PRIMARY KEY, "name" text)')
    res = publish(url, [{"table": "T"}])
    with connect(url) as r:
        art = _articles(r, res["pubid"])["T"]
        guids = [str(uuid.uuid4()) for _ in range(3)]
        with r.transaction(), flushed(r), agent_writes(r):
            for i, g in enumerate(guids):
                write_row_with_lineage(r, art, {"rowguid": g, "id": i, "name": "x"}, {1: 1}, 1)
        with r.transaction(), flushed(r), agent_writes(r):
            staging = Staging(r)
            staging.stage(art, [(g, "delete", '{"1": 2}', None, None) for g in guids[:2]])
            assert staging.classify(art).deletes == 2
            staging.apply(art, "delete", 7, clear_failed=False)
        table = r.table_sql(r.dialect.resolve_name(TableName(None, "T")))
        assert [i for (i,) in r.query('SELECT "id" FROM ' + table)] == [2]
        tombs = {str(g): (lin.parse(li), gen) for g, li, gen in r.query(
            f"SELECT rowguid, lineage, generation FROM {r.meta('MSmerge_tombstone')}")}
        assert tombs == {g: ({1: 2}, 7) for g in guids[:2]}
        assert r.scalar(f"SELECT count(*) FROM {r.meta('MSmerge_contents')}") == 1


def test_staged_update_moves_a_primary_key_only_where_it_changed(kind, dbs):
    """A plain update that changes the primary key (merge identifies rows by rowguid) is applied;
    rows whose key did not change keep it (the key is only set where it moves)."""
    url = dbs.url(kind, "moves")
    with connect(url) as r:
        r.execute('CREATE TABLE "T" ("id" integer PRIMARY KEY, "name" text)')
    res = publish(url, [{"table": "T"}])
    with connect(url) as r:
        art = _articles(r, res["pubid"])["T"]
        codec = RowCodec([(c.name, c.type) for c in art.info.columns])
        guids = [str(uuid.uuid4()) for _ in range(3)]
        with r.transaction(), flushed(r), agent_writes(r):
            for i, g in enumerate(guids):
                write_row_with_lineage(r, art, {"rowguid": g, "id": i, "name": "x"}, {1: 1}, 1)
        new = [(guids[0], 0, "same key"), (guids[1], 10, "moved"), (guids[2], 2, "same key")]
        with r.transaction(), flushed(r), agent_writes(r):
            staging = Staging(r)
            staging.stage(art, [(g, "upsert", '{"1": 2}', None, codec.encode([i, name, g])) for g, i, name in new])
            assert staging.classify(art).updates == 3
            statements = _statements(r)
            staging.apply(art, "upsert", 2, clear_failed=False)
            # the key is set by its own statement, on the one row whose key moved (and, where the rowguid is kept
            # beside the table, the same one row of its identity table follows)
            t = r.table_sql(r.dialect.resolve_name(TableName(None, "T")))
            key_updates = [n for sql, n in statements if sql.startswith(f"UPDATE {t} ") and 'SET "id" =' in sql]
            assert key_updates == [1], statements
            if art.keyed:
                ids = r.meta(art.ids_table)
                assert [n for sql, n in statements if sql.startswith(f"UPDATE {ids} ") and 'SET "id" =' in sql] \
                    == [1], statements
        assert {(str(g), i, n) for g, i, n in r.query(f'SELECT "rowguid", "id", "name" FROM '
                                                      f'{identity.rows_sql(r.dialect, art)} AS t')} == set(new)


def test_an_apply_told_the_classifications_counts_writes_what_it_writes_without_them(kind, dbs):
    """The set-based apply leaves out a statement the classification's counts say matches no row (no insert, no
    moved key, no row deleted here before): the same rows and metadata as every statement run, for a batch that
    has each kind of row and for one of plain updates only, where only the statements that write run."""
    url = dbs.url(kind, "counted")
    with connect(url) as r:
        for name in ("Told", "Untold"):
            r.execute(f'CREATE TABLE "{name}" ("id" integer PRIMARY KEY, "name" text)')
    res = publish(url, [{"table": "Told"}, {"table": "Untold"}])
    with connect(url) as r:
        arts = _articles(r, res["pubid"])
        codec = RowCodec([(c.name, c.type) for c in arts["Told"].info.columns])
        guids = [str(uuid.uuid4()) for _ in range(5)]
        for art in arts.values():               # rows 0-2 here, row 3 deleted here, row 4 never seen
            with r.transaction(), flushed(r), agent_writes(r):
                for i, g in enumerate(guids[:4]):
                    write_row_with_lineage(r, art, {"rowguid": g, "id": i, "name": "here"}, {1: 1}, 1)
                delete_row_with_lineage(r, art, guids[3], {1: 1}, 1)
        batches = [[(guids[0], 0, "updated"), (guids[1], 11, "moved"), (guids[3], 3, "back"), (guids[4], 4, "new")],
                   [(guids[0], 0, "updated again"), (guids[2], 2, "updated")]]
        for n, batch in enumerate(batches, 2):
            ran: dict[str, list[str]] = {}
            for name, art in arts.items():
                with r.transaction(), flushed(r), agent_writes(r):
                    staging = Staging(r)
                    staging.stage(art, [(g, "upsert", json.dumps({"1": n}), None, codec.encode([i, text, g]))
                                        for g, i, text in batch])
                    staged = staging.classify(art)
                    statements = _statements(r)
                    staging.apply(art, "upsert", n, clear_failed=False, staged=staged if name == "Told" else None)
                    ran[name] = [sql.split(" ")[0] + " " + sql.split(" ")[2] for sql, _ in statements]
            told, untold = (_state(r, arts[name]) for name in ("Told", "Untold"))
            assert told == untold
            if n == 3:                          # plain updates: no insert, no key moved, no tombstone removed
                # (rowguids kept beside the table: the key's and the insert's statements there too; contents found
                # by rowid: an update of those found and an insert of the others, for one upsert)
                untold = (7 if arts["Untold"].keyed else 5) + (1 if r.dialect.capabilities.stable_rowids else 0)
                assert len(ran["Told"]) == 2 and len(ran["Untold"]) == untold, ran
        assert {(g, i, text) for g, i, text, _ in told[0]} == {(guids[0], 0, "updated again"), (guids[1], 11, "moved"),
                                                              (guids[2], 2, "updated"), (guids[3], 3, "back"),
                                                              (guids[4], 4, "new")}
        assert told[2] == []                     # the row deleted here came back: its tombstone is gone


def _state(r, art) -> tuple[list, list, list]:
    """An article's rows (with their lineage) and metadata: what its apply wrote."""
    t, nick = identity.rows_sql(r.dialect, art), int(art.nickname)
    rows = sorted((str(g), i, n, str(lin.parse(li))) for g, i, n, li in r.query(
        f'SELECT t."rowguid", t."id", t."name", c.lineage FROM {t} t JOIN {r.meta("MSmerge_contents")} c '
        f'ON c.tablenick = {nick} AND c.rowguid = t."rowguid"'))
    contents = sorted((str(g), gen) for g, gen in r.query(
        f"SELECT rowguid, generation FROM {r.meta('MSmerge_contents')} WHERE tablenick = {nick}"))
    tombs = sorted(str(g) for (g,) in r.query(f"SELECT rowguid FROM {r.meta('MSmerge_tombstone')} "
                                               f"WHERE tablenick = {nick}"))
    return rows, contents, tombs


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_an_integer_out_of_its_column_range_is_refused_not_wrapped(dbs, kind):
    """Binary COPY would write 70000 into a smallint wrapped around (4464): the value is found before anything is
    loaded, naming the change and the column (the apply makes it a failed change and stages the others again), the
    same way at a SQLite destination, whose affinity would store it as it comes."""
    url = dbs.url(kind, f"ranges{kind}")
    with connect(url) as r:
        r.execute('CREATE TABLE "T" ("id" integer PRIMARY KEY, "small" smallint)')
    res = publish(url, [{"table": "T"}])
    with connect(url) as r:
        art = _articles(r, res["pubid"])["T"]
        codec = RowCodec([(c.name, c.type) for c in art.info.columns])
        g = str(uuid.uuid4())
        with r.transaction(), flushed(r), agent_writes(r):
            staging = Staging(r)
            r.execute("SAVEPOINT refused")     # as the apply plans an article
            with pytest.raises(Misfits) as e:
                staging.stage(art, [(g, "upsert", '{"1": 2}', None, codec.encode([1, 70000, g]))])
            assert e.value.found == {0: ("small", "value does not fit column small (smallint): 70000 is out of "
                                                  "range for smallint", 70000)}
            r.execute("ROLLBACK TO SAVEPOINT refused")
