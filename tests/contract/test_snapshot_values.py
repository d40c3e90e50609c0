"""A snapshot's rows that a database cannot hold exactly (NaN in a SQLite float, NUL in PostgreSQL text, its escape in
PostgreSQL JSON) are refused by name when a subscriber loads the snapshot (``snapshot/load.load_parquet``); every
other row is loaded, and the load reads each row once."""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pyarrow.parquet as pq

from sparksync.dialects import connect
from sparksync.names import TableName
from sparksync.snapshot.load import load_parquet
from sparksync.snapshot.source import Folder


def test_rows_a_database_cannot_hold_are_refused_by_name_and_the_rest_loaded(kind, dbs, tmp_path):
    rnd = random.Random(11)
    n = 25_000                                   # three Parquet batches
    f = [rnd.choice([1.5, -2.0, None, float("nan")]) if i % 997 == 0 else i * 0.5 for i in range(n)]
    t = [rnd.choice(["a\x00b", "plain", None]) if i % 1009 == 0 else f"row {i}" for i in range(n)]
    j = [rnd.choice(['{"k": "a\\u0000b"}', '{"k": 1}', None]) if i % 1013 == 0 else f'{{"i": {i}}}' for i in range(n)]
    folder = tmp_path / "snap" / "Sample"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": list(range(n)), "f": f, "t": t, "j": j}), folder / "part-0.parquet",
                   row_group_size=10_000)
    json_type = "text" if kind == "sqlite" else "jsonb"
    with connect(dbs.url(kind, "sub")) as r:
        r.execute(f'CREATE TABLE "Sample" ("id" integer PRIMARY KEY, "f" double precision, "t" text, "j" {json_type})')
        name = TableName(None, "Sample")
        info = r.reflect(name)
        assert info is not None
        with r.transaction():
            loaded = load_parquet(r, Folder(tmp_path / "snap"), "Sample", name, info, "id")
        held = {row[0] for row in r.query('SELECT "id" FROM "Sample"')}
    if kind == "sqlite":             # SQLite holds NUL in text, and JSON as text; a NaN it would store as NULL
        want = {i: "f" for i in range(n) if f[i] is not None and math.isnan(f[i])}
    else:                            # PostgreSQL holds NaN; no NUL in text, nor its escape in jsonb
        want = {i: "t" for i in range(n) if t[i] is not None and "\x00" in t[i]}
        want |= {i: "j" for i in range(n) if j[i] is not None and "\\u0000" in j[i] and i not in want}
    assert want, "the random values hold no value this database refuses"
    assert {x["keyvalue"]: x["column"] for x in loaded.refused} == want
    assert loaded.rows == n - len(want) and held == set(range(n)) - set(want)
