"""Unit tests for sparksync.merge.conflicts.resolvers: priorities and the built-in and user resolvers."""

from __future__ import annotations

import datetime as dt
import decimal
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparksync.errors import ConfigurationError
from sparksync.merge.conflicts.resolvers import (
    BUILTIN,
    PUBLISHER_PRIORITY,
    Replicas,
    Resolution,
    Side,
    check_resolver,
    load_callable,
    resolve,
)

D = decimal.Decimal
PUB, S_GLOBAL, S_GLOBAL2, S_LOCAL, S_LOCAL2 = 1, 2, 3, 4, 5

REPLICAS = Replicas(
    publisher=PUB,
    priority={S_GLOBAL: 75.0, S_GLOBAL2: 50.0},
    local=frozenset({S_LOCAL, S_LOCAL2}),
    names={PUB: "pub", S_GLOBAL: "g75", S_GLOBAL2: "g50", S_LOCAL: "loc4", S_LOCAL2: "loc5"},
)


def pub(values, priority=PUBLISHER_PRIORITY, lineage=None):
    return Side(values, lineage or {PUB: 2}, priority, "pub")


def sub(values, priority=50.0, lineage=None):
    return Side(values, lineage or {S_GLOBAL: 2}, priority, "sub")


# -- Replicas ------------------------------------------------------------------------------------

def test_replica_names():
    assert REPLICAS.name(PUB) == "pub"
    assert REPLICAS.name(99) == "replica 99"
    assert REPLICAS.name(None) == "snapshot"


@pytest.mark.parametrize("lineage, reached, priority", [
    ({}, False, PUBLISHER_PRIORITY),                       # snapshot version: the publisher's
    ({PUB: 3}, False, PUBLISHER_PRIORITY),
    ({PUB: 3, S_GLOBAL: 1}, True, PUBLISHER_PRIORITY),
    ({PUB: 1, S_GLOBAL: 2}, False, 75.0),                  # global: its own priority, reached or not
    ({PUB: 1, S_GLOBAL: 2}, True, 75.0),
    ({PUB: 1, S_GLOBAL2: 4}, True, 50.0),
    ({PUB: 1, S_LOCAL: 2}, False, 0.0),                    # local, not yet at the publisher
    ({PUB: 1, S_LOCAL: 2}, True, PUBLISHER_PRIORITY),      # local, merged at the publisher
    ({PUB: 5, S_LOCAL: 2}, False, PUBLISHER_PRIORITY),     # last writer is the publisher
    ({99: 3}, True, 0.0),                                  # unknown replica
    ({S_GLOBAL: 4, S_GLOBAL2: 4}, True, 75.0),             # tie: lowest nickname is the last writer
])
def test_version_priority_is_the_last_writers(lineage, reached, priority):
    assert REPLICAS.version_priority(lineage, reached) == priority


# -- default: priorities -------------------------------------------------------------------------

def test_default_publisher_beats_subscriber():
    r = resolve("default", None, pub({"a": 1}), sub({"a": 2}, priority=75.0), "update")
    assert (r.winner, r.values) == ("publisher", {"a": 1})


def test_default_higher_priority_subscriber_wins():
    r = resolve("default", None, pub({"a": 1}, priority=50.0), sub({"a": 2}, priority=75.0), "update")
    assert (r.winner, r.values) == ("subscriber", {"a": 2})
    assert "75" in r.reason and "50" in r.reason


def test_default_lower_priority_subscriber_loses():
    r = resolve("default", None, pub({"a": 1}, priority=75.0), sub({"a": 2}, priority=50.0), "update")
    assert (r.winner, r.values) == ("publisher", {"a": 1})


def test_default_tie_the_version_at_the_publisher_wins():
    r = resolve("default", None, pub({"a": 1}, priority=50.0), sub({"a": 2}, priority=50.0), "update")
    assert (r.winner, r.values) == ("publisher", {"a": 1})
    assert "equal priority" in r.reason


@pytest.mark.parametrize("name", ["default", "", None])
def test_default_aliases(name):
    r = resolve(name, None, pub({"a": 1}, priority=0.0), sub({"a": 2}, priority=10.0), "update")
    assert r.winner == "subscriber"


