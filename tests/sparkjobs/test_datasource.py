"""The replica Python Data Source: partitioned reads as Arrow batches, with exact types."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest

from sparksync.dialects import connect
from sparksync.spark.reads import ReadPartition, ReadPlan
from sparksync.types import Kind, SqlType, decimal_type

pytestmark = pytest.mark.spark

COLUMNS = [("id", SqlType(Kind.BIGINT)), ("flag", SqlType(Kind.BOOLEAN)), ("price", decimal_type(10, 2)),
           ("ts", SqlType(Kind.TIMESTAMP)), ("tstz", SqlType(Kind.TIMESTAMPTZ)), ("d", SqlType(Kind.DATE)),
           ("g", SqlType(Kind.UUID)), ("doc", SqlType(Kind.JSON)), ("blob", SqlType(Kind.BYTES)),
           ("name", SqlType(Kind.TEXT)), ("small", SqlType(Kind.SMALLINT)), ("ratio", SqlType(Kind.DOUBLE))]

DDL = {
    "sqlite": 'CREATE TABLE t (id INTEGER PRIMARY KEY, flag BOOLEAN, price NUMERIC(10,2), ts TIMESTAMP, '
              'tstz TIMESTAMPTZ, d DATE, g UUID, doc JSON, blob BLOB, name TEXT, small SMALLINT, ratio REAL)',
    "postgresql": 'CREATE TABLE t (id bigint PRIMARY KEY, flag boolean, price numeric(10,2), ts timestamp, '
                  'tstz timestamptz, d date, g uuid, doc jsonb, blob bytea, name text, small smallint, '
                  'ratio double precision)',
}


def plan_for(url: str, ranges: list[tuple[int, int]], where_ph: str) -> ReadPlan:
    cols = [[n, t.to_dict()] for n, t in COLUMNS]
    sql = "SELECT " + ", ".join(n for n, _ in COLUMNS) + " FROM t"
    return ReadPlan([ReadPartition(url, sql + f" WHERE id >= {where_ph} AND id < {where_ph}", [lo, hi], cols, None,
                                   f"t[{lo},{hi})") for lo, hi in ranges])


def test_reads_every_type_in_partitions(spark, dbs, kind):
    url = dbs.url(kind, "ds")
    g = uuid.uuid4()
    with connect(url) as r:
        r.execute(DDL[kind])
        ph = r.p
        rows = [(i, i % 2 == 0, decimal.Decimal(f"{i}.25"), dt.datetime(2024, 1, 2, 3, 4, 5, 600000),
                 dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), dt.date(2024, 2, 29), str(g),
                 '{"k": 1}', b"\x00\x01", f"n{i}", i, i / 4) for i in range(1, 2001)]
        if kind == "postgresql":
            from psycopg.types.json import Jsonb

            rows = [r_[:7] + (Jsonb({"k": 1}),) + r_[8:] for r_ in rows]
        r.executemany(f"INSERT INTO t VALUES ({', '.join([ph] * 12)})", rows)
        r.execute("INSERT INTO t (id) VALUES (5000)")  # all NULLs
    plan = plan_for(url, [(0, 1000), (1000, 10_000)], ph)
    df = spark.read.format("sparksync").schema(plan.spark_schema()).option("plan", plan.to_json()).load()
    assert df.rdd.getNumPartitions() == 2
    table = df.toArrow()
    assert table.num_rows == 2001
    got = {r["id"]: r for r in table.to_pylist()}
    one = got[8]
    assert one["flag"] is True and one["price"] == decimal.Decimal("8.25")
    assert one["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 600000)
    assert one["tstz"] == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert one["d"] == dt.date(2024, 2, 29) and one["g"] == str(g)
    assert one["blob"] == b"\x00\x01" and one["name"] == "n8" and one["small"] == 8 and one["ratio"] == 2.0
    assert __import__("json").loads(one["doc"]) == {"k": 1}
    assert all(v is None for k, v in got[5000].items() if k != "id")


def test_a_value_that_does_not_fit_names_table_and_column(spark, dbs):
    url = dbs.url("sqlite", "bad")
    with connect(url) as r:
        r.execute(DDL["sqlite"])
        r.execute("INSERT INTO t (id, small) VALUES (1, 'not a number')")
    plan = plan_for(url, [(0, 10)], "?")
    df = spark.read.format("sparksync").schema(plan.spark_schema()).option("plan", plan.to_json()).load()
    with pytest.raises(Exception) as e:
        df.collect()
    assert "t[0,10)" in str(e.value) and "column small" in str(e.value)


def _count_ids():
    """A consuming function (made here: Spark pickles it by value, the tests are no module a worker
    can import): one result row per partition, its rows' count and smallest id."""
    def consume(chunks):
        import pyarrow as pa

        ids = [row[0] for rows in chunks for row in rows]
        yield pa.RecordBatch.from_pylist([{"n": len(ids), "lo": min(ids, default=None)}],
                                         schema=pa.schema([("n", pa.int64()), ("lo", pa.int64())]))
    return consume


def test_map_partitions_reads_each_partition_inside_its_own_task(spark, dbs):
    from sparksync.spark.reads import map_partitions

    url = dbs.url("sqlite", "mapped")
    with connect(url) as r:
        r.execute(DDL["sqlite"])
        r.executemany("INSERT INTO t (id, name) VALUES (?, ?)", [(i, f"n{i}") for i in range(1, 26)])
    df = map_partitions(spark, plan_for(url, [(1, 11), (11, 100), (200, 300)], "?"), _count_ids(), "n BIGINT, lo BIGINT")
    assert df.rdd.getNumPartitions() == 3
    assert sorted((r.n, r.lo) for r in df.collect()) == [(0, None), (10, 1), (15, 11)]


def test_map_partitions_fails_with_the_typed_error_of_a_read(spark, dbs):
    from sparksync.spark.failures import recover
    from sparksync.spark.reads import map_partitions

    url = dbs.url("sqlite", "mapped_bad")
    with connect(url):
        pass                                     # an empty database: the query's table is missing
    with pytest.raises(Exception) as e:
        map_partitions(spark, plan_for(url, [(0, 10)], "?"), _count_ids(), "n BIGINT, lo BIGINT").collect()
    error = recover(e.value)
    assert error is not None and "no such table: t" in error.message, e.value

def test_prefetched_batches_keep_their_order_raise_read_errors_and_stop_with_the_consumer():
    from sparksync.spark.reads import prefetched

    assert list(prefetched(iter(range(100)), depth=2)) == list(range(100))

    def failing():
        yield 1
        raise ValueError("the read broke")

    got = []
    with pytest.raises(ValueError, match="the read broke"):
        for x in prefetched(failing()):
            got.append(x)
    assert got == [1]
    closed = []

    def endless():
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.append(True)

    it = prefetched(endless(), depth=2)
    assert [next(it), next(it)] == [0, 1]
    it.close()                                  # the consumer stops early: the reader stops and closes
    assert closed == [True]
