"""Validation's row encoding (validation/reads.py): one text per row that Spark hashes, the same
for the same typed values read from SQLite or PostgreSQL, never the same for different rows."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa

from sparksync.rows import decode, encode
from sparksync.validation.reads import SideRead, tasks_of


def rows(*columns):
    return encode([pa.array(values, t) for values, t in columns]).to_pylist()


def test_values_that_run_together_differently_encode_differently():
    a = rows((["a", "ab", None, "n"], pa.string()), (["bc", "c", "n", None], pa.string()))
    assert len(set(a)) == 4                       # ("a","bc") vs ("ab","c"); NULL vs the text "n"


def test_typed_values_encode_to_their_canonical_text_and_decode_back():
    (text,) = rows(([7], pa.int32()), ([decimal.Decimal("1.50")], pa.decimal128(10, 2)),
                   ([dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
                   ([True], pa.bool_()), ([0.1], pa.float64()), ([b"\xff\x00"], pa.binary()),
                   ([None], pa.string()), (["v3:x"], pa.string()))
    assert decode(text) == ["7", "1.50", "2026-01-02 03:04:05.000000Z", "true", "0.1", "ff00", None, "v3:x"]


def test_the_same_values_encode_the_same_whatever_their_batch():
    one = rows(([1, 2], pa.int64()), (["x", None], pa.string()))
    assert rows(([2], pa.int64()), ([None], pa.string())) == one[1:]


def test_reads_are_grouped_by_database_in_bounded_tasks():
    reads = [SideRead(a, s, "T", url, "SELECT 1", url) for a in range(10) for s, url in ((0, "u1"), (-1, "pub"))]
    tasks = tasks_of(reads)
    assert sorted(len(t) for t in tasks) == [2, 2, 8, 8]
    assert all(len({r.url for r in t}) == 1 for t in tasks)
