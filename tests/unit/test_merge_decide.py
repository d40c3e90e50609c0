"""Unit tests for sparksync.merge.apply.decide: what to do with one incoming change at a destination.

Nicknames: the publisher is 1, the subscriber under test is 2, two more subscribers are 3 and 4.
``upload=True``: the destination is the publisher, the change comes from subscriber 2.
``upload=False``: the destination is subscriber 2, the change comes from the publisher.
"""

from __future__ import annotations

import sys
import types

import pytest

from sparksync.merge.apply.decide import ArticleRules, Decision, Incoming, Local, decide
from sparksync.merge.conflicts.model import ConflictType
from sparksync.merge.conflicts.resolvers import Replicas
from sparksync.merge.tracking import lineage as lin

PUB, S, S3, S4 = 1, 2, 3, 4
G = "6f9619ff-8b86-d011-b42d-00c04fc964ff"
NAMES = {PUB: "pub", S: "sub2", S3: "sub3", S4: "sub4"}


def replicas(prio=None, local=()):
    return Replicas(publisher=PUB, priority=prio if prio is not None else {S: 75.0, S3: 50.0, S4: 90.0},
                    local=frozenset(local), names=NAMES)


ROW = ArticleRules(tablenick=7, column_tracking=False)
COL = ArticleRules(tablenick=7, column_tracking=True)


def rules(column_tracking=False, resolver="default", column=None):
    return ArticleRules(tablenick=7, column_tracking=column_tracking, resolver=resolver, resolver_column=column)


def upsert(values, lineage_, colv=None, source=S):
    return Incoming("upsert", G, dict(values), dict(lineage_), colv, source)


def delete(lineage_, source=S):
    return Incoming("delete", G, None, dict(lineage_), None, source)


def row(values, lineage_, colv=None):
    return Local(exists=True, lineage=dict(lineage_), colv=colv, tombstone=None, load_values=lambda: dict(values))


def deleted(tombstone):
    return Local(exists=False, lineage=None, colv=None, tombstone=dict(tombstone))


def absent():
    return Local(exists=False, lineage=None, colv=None, tombstone=None)


def up(change, local, rules_=ROW, reps=None):
    """Decide at the publisher (upload from subscriber 2)."""
    return decide(change, local, rules_, reps or replicas(), PUB, True)


def down(change, local, rules_=ROW, reps=None):
    """Decide at subscriber 2 (download from the publisher)."""
    return decide(change, local, rules_, reps or replicas(), S, False)


def resolved_lineage(a, b, dest):
    return lin.bump(lin.merge(a, b), dest)


# -- no conflict: apply or skip ------------------------------------------------------------------

BASE = {PUB: 1}


@pytest.mark.parametrize("direction", ["up", "down"])
def test_incoming_update_that_dominates_is_applied(direction):
    if direction == "up":
        inc_lin, d = {PUB: 1, S: 2}, up(upsert({"a": 2}, {PUB: 1, S: 2}), row({"a": 1}, BASE))
    else:
        inc_lin, d = {PUB: 2}, down(upsert({"a": 2}, {PUB: 2}, source=PUB), row({"a": 1}, BASE))
    assert d.action == "upsert"
    assert d.values == {"a": 2}
    assert d.lineage == inc_lin
    assert d.send_back is False
    assert d.conflict is None


def test_incoming_update_carries_its_colv():
    colv = {"a": [S, 2]}
    d = up(upsert({"a": 2}, {PUB: 1, S: 2}, colv), row({"a": 1}, BASE, {}), COL)
    assert (d.action, d.colv, d.send_back) == ("upsert", colv, False)


def test_incoming_delete_that_dominates_is_applied():
    d = up(delete({PUB: 1, S: 2}), row({"a": 1}, BASE))
    assert d.action == "delete"
    assert d.lineage == {PUB: 1, S: 2}
    assert d.send_back is False and d.conflict is None


@pytest.mark.parametrize("inc_lin", [
    {PUB: 1, S: 2, S3: 3},            # equal
    {PUB: 1, S: 2},                   # dominated
    {PUB: 1},
    {},
])
def test_incoming_update_equal_or_dominated_is_skipped(inc_lin):
    d = up(upsert({"a": 2}, inc_lin), row({"a": 9}, {PUB: 1, S: 2, S3: 3}))
    assert d.action == "skip"
    assert d.conflict is None and d.send_back is False


def test_incoming_delete_dominated_by_the_local_row_is_skipped():
    d = down(delete({PUB: 2}, source=PUB), row({"a": 1}, {PUB: 2, S: 3}))
    assert d.action == "skip"


