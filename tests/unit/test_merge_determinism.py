"""Determinism of conflict resolution (DESIGN.md §6): the same conflict resolves to the same row whether
it is detected at the publisher during upload or at the subscriber during download.

Each example is a consistent history: a common version of a row (known to both sides), then concurrent
local changes made the way the triggers make them (lineage bumped by the writer, colv entries
[writer, version] for the columns whose value changed, a delete as the last change). The publisher's
side may hold changes by the publisher (1) or by other subscribers that already synced (3, 4); the
subscriber under test (2) changes its own copy. The final row is checked against an independent model
of the rules (priorities, column resolvers, column-level merge), in both directions.
"""

from __future__ import annotations

import datetime as dt
import sys
import types
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from sparksync.merge.apply.decide import ArticleRules, Incoming, Local, decide
from sparksync.merge.conflicts.model import ConflictType
from sparksync.merge.conflicts.resolvers import PUBLISHER_PRIORITY, Replicas
from sparksync.merge.tracking import lineage as lin

PUB, S = 1, 2
OTHERS = (3, 4)
COLS = ("a", "b", "n", "ts")
G = "00000000-0000-0000-0000-000000000001"
NAMES = {1: "pub", 2: "sub2", 3: "sub3", 4: "sub4"}
TIMES = [dt.datetime(2024, 5, 1, 12, 0, s) for s in range(3)]
RESOLVER_COLUMN = {"maximum": "n", "minimum": "n", "later_wins": "ts", "earlier_wins": "ts",
                   "additive": "a", "averaging": "a"}

_MOD = types.ModuleType("sparksync_test_determinism_resolvers")


def _user_merge(p, s, conflict_type):
    """A deterministic user resolver: keeps the larger 'a' of the two rows and glues the 'b's."""
    if p is None or s is None:
        return "publisher" if s is None else "subscriber"
    return {**p, "a": max(p["a"], s["a"]), "b": f"{p['b']}|{s['b']}"}


_MOD.user_merge = _user_merge
sys.modules[_MOD.__name__] = _MOD
USER = f"{_MOD.__name__}:user_merge"

column_values = {
    "a": st.integers(0, 3),
    "b": st.sampled_from(["x", "y", "z"]),
    "n": st.one_of(st.none(), st.integers(0, 3)),
    "ts": st.one_of(st.none(), st.sampled_from(TIMES)),
}
rows = st.fixed_dictionaries(column_values)


@dataclass
class Version:
    values: dict | None          # None: deleted
    lineage: dict
    colv: dict | None
    changed: set                 # columns this side changed since the common version


@dataclass
class Scenario:
    replicas: Replicas
    rules: ArticleRules
    base: dict
    pub: Version
    sub: Version


@st.composite
def histories(draw, base_values, base_lin, base_colv, writers, column_tracking):
    values, lineage_ = dict(base_values), dict(base_lin)
    colv = dict(base_colv) if column_tracking else None
    changed: set = set()
    steps = draw(st.integers(1, 3))
    for i in range(steps):
        writer = draw(st.sampled_from(writers))
        if i == steps - 1 and draw(st.integers(0, 3)) == 3:          # a delete, one time in four
            return Version(None, lin.bump(lineage_, writer), None, changed)
        edits = {c: draw(column_values[c]) for c in draw(st.sets(st.sampled_from(COLS), min_size=1))}
        new = {c: v for c, v in edits.items() if v != values[c]}
        if not new:
            continue                       # nothing changed: the update trigger does not fire
        lineage_ = lin.bump(lineage_, writer)
        values.update(new)
        changed |= set(new)
        if column_tracking:
            for c in new:
                colv[c] = [writer, lineage_[writer]]
    if lineage_ == base_lin:               # every step was a no-op: make one real change
        writer = writers[0]
        lineage_ = lin.bump(lineage_, writer)
        values["a"] = values["a"] + 10 + writer
        changed.add("a")
        if column_tracking:
            colv["a"] = [writer, lineage_[writer]]
    return Version(values, lineage_, colv, changed)


