"""A snapshot's article is read in the order of its one-column primary key, in ranges of about ``SPLIT_ROWS`` rows
found in one pass (``snapshot/files.read_partitions``): its Parquet files, taken in the manifest's order, hold every
row once and in key order, so a subscriber that loads them appends (in any other order, once the table outgrows the
page cache, each insert lands on a page of its own: a first sync of 10^7 rows bent to half its rate). An article
whose key has several columns is read in rowguid order, every row once. Both publisher dialects; rows inserted in a
shuffled order, so neither the table's physical order nor its rowguids follow the key."""

from __future__ import annotations

import random

import pyarrow.parquet as pq
import pytest

from sparksync.dialects import connect
from sparksync.provision import setup
from sparksync.snapshot import files as snapshot_files
from sparksync.snapshot.manifest import current_snapshot
from sparksync.topology import parse_topology

pytestmark = pytest.mark.spark

ROWS = 1_000


def test_an_articles_files_hold_every_row_once_in_key_order(kind, dbs, tmp_path, spark, monkeypatch):
    monkeypatch.setattr(snapshot_files, "SPLIT_ROWS", 150)         # seven ranges of the key
    pub = dbs.url(kind, "pub")
    ids = list(range(1, ROWS + 1))
    random.Random(5).shuffle(ids)
    q = "?" if kind == "sqlite" else "%s"
    with connect(pub) as r:
        r.execute('CREATE TABLE "Item" ("id" integer PRIMARY KEY, "v" text)')
        r.execute('CREATE TABLE "Pair" ("a" integer NOT NULL, "b" integer NOT NULL, "v" text, PRIMARY KEY ("a", "b"))')
        with r.transaction():
            r.executemany(f'INSERT INTO "Item" VALUES ({q}, {q})', [(i, f"v{i}") for i in ids])
            r.executemany(f'INSERT INTO "Pair" VALUES ({q}, {q}, {q})', [(i % 7, i, f"p{i}") for i in ids])
    topology = parse_topology({
        "publisher": {"name": "P", "database": pub, "snapshot_dir": str(tmp_path / "snap")},
        "publications": [{"name": "Shop", "articles": [{"table": "Item"}, {"table": "Pair"}]}],
        "subscriptions": [{"name": "S", "publication": "Shop", "database": dbs.url("sqlite", "sub")}]}, tmp_path)
    setup(topology, lambda: spark)

    folder, manifest = current_snapshot(topology.snapshots, "Shop")
    read = {}
    for a in manifest.articles:
        assert a.files and len(a.files) >= 2, f"{a.name}: not split ({a.files})"
        parts = [pq.read_table(folder.open(f"{a.path}/{f['name']}")).to_pylist() for f in a.files]
        read[a.table] = [row for part in parts for row in part]
    item = [row["id"] for row in read["Item"]]
    assert item == sorted(item) and sorted(item) == list(range(1, ROWS + 1)), "Item: not every row once in key order"
    pair = [(row["a"], row["b"]) for row in read["Pair"]]
    assert sorted(pair) == sorted((i % 7, i) for i in ids) and len(set(pair)) == ROWS, "Pair: not every row once"
    guids = [row["rowguid"] for row in read["Pair"]]
    assert guids == sorted(guids), "Pair: a key of several columns is read in rowguid order"
    with connect(dbs.url("sqlite", "sub")) as s:
        assert s.query('SELECT "id", "v" FROM "Item" ORDER BY "id"') == [(i, f"v{i}") for i in range(1, ROWS + 1)]
        assert int(s.scalar('SELECT count(*) FROM "Pair"')) == ROWS