def test_insert_of_a_row_unknown_here():
    d = up(upsert({"a": 1}, {S: 1}, {}), absent(), COL)
    assert (d.action, d.values, d.lineage, d.colv, d.send_back, d.conflict) == \
        ("upsert", {"a": 1}, {S: 1}, {}, False, None)


def test_upsert_newer_than_the_local_tombstone_reinserts():
    d = down(upsert({"a": 1}, {PUB: 3, S: 2}, source=PUB), deleted({PUB: 1, S: 2}))
    assert (d.action, d.values, d.lineage, d.send_back, d.conflict) == \
        ("upsert", {"a": 1}, {PUB: 3, S: 2}, False, None)


@pytest.mark.parametrize("inc_lin", [{PUB: 1, S: 2}, {PUB: 1}])
def test_upsert_known_to_the_local_tombstone_is_skipped(inc_lin):
    d = down(upsert({"a": 1}, inc_lin, source=PUB), deleted({PUB: 1, S: 2}))
    assert d.action == "skip"


# -- deleted on both sides -----------------------------------------------------------------------

def test_delete_of_a_row_deleted_here_too_merges_the_tombstones():
    d = up(delete({PUB: 1, S: 2}), deleted({PUB: 2}))
    assert d.action == "tombstone"
    assert d.lineage == {PUB: 2, S: 2}
    assert d.conflict is None and d.send_back is False


def test_delete_of_a_row_deleted_here_with_a_dominating_tombstone_is_skipped():
    d = up(delete({PUB: 1, S: 2}), deleted({PUB: 3, S: 2}))
    assert d.action == "skip"


def test_delete_of_a_row_never_seen_here_keeps_its_tombstone():
    d = down(delete({PUB: 4}, source=PUB), absent())
    assert d.action == "tombstone"
    assert d.lineage == {PUB: 4}
    assert d.conflict is None


# -- row-level update-update conflicts -----------------------------------------------------------

# the common version is {1: 1}; the publisher changed it ({1: 2}), subscriber 2 too ({1: 1, 2: 2}).
P_LIN, S_LIN = {PUB: 2}, {PUB: 1, S: 2}


def test_update_update_at_the_publisher_publisher_wins():
    d = up(upsert({"a": "sub"}, S_LIN), row({"a": "pub"}, P_LIN))
    assert d.action == "upsert"
    assert d.values == {"a": "pub"}
    assert d.lineage == resolved_lineage(P_LIN, S_LIN, PUB) == {PUB: 3, S: 2}
    assert d.send_back is True
    c = d.conflict
    assert c.conflict_type is ConflictType.UPDATE
    assert c.reason_code == 1
    assert (c.tablenick, c.rowguid) == (7, G)
    assert (c.winner, c.origin) == ("pub", "sub2")
    assert c.losing_row == {"a": "sub"}


def test_update_update_at_the_subscriber_publisher_wins():
    d = down(upsert({"a": "pub"}, P_LIN, source=PUB), row({"a": "sub"}, S_LIN))
    assert d.action == "upsert"
    assert d.values == {"a": "pub"}
    assert d.lineage == resolved_lineage(P_LIN, S_LIN, S) == {PUB: 2, S: 3}
    assert d.send_back is True
    assert d.conflict.conflict_type is ConflictType.UPDATE
    assert (d.conflict.winner, d.conflict.origin) == ("pub", "sub2")
    assert d.conflict.losing_row == {"a": "sub"}


@pytest.mark.parametrize("decide_", [up, down])
def test_higher_priority_subscriber_beats_a_lower_priority_subscribers_version(decide_):
    # The publisher holds subscriber 3's change (priority 50); subscriber 2 (75) changed it concurrently.
    p_lin = {PUB: 1, S3: 2}
    if decide_ is up:
        d = up(upsert({"a": "s2"}, S_LIN), row({"a": "s3"}, p_lin))
    else:
        d = down(upsert({"a": "s3"}, p_lin, source=PUB), row({"a": "s2"}, S_LIN))
    assert d.values == {"a": "s2"}
    assert (d.conflict.winner, d.conflict.origin) == ("sub2", "sub3")
    assert d.conflict.losing_row == {"a": "s3"}


@pytest.mark.parametrize("decide_", [up, down])
def test_lower_priority_subscriber_loses_to_a_higher_priority_subscribers_version(decide_):
    p_lin = {PUB: 1, S4: 2}                     # subscriber 4 has priority 90 > 75
    if decide_ is up:
        d = up(upsert({"a": "s2"}, S_LIN), row({"a": "s4"}, p_lin))
    else:
        d = down(upsert({"a": "s4"}, p_lin, source=PUB), row({"a": "s2"}, S_LIN))
    assert d.values == {"a": "s4"}