def test_default_delete_can_win():
    r = resolve("default", None, pub(None), sub({"a": 2}), "update delete")
    assert (r.winner, r.values) == ("publisher", None)
    r = resolve("default", None, pub({"a": 1}, priority=10.0), sub(None, priority=20.0), "update delete")
    assert (r.winner, r.values) == ("subscriber", None)


def test_subscriber_wins():
    r = resolve("subscriber_wins", None, pub({"a": 1}), sub({"a": 2}, priority=0.0), "update")
    assert (r.winner, r.values) == ("subscriber", {"a": 2})
    r = resolve("subscriber_wins", None, pub({"a": 1}), sub(None, priority=0.0), "update delete")
    assert (r.winner, r.values) == ("subscriber", None)


# -- later_wins / earlier_wins -------------------------------------------------------------------

T0 = dt.datetime(2024, 1, 1, 12, 0, 0)
T1 = dt.datetime(2024, 1, 1, 12, 0, 1)


@pytest.mark.parametrize("resolver, pub_ts, sub_ts, winner", [
    ("later_wins", T0, T1, "subscriber"),
    ("later_wins", T1, T0, "publisher"),
    ("earlier_wins", T0, T1, "publisher"),
    ("earlier_wins", T1, T0, "subscriber"),
    ("later_wins", None, T0, "subscriber"),     # NULL loses
    ("later_wins", T0, None, "publisher"),
    ("earlier_wins", None, T0, "subscriber"),   # NULL loses, even for "earlier"
    ("earlier_wins", T0, None, "publisher"),
])
def test_datetime_resolvers(resolver, pub_ts, sub_ts, winner):
    p, s = pub({"ts": pub_ts, "x": "p"}), sub({"ts": sub_ts, "x": "s"}, priority=99.0)
    r = resolve(resolver, "ts", p, s, "update")
    assert r.winner == winner
    assert r.values == (p.values if winner == "publisher" else s.values)


@pytest.mark.parametrize("resolver", ["later_wins", "earlier_wins", "maximum", "minimum"])
@pytest.mark.parametrize("value", [None, 5])
def test_column_resolvers_fall_back_to_priority_on_equal_values(resolver, value):
    col_value = T0 if resolver.endswith("wins") and value is not None else value
    r = resolve(resolver, "c", pub({"c": col_value}, priority=10.0), sub({"c": col_value}, priority=20.0), "update")
    assert r.winner == "subscriber"
    r = resolve(resolver, "c", pub({"c": col_value}, priority=20.0), sub({"c": col_value}, priority=20.0), "update")
    assert r.winner == "publisher"


@pytest.mark.parametrize("resolver", ["later_wins", "maximum"])
def test_column_resolvers_fall_back_to_priority_for_a_delete(resolver):
    r = resolve(resolver, "c", pub({"c": 1}), sub(None, priority=0.0), "update delete")
    assert (r.winner, r.values) == ("publisher", {"c": 1})
    r = resolve(resolver, "c", pub(None, priority=0.0), sub({"c": 1}, priority=10.0), "update delete")
    assert (r.winner, r.values) == ("subscriber", {"c": 1})


def test_later_wins_with_timezone_aware_values():
    a = dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC)
    b = dt.datetime(2024, 1, 1, 13, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))   # 11:30 UTC
    r = resolve("later_wins", "ts", pub({"ts": a}), sub({"ts": b}, priority=99.0), "update")
    assert r.winner == "publisher"


# -- maximum / minimum ---------------------------------------------------------------------------

@pytest.mark.parametrize("resolver, a, b, winner", [
    ("maximum", 1, 2, "subscriber"),
    ("maximum", 2, 1, "publisher"),
    ("maximum", -1, -2, "publisher"),
    ("minimum", 1, 2, "publisher"),
    ("minimum", 2, 1, "subscriber"),
    ("maximum", D("1.10"), 1.2, "subscriber"),        # mixed numeric types compare by value
    ("maximum", 1.3, D("1.25"), "publisher"),
    ("minimum", 3, D("2.999"), "subscriber"),
    ("maximum", None, -100, "subscriber"),            # NULL loses
    ("minimum", None, 100, "subscriber"),             # NULL loses, even for "minimum"
    ("minimum", 100, None, "publisher"),
    ("maximum", D("12345678901234567890.1234567891"), D("12345678901234567890.1234567890"), "publisher"),
])
def test_numeric_resolvers(resolver, a, b, winner):
    p, s = pub({"n": a}), sub({"n": b})
    r = resolve(resolver, "n", p, s, "update")
    assert r.winner == winner
    assert r.values == (p.values if winner == "publisher" else s.values)


