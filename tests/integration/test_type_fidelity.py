"""Every logical type survives publisher -> snapshot (Parquet, Spark) -> subscriber, across dialects."""

from __future__ import annotations

import decimal
import json
from pathlib import Path

import pytest

from sparksync.dialects import connect
from sparksync.names import TableName
from sparksync.provision import setup
from sparksync.topology import parse_topology
from sparksync.types import arrow_converter
from tests.support.all_types import COLS, make_publisher

pytestmark = pytest.mark.spark


def _15_digits(v):
    """SQLite keeps NUMERIC as a 64-bit float: 15 significant digits survive."""
    if v is None:
        return None
    return float(f"{v:.15g}")


def normalized(url: str, approximate_decimals: bool = False) -> dict[int, tuple]:
    convs = [arrow_converter(t) for _, t in COLS]
    with connect(url) as r:
        q = ", ".join(f'"{n}"' for n, _ in COLS)
        out = {}
        for row in r.query(f'SELECT {q} FROM {r.table_sql(TableName(None, "AllTypes"))}'):
            vals = [c(v) for c, v in zip(convs, row)]
            vals[-1] = json.loads(vals[-1]) if vals[-1] is not None else None   # JSON compares as data
            vals[4] = None if vals[4] is None else round(vals[4], 5)            # REAL is 4 bytes in PostgreSQL
            if approximate_decimals:
                vals[6], vals[7] = _15_digits(vals[6]), _15_digits(vals[7])
            out[vals[0]] = tuple(vals)
    return out


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_all_types_round_trip(spark, dbs, tmp_path: Path, pub_kind):
    pub = dbs.url(pub_kind, "types")
    make_publisher(pub)
    subs = {k: dbs.url(k, f"sub_{k[:2]}") for k in ("sqlite", "postgresql")}
    topo = parse_topology({
        "publisher": {"name": "P", "database": pub, "snapshot_dir": str(tmp_path / "snap")},
        "publications": [{"name": "T", "articles": [{"table": "AllTypes", "column_tracking": True}]}],
        "subscriptions": [{"name": f"S_{k}", "publication": "T", "database": u} for k, u in subs.items()],
    }, tmp_path)
    setup(topo, lambda: spark)
    for kind, url in subs.items():
        lossy = "sqlite" in (pub_kind, kind)
        assert normalized(url, lossy) == normalized(pub, lossy), f"{pub_kind} -> {kind}"
    if pub_kind == "postgresql":  # PostgreSQL to PostgreSQL is exact, to the last decimal digit
        exact = normalized(subs["postgresql"])
        assert exact == normalized(pub)
        assert exact[1][7] == decimal.Decimal("1234567890123456789012345678.0123456789")


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_an_integer_key_is_the_rowid_of_a_sqlite_subscriber(spark, dbs, tmp_path: Path, pub_kind):
    """A single-column integer key becomes the rowid at a SQLite subscriber (as in a SQLite table
    declared ``INTEGER PRIMARY KEY``): no second b-tree for the key, and 64-bit values still fit."""
    pub = dbs.url(pub_kind, "rowid")
    key = "INTEGER PRIMARY KEY" if pub_kind == "sqlite" else "bigint PRIMARY KEY"
    with connect(pub) as r:
        r.execute(f'CREATE TABLE "Keyed" ("id" {key}, "v" text)')
        r.executemany(f'INSERT INTO "Keyed" VALUES ({r.p}, {r.p})',
                      [(-9_223_372_036_854_775_808, "min"), (1, "one"), (9_223_372_036_854_775_807, "max")])
    sub = dbs.url("sqlite", "rowid_sub")
    topo = parse_topology({
        "publisher": {"name": "P", "database": pub, "snapshot_dir": str(tmp_path / "snap")},
        "publications": [{"name": "K", "articles": [{"table": "Keyed"}]}],
        "subscriptions": [{"name": "S", "publication": "K", "database": sub}],
    }, tmp_path)
    setup(topo, lambda: spark)
    with connect(sub) as r:
        assert r.query('SELECT "id", "v" FROM "Keyed" WHERE "id" = rowid ORDER BY "id"') == [
            (-9_223_372_036_854_775_808, "min"), (1, "one"), (9_223_372_036_854_775_807, "max")]
        indexes = [row[1] for row in r.query('PRAGMA index_list("Keyed")')]
        assert not [i for i in indexes if i.startswith("sqlite_autoindex")], indexes