@pytest.mark.parametrize("decide_", [up, down])
def test_equal_priority_the_version_at_the_publisher_wins(decide_):
    reps = replicas({S: 50.0, S3: 50.0})
    p_lin = {PUB: 1, S3: 2}
    if decide_ is up:
        d = up(upsert({"a": "s2"}, S_LIN), row({"a": "s3"}, p_lin), reps=reps)
    else:
        d = down(upsert({"a": "s3"}, p_lin, source=PUB), row({"a": "s2"}, S_LIN), reps=reps)
    assert d.values == {"a": "s3"}


@pytest.mark.parametrize("decide_", [up, down])
def test_local_subscriptions_first_to_sync_wins(decide_):
    # Subscribers 2 and 3 are local (client) subscriptions. 3 synced first: its change is at the
    # publisher with the publisher's priority; 2's change still has priority 0.
    reps = replicas({}, local={S, S3})
    p_lin = {PUB: 1, S3: 2}
    if decide_ is up:
        d = up(upsert({"a": "s2"}, S_LIN), row({"a": "s3"}, p_lin), reps=reps)
    else:
        d = down(upsert({"a": "s3"}, p_lin, source=PUB), row({"a": "s2"}, S_LIN), reps=reps)
    assert d.values == {"a": "s3"}
    assert d.conflict.winner == "sub3"


@pytest.mark.parametrize("decide_", [up, down])
def test_local_subscription_change_that_reached_the_publisher_beats_a_global_subscription(decide_):
    reps = replicas({S: 90.0}, local={S3})
    p_lin = {PUB: 1, S3: 2}
    if decide_ is up:
        d = up(upsert({"a": "s2"}, S_LIN), row({"a": "s3"}, p_lin), reps=reps)
    else:
        d = down(upsert({"a": "s3"}, p_lin, source=PUB), row({"a": "s2"}, S_LIN), reps=reps)
    assert d.values == {"a": "s3"}


@pytest.mark.parametrize("decide_", [up, down])
def test_subscriber_wins_resolver(decide_):
    r = rules(resolver="subscriber_wins")
    if decide_ is up:
        d = up(upsert({"a": "sub"}, S_LIN), row({"a": "pub"}, P_LIN), r)
    else:
        d = down(upsert({"a": "pub"}, P_LIN, source=PUB), row({"a": "sub"}, S_LIN), r)
    assert d.values == {"a": "sub"}
    assert (d.conflict.winner, d.conflict.origin, d.conflict.losing_row) == ("sub2", "pub", {"a": "pub"})


@pytest.mark.parametrize("decide_", [up, down])
def test_maximum_resolver(decide_):
    r = rules(resolver="maximum", column="n")
    pv, sv = {"a": "pub", "n": 1}, {"a": "sub", "n": 5}
    d = up(upsert(sv, S_LIN), row(pv, P_LIN), r) if decide_ is up else down(upsert(pv, P_LIN, source=PUB), row(sv, S_LIN), r)
    assert d.values == sv


def test_row_level_resolution_with_column_tracking_stamps_every_column():
    # colv missing on one side: no column-level detection, the row is resolved as a whole.
    d = up(upsert({"a": "sub", "b": 1}, S_LIN, None), row({"a": "pub", "b": 2}, P_LIN, {"a": [PUB, 2]}), COL)
    assert d.conflict.conflict_type is ConflictType.UPDATE
    assert d.values == {"a": "pub", "b": 2}
    # a keeps the winner's version (its writer); b has none on the winning side: a new one made here
    assert d.colv == {"a": [PUB, 2], "b": [PUB, 3]}


# -- update-delete conflicts ---------------------------------------------------------------------

def test_update_at_subscriber_vs_delete_at_publisher_upload_delete_wins():
    tomb = {PUB: 2}
    d = up(upsert({"a": "sub"}, S_LIN), deleted(tomb))
    assert d.action == "delete"
    assert d.values is None
    assert d.lineage == resolved_lineage(tomb, S_LIN, PUB)
    assert d.send_back is True
    assert d.conflict.conflict_type is ConflictType.UPDATE_DELETE_WINS
    assert d.conflict.losing_row == {"a": "sub"}
    assert (d.conflict.winner, d.conflict.origin) == ("pub", "sub2")


