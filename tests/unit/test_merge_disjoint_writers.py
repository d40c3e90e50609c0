"""Writers on disjoint columns never lose a write (column tracking), in any merge order.

A star of replicas (the publisher 1 and subscribers 2..4) holds one row. Each column has one owner,
the only replica that ever writes it; writes are made the way the triggers make them (the writer's
lineage entry becomes max + 1, the column's colv entry names the writer and that version). Merges
of random subscriptions in random directions exchange versions through ``decide``, as the agent
does. However the writes and merges interleave, after two full rounds every replica holds, in each
column, the last value its owner wrote: a column version keeps the replica that wrote it through
every hop, so no later merge can take another replica's write for a newer one.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from sparksync.merge.apply.decide import ArticleRules, Incoming, Local, decide
from sparksync.merge.conflicts.resolvers import Replicas
from sparksync.merge.tracking import lineage as lin

PUB = 1
SUBS = (2, 3, 4)
COLS = ("a", "b", "c", "d")
G = "00000000-0000-0000-0000-0000000000aa"
NAMES = {1: "pub", 2: "s2", 3: "s3", 4: "s4"}


@dataclass
class Version:
    values: dict
    lineage: dict
    colv: dict


def write(v: Version, writer: int, column: str, value: str) -> Version:
    if v.values[column] == value:
        return v                                   # no change: the update trigger does not fire
    new_lin = lin.bump(v.lineage, writer)
    colv = dict(v.colv)
    colv[column] = [writer, new_lin[writer]]
    return Version({**v.values, column: value}, new_lin, colv)


def exchange(source: Version, source_nick: int, dest: Version, dest_nick: int, rules, replicas) -> Version:
    inc = Incoming("upsert", G, dict(source.values), dict(source.lineage), dict(source.colv), source_nick)
    local = Local(True, dict(dest.lineage), dict(dest.colv), None, load_values=lambda: dict(dest.values))
    d = decide(inc, local, rules, replicas, dest_nick, dest_nick == PUB)
    if d.action == "skip":
        return dest
    assert d.action == "upsert", d
    return Version(dict(d.values), dict(d.lineage), dict(d.colv or {}))


owners = st.fixed_dictionaries({c: st.sampled_from((PUB, *SUBS)) for c in COLS})
steps = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(COLS), st.integers(0, 5)),
    st.tuples(st.just("merge"), st.sampled_from(SUBS), st.sampled_from(["both", "upload", "download"])),
), min_size=1, max_size=30)


@settings(max_examples=500, deadline=None, database=None)
@given(owners, steps, st.sampled_from(["default", "subscriber_wins"]),
       st.dictionaries(st.sampled_from(SUBS), st.sampled_from([0.0, 25.0, 75.0])))
def test_disjoint_column_writers_never_lose_a_write(owner, ops, resolver, prio):
    local = frozenset(s for s in SUBS if s not in prio)
    replicas = Replicas(PUB, prio, local, NAMES)
    rules = ArticleRules(7, True, resolver)
    base = Version({c: "base" for c in COLS}, {PUB: 1}, {})
    at = {n: Version(dict(base.values), dict(base.lineage), {}) for n in (PUB, *SUBS)}
    last = dict(base.values)
    counter = 0
    for op in ops:
        if op[0] == "write":
            _, column, _ = op
            counter += 1
            value = f"{owner[column]}:{counter}"
            at[owner[column]] = write(at[owner[column]], owner[column], column, value)
            last[column] = value
        else:
            _, sub, direction = op
            if direction in ("both", "upload"):
                at[PUB] = exchange(at[sub], sub, at[PUB], PUB, rules, replicas)
            if direction in ("both", "download"):
                at[sub] = exchange(at[PUB], PUB, at[sub], sub, rules, replicas)
    for _ in range(2):
        for sub in SUBS:
            at[PUB] = exchange(at[sub], sub, at[PUB], PUB, rules, replicas)
        for sub in SUBS:
            at[sub] = exchange(at[PUB], PUB, at[sub], sub, rules, replicas)
    for n, v in at.items():
        assert v.values == last, f"replica {n}: {v.values} != {last}"
        for c in COLS:
            if last[c] != "base":
                assert v.colv[c][0] == owner[c], f"replica {n}, column {c}: colv {v.colv[c]} names another writer"


def test_the_reported_case_a_writes_phone_twice_b_writes_city():
    """Issue 9: A sets phone = p1, B sets city = c1, both upload; A sets phone = p2; download. Before the
    fix the publisher's merged version took A's phone version as its own and beat p2."""
    replicas = Replicas(PUB, {}, frozenset({2, 3}), NAMES)
    rules = ArticleRules(7, True)
    base = Version({"phone": "p0", "city": "c0"}, {PUB: 1}, {})
    a = write(base, 2, "phone", "p1")
    b = write(base, 3, "city", "c1")
    hq = exchange(a, 2, base, PUB, rules, replicas)
    hq = exchange(b, 3, hq, PUB, rules, replicas)
    a = write(a, 2, "phone", "p2")
    a = exchange(hq, PUB, a, 2, rules, replicas)
    assert a.values == {"phone": "p2", "city": "c1"}
    hq = exchange(a, 2, hq, PUB, rules, replicas)
    assert hq.values == {"phone": "p2", "city": "c1"}