@settings(max_examples=200, deadline=None, database=None)
@given(st.one_of(st.none(), st.integers(-1000, 1000)), st.one_of(st.none(), st.integers(-1000, 1000)),
       st.sampled_from([0.0, 50.0, 100.0]), st.sampled_from([0.0, 50.0, 100.0]))
def test_maximum_and_minimum_pick_the_extreme_non_null_value(a, b, pa, pb):
    p, s = pub({"n": a}, priority=pa), sub({"n": b}, priority=pb)
    non_null = [v for v in (a, b) if v is not None]
    mx = resolve("maximum", "n", p, s, "update").values["n"]
    mn = resolve("minimum", "n", p, s, "update").values["n"]
    assert mx == (max(non_null) if non_null else None)
    assert mn == (min(non_null) if non_null else None)


# -- additive / averaging ------------------------------------------------------------------------

@pytest.mark.parametrize("resolver, a, b, expected", [
    ("additive", 3, 4, 7),
    ("additive", 3, None, 3),
    ("additive", None, 4, 4),
    ("additive", 1.5, 2, 3.5),
    ("additive", D("1.10"), D("2.05"), D("3.15")),
    ("averaging", 3, 5, 4),
    ("averaging", 1.0, 2.0, 1.5),
    ("averaging", D("1.00"), D("2.00"), D("1.50")),
    ("averaging", None, 8, 8),
])
def test_arithmetic_resolvers(resolver, a, b, expected):
    p = pub({"qty": a, "name": "p"}, priority=100.0)
    s = sub({"qty": b, "name": "s"}, priority=50.0)
    r = resolve(resolver, "qty", p, s, "column update")
    assert r.winner == "merged"
    assert r.values == {"qty": expected, "name": "p"}       # other columns: by priority
    assert type(r.values["qty"]) is type(expected)


def test_arithmetic_other_columns_by_priority():
    p = pub({"qty": 1, "name": "p"}, priority=10.0)
    s = sub({"qty": 2, "name": "s"}, priority=50.0)
    r = resolve("additive", "qty", p, s, "update")
    assert r.values == {"qty": 3, "name": "s"}


def test_arithmetic_does_not_mutate_the_sides():
    p, s = pub({"qty": 1}), sub({"qty": 2})
    resolve("additive", "qty", p, s, "update")
    assert p.values == {"qty": 1} and s.values == {"qty": 2}


@pytest.mark.parametrize("resolver", ["additive", "averaging"])
def test_arithmetic_resolvers_use_priority_for_update_delete(resolver):
    r = resolve(resolver, "qty", pub(None), sub({"qty": 2}), "update delete")
    assert (r.winner, r.values) == ("publisher", None)


@pytest.mark.parametrize("resolver, expected", [
    ("additive", D("12345678901234567891.1234567890")),
    ("averaging", D("6172839450617283945.5617283945")),
])
def test_arithmetic_resolvers_keep_full_decimal_precision(resolver, expected):
    # 30 significant digits: fits the default decimal(38,10) column type.
    p = pub({"qty": D("12345678901234567890.1234567890")})
    s = sub({"qty": D("1.0000000000")})
    r = resolve(resolver, "qty", p, s, "column update")
    assert r.values["qty"] == expected


# -- user resolvers ------------------------------------------------------------------------------

_MOD = types.ModuleType("sparksync_test_user_resolvers")
_MOD.calls = []


def _record(name, out):
    def fn(publisher_row, subscriber_row, conflict_type):
        _MOD.calls.append((name, publisher_row, subscriber_row, conflict_type))
        if isinstance(publisher_row, dict):
            publisher_row["mutated"] = True          # the resolver gets copies
        return out
    return fn


_MOD.choose_publisher = _record("choose_publisher", "publisher")
_MOD.choose_subscriber = _record("choose_subscriber", "subscriber")
_MOD.delete_row = _record("delete_row", None)
_MOD.merge_row = _record("merge_row", {"a": "merged"})
_MOD.bad = _record("bad", 42)
_MOD.not_callable = 17
sys.modules[_MOD.__name__] = _MOD
M = _MOD.__name__