def test_update_at_publisher_vs_delete_at_subscriber_download_update_wins():
    tomb = {PUB: 1, S: 2}
    d = down(upsert({"a": "pub"}, P_LIN, source=PUB), deleted(tomb))
    assert d.action == "upsert"
    assert d.values == {"a": "pub"}
    assert d.lineage == resolved_lineage(tomb, P_LIN, S)
    assert d.send_back is True
    assert d.conflict.conflict_type is ConflictType.UPDATE_WINS_DELETE
    assert d.conflict.losing_row is None


def test_delete_at_subscriber_vs_update_at_publisher_upload_update_wins():
    d = up(delete({PUB: 1, S: 2}), row({"a": "pub"}, P_LIN))
    assert d.action == "upsert"
    assert d.values == {"a": "pub"}
    assert d.lineage == resolved_lineage(P_LIN, {PUB: 1, S: 2}, PUB)
    assert d.send_back is True
    assert d.conflict.conflict_type is ConflictType.UPDATE_WINS_DELETE


def test_delete_at_publisher_vs_update_at_subscriber_download_delete_wins():
    d = down(delete({PUB: 2}, source=PUB), row({"a": "sub"}, S_LIN))
    assert d.action == "delete"
    assert d.values is None
    assert d.lineage == resolved_lineage({PUB: 2}, S_LIN, S)
    assert d.send_back is True
    assert d.conflict.conflict_type is ConflictType.UPDATE_DELETE_WINS
    assert d.conflict.losing_row == {"a": "sub"}


@pytest.mark.parametrize("decide_", [up, down])
def test_subscriber_wins_keeps_the_subscribers_delete(decide_):
    r = rules(resolver="subscriber_wins")
    s_tomb = {PUB: 1, S: 2}
    if decide_ is up:
        d = up(delete(s_tomb), row({"a": "pub"}, P_LIN), r)
    else:
        d = down(upsert({"a": "pub"}, P_LIN, source=PUB), deleted(s_tomb), r)
    assert d.action == "delete"
    assert d.conflict.conflict_type is ConflictType.UPDATE_DELETE_WINS


@pytest.mark.parametrize("decide_", [up, down])
def test_subscriber_wins_keeps_the_subscribers_update_over_a_delete(decide_):
    r = rules(resolver="subscriber_wins")
    p_tomb = {PUB: 2}
    if decide_ is up:
        d = up(upsert({"a": "sub"}, S_LIN), deleted(p_tomb), r)
    else:
        d = down(delete(p_tomb, source=PUB), row({"a": "sub"}, S_LIN), r)
    assert d.action == "upsert"
    assert d.values == {"a": "sub"}
    assert d.conflict.conflict_type is ConflictType.UPDATE_WINS_DELETE


# -- column tracking -----------------------------------------------------------------------------

# Common version: lineage {1: 1}, colv {}, row {a: 0, b: 0, c: 0}.
C_BASE = {"a": 0, "b": 0, "c": 0}


def col_sides(pub_changes, sub_changes):
    """The publisher's and subscriber 2's versions after concurrent column edits."""
    p_lin, s_lin = {PUB: 2}, {PUB: 1, S: 2}
    p_vals, s_vals = {**C_BASE, **pub_changes}, {**C_BASE, **sub_changes}
    p_colv = {c: [PUB, 2] for c in pub_changes}
    s_colv = {c: [S, 2] for c in sub_changes}
    return (p_vals, p_lin, p_colv), (s_vals, s_lin, s_colv)


def col_decide(direction, pub_changes, sub_changes, rules_=COL, reps=None):
    (pv, pl, pc), (sv, sl, sc) = col_sides(pub_changes, sub_changes)
    if direction == "up":
        return up(upsert(sv, sl, sc), row(pv, pl, pc), rules_, reps)
    return down(upsert(pv, pl, pc, source=PUB), row(sv, sl, sc), rules_, reps)


@pytest.mark.parametrize("direction", ["up", "down"])
def test_column_tracking_different_columns_no_conflict(direction):
    d = col_decide(direction, {"a": 1}, {"b": 2})
    dest = PUB if direction == "up" else S
    assert d.action == "upsert"
    assert d.conflict is None
    assert d.values == {"a": 1, "b": 2, "c": 0}
    lineage = resolved_lineage({PUB: 2}, {PUB: 1, S: 2}, dest)
    assert d.lineage == lineage
    # each column keeps the replica that wrote it (issue 9: crediting the destination made the writer's
    # next edit of its own column look concurrent with that credit, and lose)
    assert d.colv == {"a": [PUB, 2], "b": [S, 2]}
    assert d.send_back is True


@pytest.mark.parametrize("direction", ["up", "down"])
def test_column_tracking_same_column_same_value_no_conflict(direction):
    d = col_decide(direction, {"a": 5, "b": 1}, {"a": 5, "c": 3})
    assert d.conflict is None
    assert d.values == {"a": 5, "b": 1, "c": 3}
    assert d.action == "upsert"