@st.composite
def scenarios(draw, resolvers):
    local = frozenset(n for n in (S, *OTHERS) if draw(st.integers(0, 2)) == 2)
    prio = {n: draw(st.sampled_from([99.0, 75.0, 50.0, 25.0, 0.0] if n == S else [25.0, 50.0, 75.0, 99.0, 0.0]))
            for n in (S, *OTHERS) if n not in local}
    replicas = Replicas(PUB, prio, local, NAMES)
    resolver = draw(st.sampled_from(resolvers))
    column_tracking = draw(st.booleans())
    rules = ArticleRules(9, column_tracking, resolver, RESOLVER_COLUMN.get(resolver))
    base = draw(rows)
    base_lin = draw(st.dictionaries(st.sampled_from([PUB, S, *OTHERS]), st.integers(1, 6), min_size=1))
    base_colv = {}
    for c in draw(st.sets(st.sampled_from(COLS))):
        k = draw(st.sampled_from(sorted(base_lin)))
        base_colv[c] = [k, draw(st.integers(1, base_lin[k]))]       # known to the common version
    pub = draw(histories(base, base_lin, base_colv, [*OTHERS, PUB], column_tracking))
    sub = draw(histories(base, base_lin, base_colv, [S], column_tracking))
    return Scenario(replicas, rules, base, pub, sub)


def _local(v: Version) -> Local:
    if v.values is None:
        return Local(exists=False, lineage=None, colv=None, tombstone=dict(v.lineage))
    return Local(exists=True, lineage=dict(v.lineage), colv=None if v.colv is None else dict(v.colv), tombstone=None,
                 load_values=lambda: dict(v.values))


def _incoming(v: Version, source: int) -> Incoming:
    op = "delete" if v.values is None else "upsert"
    return Incoming(op, G, None if v.values is None else dict(v.values), dict(v.lineage),
                    None if v.colv is None else dict(v.colv), source)


def at_publisher(sc: Scenario):
    return decide(_incoming(sc.sub, S), _local(sc.pub), sc.rules, sc.replicas, PUB, True)


def at_subscriber(sc: Scenario):
    return decide(_incoming(sc.pub, PUB), _local(sc.sub), sc.rules, sc.replicas, S, False)


def final(d):
    assert d.action in ("upsert", "delete", "tombstone"), d       # concurrent versions are never skipped
    return d.values if d.action == "upsert" else None


# -- an independent model of the rules ---------------------------------------------------------

def model_priorities(sc: Scenario) -> tuple[float, float]:
    w = max(sc.pub.lineage, key=lambda k: (sc.pub.lineage[k], -k))       # the publisher side's last writer
    pp = PUBLISHER_PRIORITY if w == PUB or w in sc.replicas.local else sc.replicas.priority[w]
    sp = 0.0 if S in sc.replicas.local else sc.replicas.priority[S]      # 2's own change, not yet uploaded
    return pp, sp


def model_winner(sc: Scenario) -> str:
    pp, sp = model_priorities(sc)
    by_priority = "sub" if sp > pp else "pub"
    r = sc.rules.resolver
    if r == "subscriber_wins":
        return "sub"
    if r == "default" or sc.pub.values is None or sc.sub.values is None:
        return by_priority
    col = sc.rules.resolver_column
    a, b = sc.pub.values[col], sc.sub.values[col]
    if a == b:
        return by_priority
    if a is None or b is None:
        return "sub" if a is None else "pub"                       # NULL loses
    return "sub" if b > a else "pub"                               # maximum / later_wins


def model_final(sc: Scenario):
    p, s = sc.pub.values, sc.sub.values
    if p is None and s is None:
        return None
    winner = model_winner(sc)
    won = p if winner == "pub" else s
    if p is None or s is None or not sc.rules.column_tracking:
        return won
    out = {}
    for c in COLS:
        if c in sc.pub.changed and c in sc.sub.changed and p[c] != s[c]:
            out[c] = won[c]
        elif c in sc.pub.changed:
            out[c] = p[c]
        elif c in sc.sub.changed:
            out[c] = s[c]
        else:
            assert p[c] == s[c] == sc.base[c]
            out[c] = p[c]
    return out


def model_conflict(sc: Scenario):
    p, s = sc.pub.values, sc.sub.values
    if p is None and s is None:
        return None
    if p is None or s is None:
        return ConflictType.UPDATE_DELETE_WINS if model_final(sc) is None else ConflictType.UPDATE_WINS_DELETE
    if not sc.rules.column_tracking:
        return ConflictType.UPDATE
    both = {c for c in sc.pub.changed & sc.sub.changed if p[c] != s[c]}
    return ConflictType.COLUMN_UPDATE if both else None


# -- properties ----------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None, database=None)
@given(scenarios(["default", "subscriber_wins", "maximum", "later_wins"]))
def test_same_conflict_same_result_at_publisher_and_subscriber(sc):
    d_up, d_down = at_publisher(sc), at_subscriber(sc)
    expected = model_final(sc)
    assert final(d_up) == expected
    assert final(d_down) == expected
    ctype = model_conflict(sc)
    assert (d_up.conflict and d_up.conflict.conflict_type) == (ctype and ctype)
    assert (d_down.conflict and d_down.conflict.conflict_type) == (ctype and ctype)


