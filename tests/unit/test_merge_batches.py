"""Unit tests for sparksync.merge.session.enumeration.make_batches: generation batches covering (start, bound]."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparksync.merge.session.enumeration import make_batches
from sparksync.merge.session.plan import BatchInfo


def gens(*numbers, nicks=None):
    return [{"generation": g, "nicknames": (nicks or {}).get(g, [1])} for g in numbers]


def test_one_batch_when_everything_fits():
    batches, where = make_batches(gens(3, 5, 8), 2, 10, 100, "sub", 2)
    assert batches == [BatchInfo("sub", 2, 0, 2, 10, [1])]
    assert where == {3: 0, 5: 0, 8: 0}


def test_batches_split_at_generation_boundaries_and_the_last_ends_at_bound():
    batches, where = make_batches(gens(11, 12, 13, 14, 15), 10, 20, 2, "pub", 1)
    assert [(b.seq, b.lo, b.hi) for b in batches] == [(0, 10, 12), (1, 12, 14), (2, 14, 20)]
    assert where == {11: 0, 12: 0, 13: 1, 14: 1, 15: 2}
    assert all((b.source, b.source_nick) == ("pub", 1) for b in batches)


def test_exact_multiple_of_per_batch():
    batches, where = make_batches(gens(1, 2, 3, 4), 0, 4, 2, "s", 3)
    assert [(b.lo, b.hi) for b in batches] == [(0, 2), (2, 4)]
    assert where == {1: 0, 2: 0, 3: 1, 4: 1}


def test_nicknames_are_the_sorted_union_of_the_batch():
    g = gens(1, 2, 3, nicks={1: [3, 1], 2: [2, 3], 3: None})
    batches, _ = make_batches(g, 0, 3, 2, "s", 2)
    assert batches[0].nicknames == [1, 2, 3]
    assert batches[1].nicknames == []


def test_string_generations_and_nicknames_are_read_as_ints():
    batches, where = make_batches([{"generation": "5", "nicknames": ["2", 1]}], 4, 9, 10, "s", 2)
    assert (batches[0].lo, batches[0].hi, batches[0].nicknames) == (4, 9, [1, 2])
    assert where == {5: 0}


def test_no_generations_one_watermark_only_batch():
    batches, where = make_batches([], 7, 12, 100, "sub", 2)
    assert batches == [BatchInfo("sub", 2, 0, 7, 12, [])]
    assert where == {}


@pytest.mark.parametrize("start, bound", [(5, 5), (6, 5), (0, 0)])
def test_nothing_when_bound_is_not_past_start(start, bound):
    assert make_batches(gens(5), start, bound, 10, "s", 2) == ([], {})
    assert make_batches([], start, bound, 10, "s", 2) == ([], {})


@st.composite
def inputs(draw):
    start = draw(st.integers(0, 50))
    bound = draw(st.integers(start + 1, start + 60))
    numbers = sorted(draw(st.sets(st.integers(start + 1, bound), max_size=40)))
    g = [{"generation": n, "nicknames": draw(st.lists(st.integers(1, 6), max_size=3))} for n in numbers]
    return g, start, bound, draw(st.integers(1, 8))


@settings(max_examples=300, deadline=None, database=None)
@given(inputs())
def test_batches_cover_start_to_bound(args):
    g, start, bound, per_batch = args
    batches, where = make_batches(g, start, bound, per_batch, "src", 4)
    assert batches, "a non-empty range always has a batch (it moves the watermark)"
    assert batches[0].lo == start
    assert batches[-1].hi == bound
    for a, b in zip(batches, batches[1:]):
        assert a.hi == b.lo                                    # contiguous, no gap, no overlap
    assert all(b.lo < b.hi for b in batches)
    assert [b.seq for b in batches] == list(range(len(batches)))
    assert len(batches) == max(1, -(-len(g) // per_batch))
    assert set(where) == {x["generation"] for x in g}
    for n, k in where.items():
        assert batches[k].lo < n <= batches[k].hi              # each generation falls in its batch's range
    counts = [list(where.values()).count(k) for k in range(len(batches))]
    assert all(c <= per_batch for c in counts)
    assert list(where.values()) == sorted(where.values())    # oldest generations first
    for k, b in enumerate(batches):
        expected = sorted({n for x in g if where[x["generation"]] == k for n in x["nicknames"]})
        assert b.nicknames == expected
        assert (b.source, b.source_nick) == ("src", 4)


# -- read partitions: generation ranges of about the same size ------------------------------------

from sparksync.spark.partitioning import MIN_ROWS_PER_READ  # noqa: E402
from sparksync.spark.partitioning import split_ranges as split_generations  # noqa: E402


def test_small_reads_stay_in_one_partition():
    assert split_generations([(3, 10), (4, 10)], 2, 9, parts=4) == [(2, 9)]


def test_big_reads_are_cut_into_equal_generation_ranges():
    counts = [(g, 10_000) for g in range(11, 21)]          # 100k changes in 10 generations
    ranges = split_generations(counts, 10, 25, parts=2)
    assert ranges == [(10, 15), (15, 25)]
    assert split_generations(counts, 10, 25, parts=3) == [(10, 14), (14, 17), (17, 25)]


def test_a_generation_is_never_split_and_parts_never_exceed_generations():
    assert split_generations([(5, 10 * MIN_ROWS_PER_READ)], 0, 5, parts=8) == [(0, 5)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 50_000), min_size=1, max_size=30), st.integers(1, 8))
def test_ranges_cover_the_range_without_gaps(sizes, parts):
    counts = [(10 + i, n) for i, n in enumerate(sizes)]
    lo, hi = 9, 10 + len(sizes) + 3
    ranges = split_generations(counts, lo, hi, parts)
    assert ranges[0][0] == lo and ranges[-1][1] == hi
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(a < b for a, b in ranges)
    assert 1 <= len(ranges) <= parts
    covered = [sum(n for g, n in counts if a < g <= b) for a, b in ranges]
    assert all(covered), covered          # no empty read task


# -- keyset enumeration: a generation bigger than a batch is cut by key ------------------------------

from sparksync.merge.session.enumeration import plan_batches  # noqa: E402


def keys_of(n: int, seed: int = 0) -> list[tuple[int, str]]:
    """``n`` distinct (tablenick, rowguid) keys in their enumeration order."""
    import random
    rng = random.Random(seed)
    return sorted({(rng.choice([3, 7]), f"{rng.getrandbits(64):016x}") for _ in range(n * 2)})[:n]


def cutter(keys: dict[int, list[tuple[int, str]]]):
    calls = []

    def cut(generation, ranks):
        calls.append((generation, list(ranks)))
        ks = keys[generation]
        return [ks[r - 1] if r <= len(ks) else None for r in ranks]
    return cut, calls


def in_range(key, r) -> bool:
    return (r.after is None or key > r.after) and (r.upto is None or key <= r.upto)


def test_a_big_generation_is_cut_by_key_into_batches_of_per_batch_units():
    g = [{"generation": 4, "nicknames": [1], "changecount": 2},
         {"generation": 6, "nicknames": [2], "changecount": 23},
         {"generation": 9, "nicknames": [1], "changecount": 1}]
    keys = {6: keys_of(23)}
    cut, calls = cutter(keys)
    batches, where, ranges = plan_batches(g, 3, 12, 2, "pub", 1, threshold=5, cut=cut)
    # units: 4 | 6a 6b 6c 6d 6e | 9  -> batches [4, 6a] [6b, 6c] [6d, 6e] [9]
    assert [(b.lo, b.hi, b.ends_within) for b in batches] == [(3, 5, 6), (5, 5, 6), (5, 6, 0), (6, 12, 0)]
    assert where == {4: 0, 9: 3}
    assert calls == [(6, [5, 15])]                  # one query, for the ranks where a batch ends inside it
    assert [(r.after, r.upto, r.seq) for r in ranges] == [(None, keys[6][4], 0), (keys[6][4], keys[6][14], 1),
                                                         (keys[6][14], None, 2)]
    assert [b.covered_at for b in batches] == [6, 6, 6, 12]


def test_a_generation_that_fits_its_batch_is_not_cut():
    g = [{"generation": 2, "nicknames": [1], "changecount": 40}]
    cut, calls = cutter({})
    batches, where, ranges = plan_batches(g, 0, 3, 100, "pub", 1, threshold=10, cut=cut)
    assert where == {2: 0} and ranges == [] and calls == [] and len(batches) == 1


def test_a_generation_smaller_than_counted_ends_in_the_batch_its_last_change_falls_in():
    g = [{"generation": 2, "nicknames": [1], "changecount": 30}]
    keys = {2: keys_of(12)}                       # rows moved on to newer generations since it was closed
    batches, where, ranges = plan_batches(g, 0, 3, 1, "pub", 1, threshold=10, cut=cutter(keys)[0])
    assert len(batches) == 3 and where == {}
    assert [(r.after, r.upto, r.seq) for r in ranges] == [(None, keys[2][9], 0), (keys[2][9], None, 1)]


@st.composite
def keyset_inputs(draw):
    start = draw(st.integers(0, 20))
    bound = draw(st.integers(start + 1, start + 30))
    numbers = sorted(draw(st.sets(st.integers(start + 1, bound), max_size=8)))
    threshold = draw(st.integers(1, 6))
    g, keys = [], {}
    for n in numbers:
        counted = draw(st.integers(0, 30))
        actual = draw(st.integers(0, counted))           # a closed generation only loses changes
        g.append({"generation": n, "nicknames": [1], "changecount": counted})
        keys[n] = keys_of(actual, seed=n)
    return g, keys, start, bound, threshold, draw(st.integers(1, 5))


@settings(max_examples=400, deadline=None, database=None)
@given(keyset_inputs())
def test_every_change_goes_in_exactly_one_batch_and_the_watermark_never_passes_a_part_not_applied(args):
    g, keys, start, bound, threshold, per_batch = args
    batches, where, ranges = plan_batches(g, start, bound, per_batch, "src", 4, threshold, cutter(keys)[0])
    assert batches[0].lo == start and batches[-1].hi == bound
    assert all(a.hi == b.lo and a.lo <= a.hi for a, b in zip(batches, batches[1:]))
    seq_of: dict[tuple[int, tuple], int] = {}
    for n, ks in keys.items():
        for key in ks:
            found = [where[n]] if n in where else [r.seq for r in ranges if r.generation == n and in_range(key, r)]
            assert len(found) == 1, (n, key, found)        # in one batch, never two, never none
            seq_of[(n, key)] = found[0]
    for n in keys:                                       # a generation's parts go in key order
        parts = [seq_of[(n, k)] for k in keys[n]]
        assert parts == sorted(parts)
    # applying the batches in order: the watermark after batch k covers only generations wholly applied,
    # and no batch with a change not yet applied is taken for applied (skipped) by the watermark before it
    for k, b in enumerate(batches):
        applied = {key for key, s in seq_of.items() if s <= k}
        for n, ks in keys.items():
            if n <= b.hi:
                assert all((n, key) in applied for key in ks), (k, n)
        mine = [key for key, s in seq_of.items() if s == k]
        wm_before = batches[k - 1].hi if k else start
        assert not mine or wm_before < b.covered_at
    assert all(sum(1 for s in seq_of.values() if s == k) <= per_batch * threshold for k in range(len(batches)))