@pytest.mark.parametrize("direction", ["up", "down"])
def test_column_tracking_same_column_conflict_keeps_other_edits(direction):
    d = col_decide(direction, {"a": 1, "b": 1}, {"a": 2, "c": 2})
    dest = PUB if direction == "up" else S
    assert d.action == "upsert"
    assert d.values == {"a": 1, "b": 1, "c": 2}        # a: the publisher's; b and c: both edits kept
    c = d.conflict
    assert c.conflict_type is ConflictType.COLUMN_UPDATE
    assert c.reason_code == 2
    assert c.columns == ["a"]
    assert (c.winner, c.origin) == ("pub", "sub2")
    assert c.losing_row == {"a": 2, "b": 0, "c": 2}
    new = d.lineage
    assert new == resolved_lineage({PUB: 2}, {PUB: 1, S: 2}, dest)
    assert d.colv == {"a": [PUB, 2], "b": [PUB, 2], "c": [S, 2]}     # a: the winner's own version
    assert d.send_back is True


@pytest.mark.parametrize("direction", ["up", "down"])
def test_column_tracking_conflict_subscriber_wins_only_the_conflicting_columns(direction):
    d = col_decide(direction, {"a": 1, "b": 1}, {"a": 2, "c": 2}, rules(True, "subscriber_wins"))
    assert d.values == {"a": 2, "b": 1, "c": 2}
    assert d.conflict.columns == ["a"]


@pytest.mark.parametrize("direction", ["up", "down"])
def test_column_tracking_several_conflicting_columns(direction):
    d = col_decide(direction, {"a": 1, "b": 1, "c": 7}, {"a": 2, "b": 2, "c": 7})
    assert d.conflict.columns == ["a", "b"]
    assert d.values == {"a": 1, "b": 1, "c": 7}


@pytest.mark.parametrize("direction", ["up", "down"])
def test_column_tracking_additive(direction):
    d = col_decide(direction, {"a": 3, "b": 1}, {"a": 4, "c": 2}, rules(True, "additive", "a"))
    assert d.values == {"a": 7, "b": 1, "c": 2}
    assert d.conflict.conflict_type is ConflictType.COLUMN_UPDATE
    assert d.conflict.winner == "resolver"


def test_column_tracking_edit_known_to_the_other_side_is_not_a_change():
    # The publisher's edit of b ([1, 1]) is in the common version; only a changed at the publisher since.
    p_lin, s_lin = {PUB: 2}, {PUB: 1, S: 2}
    pv, sv = {"a": 1, "b": 5}, {"a": 0, "b": 6}
    d = up(upsert(sv, s_lin, {"b": [S, 2]}), row(pv, p_lin, {"a": [PUB, 2], "b": [PUB, 1]}), COL)
    assert d.conflict is None
    assert d.values == {"a": 1, "b": 6}


# -- user resolvers ------------------------------------------------------------------------------

_MOD = types.ModuleType("sparksync_test_decide_resolvers")
_MOD.delete_it = lambda p, s, t: None
_MOD.merge_it = lambda p, s, t: {k: f"{(p or {}).get(k)}+{(s or {}).get(k)}" for k in (p or s)}
sys.modules[_MOD.__name__] = _MOD


@pytest.mark.parametrize("direction", ["up", "down"])
def test_user_resolver_deleting_a_column_conflict(direction):
    d = col_decide(direction, {"a": 1}, {"a": 2}, rules(True, f"{_MOD.__name__}:delete_it"))
    assert d.action == "delete"
    assert d.values is None
    assert d.send_back is True
    assert d.conflict.conflict_type is ConflictType.COLUMN_UPDATE
    assert d.conflict.columns == ["a"]


@pytest.mark.parametrize("direction", ["up", "down"])
def test_user_resolver_merging_rows(direction):
    r = rules(False, f"{_MOD.__name__}:merge_it")
    if direction == "up":
        d = up(upsert({"a": "s"}, S_LIN), row({"a": "p"}, P_LIN), r)
    else:
        d = down(upsert({"a": "p"}, P_LIN, source=PUB), row({"a": "s"}, S_LIN), r)
    assert d.values == {"a": "p+s"}                    # always (publisher, subscriber), whichever is local
    assert d.conflict.winner == "resolver"
    assert d.conflict.losing_row is None


def test_decision_defaults():
    d = Decision("skip")
    assert (d.values, d.lineage, d.colv, d.send_back, d.conflict) == (None, {}, None, False, None)