@pytest.mark.parametrize("path", [f"{M}:choose_publisher", f"{M}.choose_publisher"])
def test_user_resolver_paths(path):
    p, s = pub({"a": 1}), sub({"a": 2})
    r = resolve(path, None, p, s, "update")
    assert (r.winner, r.values) == ("publisher", {"a": 1})
    assert p.values == {"a": 1}


def test_user_resolver_gets_both_rows_and_the_conflict_type():
    _MOD.calls.clear()
    resolve(f"{M}:choose_subscriber", None, pub({"a": 1}), sub(None), "update delete")
    assert _MOD.calls == [("choose_subscriber", {"a": 1, "mutated": True}, None, "update delete")]


@pytest.mark.parametrize("fn, winner, values", [
    ("choose_subscriber", "subscriber", {"a": 2}),
    ("delete_row", "merged", None),
    ("merge_row", "merged", {"a": "merged"}),
])
def test_user_resolver_results(fn, winner, values):
    r = resolve(f"{M}:{fn}", None, pub({"a": 1}), sub({"a": 2}), "update")
    assert (r.winner, r.values) == (winner, values)


def test_user_resolver_bad_result_is_an_error():
    from sparksync.merge.conflicts.resolvers import ResolverFailed

    with pytest.raises(ResolverFailed, match="42"):
        resolve(f"{M}:bad", None, pub({"a": 1}), sub({"a": 2}), "update")


def test_load_callable():
    import os.path
    assert load_callable("os.path:join") is os.path.join
    assert load_callable("os.path.join") is os.path.join


@pytest.mark.parametrize("path", ["no_such_module_xyz:f", "no_such_module_xyz.f", "os.path:no_such_function",
                                  "justaname", f"{M}:not_callable"])
def test_load_callable_errors(path):
    with pytest.raises(ConfigurationError) as e:
        load_callable(path)
    assert path in str(e.value)
    assert e.value.obj == path


def test_unknown_resolver_name_at_run_time_fails_that_change():
    # setup refuses it first (check_resolver_importable); at run time it is one failed change
    from sparksync.merge.conflicts.resolvers import ResolverFailed

    with pytest.raises(ResolverFailed, match="cannot be imported"):
        resolve("no_such_resolver", None, pub({"a": 1}), sub({"a": 2}), "update")


# -- check_resolver ------------------------------------------------------------------------------

def test_check_resolver_fine():
    assert check_resolver("default", None, False, ["a", "b"]) == []
    assert check_resolver("maximum", "a", False, ["a", "b"]) == []
    assert check_resolver("additive", "a", True, ["a", "b"]) == []
    assert check_resolver(f"{M}:choose_publisher", None, False, ["a"]) == []


@pytest.mark.parametrize("resolver", ["later_wins", "earlier_wins", "maximum", "minimum", "additive", "averaging"])
def test_check_resolver_needs_a_column(resolver):
    problems = check_resolver(resolver, None, True, ["a"])
    assert any("resolver_column" in p and resolver in p for p in problems)


def test_check_resolver_unknown_column():
    problems = check_resolver("maximum", "zz", False, ["a", "b"])
    assert problems == ["resolver_column 'zz' is not a column of the table"]


@pytest.mark.parametrize("resolver", ["additive", "averaging"])
def test_check_resolver_column_tracking_only(resolver):
    problems = check_resolver(resolver, "a", False, ["a"])
    assert len(problems) == 1 and "column_tracking" in problems[0]


def test_builtin_names():
    assert set(BUILTIN) == {"default", "subscriber_wins", "later_wins", "earlier_wins", "maximum", "minimum",
                            "additive", "averaging"}
    assert isinstance(resolve("default", None, pub({}), sub({}), "update"), Resolution)


@pytest.mark.parametrize("resolver", ["maximum", "minimum"])
@pytest.mark.parametrize("a, b", [(float("nan"), 1.0), (1.0, float("nan")), (float("nan"), float("nan"))])
def test_numeric_resolvers_survive_nan(resolver, a, b):
    p, s = pub({"n": a, "k": "p"}), sub({"n": b, "k": "s"})
    r = resolve(resolver, "n", p, s, "update")
    assert r.winner in ("publisher", "subscriber")