@settings(max_examples=400, deadline=None, database=None)
@given(scenarios(["default", "subscriber_wins", "later_wins", "earlier_wins", "maximum", "minimum", "additive",
                  "averaging", USER]))
def test_every_resolver_is_deterministic_across_directions(sc):
    d_up, d_down = at_publisher(sc), at_subscriber(sc)
    assert final(d_up) == final(d_down)
    assert (d_up.conflict is None) == (d_down.conflict is None)
    if d_up.conflict is not None:
        cu, cd = d_up.conflict, d_down.conflict
        assert cu.conflict_type == cd.conflict_type
        assert cu.columns == cd.columns
        assert (cu.winner, cu.origin) == (cd.winner, cd.origin)
        assert cu.losing_row == cd.losing_row


@settings(max_examples=300, deadline=None, database=None)
@given(scenarios(["default", "subscriber_wins", "maximum", "later_wins", "additive", USER]))
def test_resolved_version_is_newer_than_both_and_goes_back(sc):
    both_deleted = sc.pub.values is None and sc.sub.values is None
    for d, dest in ((at_publisher(sc), PUB), (at_subscriber(sc), S)):
        if both_deleted:
            assert d.action == "tombstone"
            assert d.lineage == lin.merge(sc.pub.lineage, sc.sub.lineage)
            assert not d.send_back and d.conflict is None
            continue
        assert d.send_back is True
        assert d.lineage == lin.bump(lin.merge(sc.pub.lineage, sc.sub.lineage), dest)
        assert lin.compare(d.lineage, sc.pub.lineage) is lin.Relation.INCOMING_NEWER
        assert lin.compare(d.lineage, sc.sub.lineage) is lin.Relation.INCOMING_NEWER
        if d.action == "upsert" and sc.rules.column_tracking:
            # every column entry is known to the new version, and the new version's values are complete
            assert set(d.values) == set(COLS)
            assert all(lin.knows(d.lineage, e) for e in d.colv.values())


@settings(max_examples=300, deadline=None, database=None)
@given(scenarios(["default", "subscriber_wins", "maximum", "later_wins"]))
def test_resolved_version_is_applied_by_the_other_side(sc):
    """The result sent back dominates the other side's version, so it is applied there as is."""
    for d, other, dest, upload, source in ((at_publisher(sc), sc.sub, S, False, PUB),
                                           (at_subscriber(sc), sc.pub, PUB, True, S)):
        if not d.send_back:
            continue
        back = Incoming("delete" if d.action == "delete" else "upsert", G, d.values, d.lineage, d.colv, source)
        d2 = decide(back, _local(other), sc.rules, sc.replicas, dest, upload)
        assert d2.conflict is None
        assert d2.send_back is False
        if d.action == "delete":
            assert d2.action in ("delete", "tombstone")
        else:
            assert (d2.action, d2.values, d2.lineage) == ("upsert", d.values, d.lineage)


# -- a row re-inserted over its tombstone ----------------------------------------------------------

def test_reinsert_over_tombstone_vs_column_edit_resolves_the_same_in_both_directions():
    """DELETE then INSERT of the same rowguid at the publisher (e.g. a row restored from a copy that
    keeps its rowguid column) while subscriber 2 edits one column.

    The insert triggers of both dialects give the re-inserted row lineage bump(tombstone) and an empty
    colv, so the publisher's version changed every column but its colv names none of them.
    """
    replicas = Replicas(PUB, {S: 50.0}, frozenset(), NAMES)
    rules = ArticleRules(9, True)
    base_lin = {PUB: 1}
    tomb = lin.bump(base_lin, PUB)                                     # {1: 2}
    pub = Version({"a": 5, "b": "p"}, lin.bump(tomb, PUB), {}, {"a", "b"})   # re-inserted: {1: 3}, colv {}
    sub_lin = lin.bump(base_lin, S)                                    # {1: 1, 2: 2}
    sub = Version({"a": 0, "b": "s"}, sub_lin, {"b": [S, sub_lin[S]]}, {"b"})
    sc = Scenario(replicas, rules, {"a": 0, "b": "x"}, pub, sub)
    d_up, d_down = at_publisher(sc), at_subscriber(sc)
    assert final(d_up) == final(d_down)

