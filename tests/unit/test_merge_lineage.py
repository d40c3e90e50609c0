"""Unit tests for sparksync.merge.tracking.lineage: version vectors {replica nickname: version}."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparksync.merge.tracking import lineage as lin
from sparksync.merge.tracking.lineage import Relation

SETTINGS = settings(max_examples=200, deadline=None, database=None)

nicks = st.integers(min_value=1, max_value=12)
lineages = st.dictionaries(nicks, st.integers(min_value=1, max_value=30), max_size=6)


def same(a, b) -> bool:
    """Equal as version vectors (a missing entry is version 0)."""
    keys = set(a) | set(b)
    return all(a.get(k, 0) == b.get(k, 0) for k in keys)


# -- parse / to_json -----------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (None, {}),
    ("{}", {}),
    ('{"1": 3}', {1: 3}),
    (b'{"1": 3, "7": 2}', {1: 3, 7: 2}),
    ({"1": 3, "12": "4"}, {1: 3, 12: 4}),
    ({2: 5}, {2: 5}),
])
def test_parse_accepts_json_text_bytes_dicts_and_none(value, expected):
    out = lin.parse(value)
    assert out == expected
    assert all(type(k) is int and type(v) is int for k, v in out.items())


def test_to_json_uses_string_keys_sorted_numerically():
    out = lin.to_json({10: 1, 2: 7, 1: 3})
    assert out == {"1": 3, "2": 7, "10": 1}
    assert list(out) == ["1", "2", "10"]       # numeric order, not "1", "10", "2"
    assert json.dumps(out) == '{"1": 3, "2": 7, "10": 1}'


@SETTINGS
@given(lineages)
def test_parse_to_json_round_trip(a):
    assert lin.parse(lin.to_json(a)) == a
    assert lin.parse(json.dumps(lin.to_json(a))) == a
    assert lin.parse(json.dumps(lin.to_json(a)).encode()) == a


# -- dominates / compare -------------------------------------------------------------------------

def test_dominates_examples():
    assert lin.dominates({1: 2, 2: 1}, {1: 2})
    assert lin.dominates({1: 2}, {})
    assert lin.dominates({}, {})
    assert not lin.dominates({1: 2}, {1: 2, 2: 1})
    assert not lin.dominates({1: 1, 2: 5}, {1: 2})


@pytest.mark.parametrize("incoming, local, relation", [
    ({1: 1}, {1: 1}, Relation.EQUAL),
    ({}, {}, Relation.EQUAL),
    ({1: 2}, {1: 1}, Relation.INCOMING_NEWER),
    ({1: 1, 2: 2}, {1: 1}, Relation.INCOMING_NEWER),
    ({1: 1}, {}, Relation.INCOMING_NEWER),
    ({1: 1}, {1: 2}, Relation.LOCAL_NEWER),
    ({}, {3: 1}, Relation.LOCAL_NEWER),
    ({1: 2}, {1: 1, 2: 2}, Relation.CONCURRENT),
    ({1: 1, 2: 3}, {1: 2, 2: 1}, Relation.CONCURRENT),
    ({2: 1}, {3: 1}, Relation.CONCURRENT),
])
def test_compare_examples(incoming, local, relation):
    assert lin.compare(incoming, local) is relation


_MIRROR = {Relation.EQUAL: Relation.EQUAL, Relation.CONCURRENT: Relation.CONCURRENT,
           Relation.INCOMING_NEWER: Relation.LOCAL_NEWER, Relation.LOCAL_NEWER: Relation.INCOMING_NEWER}


@SETTINGS
@given(lineages, lineages)
def test_compare_is_antisymmetric(a, b):
    assert lin.compare(b, a) is _MIRROR[lin.compare(a, b)]


@SETTINGS
@given(lineages, lineages)
def test_compare_equal_iff_same_vector(a, b):
    assert (lin.compare(a, b) is Relation.EQUAL) == same(a, b)


@SETTINGS
@given(lineages, lineages, lineages)
def test_dominates_is_reflexive_and_transitive(a, b, c):
    assert lin.dominates(a, a)
    if lin.dominates(a, b) and lin.dominates(b, c):
        assert lin.dominates(a, c)


# -- merge ---------------------------------------------------------------------------------------

def test_merge_example():
    assert lin.merge({1: 3, 2: 1}, {2: 4, 5: 1}) == {1: 3, 2: 4, 5: 1}


@SETTINGS
@given(lineages, lineages)
def test_merge_is_the_least_upper_bound(a, b):
    m = lin.merge(a, b)
    assert lin.dominates(m, a) and lin.dominates(m, b)
    assert set(m) <= set(a) | set(b)
    for k, v in m.items():
        assert v == max(a.get(k, 0), b.get(k, 0))


@SETTINGS
@given(lineages, lineages, lineages)
def test_merge_is_commutative_associative_idempotent(a, b, c):
    assert same(lin.merge(a, b), lin.merge(b, a))
    assert same(lin.merge(lin.merge(a, b), c), lin.merge(a, lin.merge(b, c)))
    assert same(lin.merge(a, a), a)


@SETTINGS
@given(lineages, lineages)
def test_merge_does_not_mutate_its_arguments(a, b):
    a0, b0 = dict(a), dict(b)
    lin.merge(a, b)
    assert a == a0 and b == b0


# -- bump / last_writer --------------------------------------------------------------------------

@pytest.mark.parametrize("before, nick, after", [
    ({}, 3, {3: 1}),
    ({1: 1}, 1, {1: 2}),
    ({2: 3}, 1, {2: 3, 1: 4}),
    ({1: 5, 2: 3}, 2, {1: 5, 2: 6}),
    ({1: 5, 2: 5}, 7, {1: 5, 2: 5, 7: 6}),
])
def test_bump_sets_own_entry_to_max_plus_one(before, nick, after):
    assert lin.bump(before, nick) == after


@SETTINGS
@given(lineages, nicks)
def test_bump_is_strictly_newer_and_names_the_writer(a, nick):
    b = lin.bump(a, nick)
    assert lin.compare(b, a) is Relation.INCOMING_NEWER
    assert lin.last_writer(b) == nick
    assert b[nick] == max(a.values(), default=0) + 1
    assert {k: v for k, v in b.items() if k != nick} == {k: v for k, v in a.items() if k != nick}


@SETTINGS
@given(lineages, nicks)
def test_bump_does_not_mutate(a, nick):
    a0 = dict(a)
    lin.bump(a, nick)
    assert a == a0


@SETTINGS
@given(lineages, lineages, nicks)
def test_resolution_lineage_dominates_both_sides(a, b, nick):
    """The new version made by a conflict resolution is newer than both versions."""
    new = lin.bump(lin.merge(a, b), nick)
    assert lin.compare(new, a) is Relation.INCOMING_NEWER
    assert lin.compare(new, b) is Relation.INCOMING_NEWER


@pytest.mark.parametrize("lineage_, writer", [
    ({}, None),
    ({4: 1}, 4),
    ({1: 2, 2: 5, 3: 1}, 2),
    ({3: 5, 2: 5, 9: 1}, 2),          # tie: lowest nickname
])
def test_last_writer(lineage_, writer):
    assert lin.last_writer(lineage_) == writer


# -- knows ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("lineage_, entry, expected", [
    ({1: 3}, [1, 3], True),
    ({1: 3}, [1, 2], True),
    ({1: 3}, [1, 4], False),
    ({1: 3}, [2, 1], False),
    ({}, [2, 1], False),
    ({1: 3}, None, True),
    ({1: 3}, ["1", "3"], True),          # entries read back from JSON may be strings
    ({1: 3}, (1, 4), False),
])
def test_knows(lineage_, entry, expected):
    assert lin.knows(lineage_, entry) is expected


@SETTINGS
@given(lineages, nicks)
def test_a_lineage_knows_its_own_latest_change(a, nick):
    b = lin.bump(a, nick)
    assert lin.knows(b, [nick, b[nick]])
    assert not lin.knows(a, [nick, b[nick]])
