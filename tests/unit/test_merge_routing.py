"""Unit tests for how the apply stage routes change rows: runs of one (group, source, generation),
re-read failed changes meant for one destination, and a batch's changes by article."""

from __future__ import annotations

import pyarrow as pa

from sparksync.merge.session.changes import by_article
from sparksync.merge.session.stream import _for_target, _runs


def _batch(rows: list[dict]) -> pa.RecordBatch:
    cols = ["apply_group", "source", "generation", "target", "tablenick", "rowguid", "op", "lineage", "colv", "row",
            "partition_id"]
    types = [pa.int32(), pa.string(), pa.int64(), pa.string(), pa.int32(), pa.string(), pa.string(), pa.string(),
             pa.string(), pa.string(), pa.int32()]
    return pa.RecordBatch.from_arrays([pa.array([r.get(c) for r in rows], t) for c, t in zip(cols, types)], names=cols)


def _row(group, source, gen, guid, target=None, nick=10, op="upsert", partition=0):
    return {"apply_group": group, "source": source, "generation": gen, "target": target, "tablenick": nick,
            "rowguid": guid, "op": op, "lineage": '{"1":1}', "colv": None, "row": "{}", "partition_id": partition}


def test_runs_split_on_every_key_change():
    b = _batch([_row(0, "P", 5, "a"), _row(0, "P", 5, "b"), _row(0, "P", 6, "c"), _row(0, "S", 6, "d"),
                _row(1, "S", 6, "e")])
    runs = [(g, s, gen, r.column("rowguid").to_pylist()) for g, s, gen, r in _runs(b)]
    assert runs == [(0, "P", 5, ["a", "b"]), (0, "P", 6, ["c"]), (0, "S", 6, ["d"]), (1, "S", 6, ["e"])]


def test_runs_of_an_empty_batch():
    assert list(_runs(_batch([]))) == []


def test_rows_without_a_target_go_to_every_destination_and_targeted_rows_only_to_theirs():
    b = _batch([_row(0, "P", -1, "a", target="S1"), _row(0, "P", -1, "b", target="S2"), _row(0, "P", -1, "c")])
    assert _for_target(b, "S1").column("rowguid").to_pylist() == ["a", "c"]
    assert _for_target(b, "S3").column("rowguid").to_pylist() == ["c"]
    plain = _batch([_row(0, "P", 3, "x")])
    assert _for_target(plain, "S9") is plain
    only = _batch([_row(0, "P", -1, "a", target="S1")])
    assert _for_target(only, "S2") is None


def test_rows_of_a_partition_go_only_to_destinations_in_it():
    b = _batch([_row(0, "P", 5, "a", partition=1), _row(0, "P", 5, "b", partition=2), _row(0, "P", 5, "c")])
    assert _for_target(b, "S1", 1).column("rowguid").to_pylist() == ["a", "c"]
    assert _for_target(b, "S2", 2).column("rowguid").to_pylist() == ["b", "c"]
    assert _for_target(b, "P", 0).column("rowguid").to_pylist() == ["c"]
    assert _for_target(_batch([_row(0, "P", 5, "a", partition=1)]), "S3", 3) is None
    retried = _batch([_row(0, "P", -1, "a", target="S1", partition=1), _row(0, "P", -1, "b", target="S2", partition=1)])
    assert _for_target(retried, "S1", 1).column("rowguid").to_pylist() == ["a"]


def test_by_article_keeps_row_order_and_finds_repeats():
    t = pa.Table.from_batches([_batch([_row(0, "P", 1, "a", nick=20), _row(0, "P", 1, "b", nick=10),
                                       _row(0, "P", 2, "a", nick=20, op="delete"), _row(0, "P", 2, "c", nick=20)])])
    arts = by_article(t)
    assert sorted(arts) == [10, 20]
    a20 = arts[20]
    assert a20.rowguid == ["a", "a", "c"] and a20.op == ["upsert", "delete", "upsert"]
    assert a20.repeats() == ([0, 2], [1])           # the first change of each row, then the later one
    assert a20.first == {"a": 0, "c": 2}
    assert a20.change(1).op == "delete"
    assert arts[10].repeats() == (None, [])
    assert list(arts[10].staged()) == [("b", "upsert", '{"1":1}', None, "{}")]
