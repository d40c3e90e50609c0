"""The conflict matrix, for every publisher/subscriber dialect pair and every resolver.

One topology per pair (publisher P; global subscribers S1 at priority 75 and S2 at 50; local S3 and
S4), built once. Every scenario uses rows of its own, so each merge exercises all of them; the state
of every replica is captured right after each merge and each scenario is checked in a test named
after it (Dotmim.Sync-style: ``test_<conflict>_<who wins>``).

1. All scenarios are written, one merge.
2. A second merge with no new writes: nothing moves; the failed insert is tried again.
3. The obstacle of the failed insert is removed, a subscriber deletes parents with their children:
   the third merge moves both.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sparksync.dialects import connect
from sparksync.merge.conflicts.model import ConflictType
from sparksync.merge.session.summary import MergeSummary, SubscriptionSession
from sparksync.metadata import store
from sparksync.names import TableName
from tests.support.databases import databases
from tests.support.merge_topology import TABLES, Topo

pytestmark = pytest.mark.spark

PAIRS = [("sqlite", "sqlite"), ("postgresql", "sqlite"), ("sqlite", "postgresql"), ("postgresql", "postgresql")]
MATRIX = ("Item", "ItemSub", "ItemMax", "ItemLater", "ItemUser", "ItemMin", "ItemEarlier")


def U(t, id_, sets):
    return f'UPDATE "{t}" SET {sets} WHERE "id" = {id_}'


def D(t, id_):
    return f'DELETE FROM "{t}" WHERE "id" = {id_}'


def I(t, id_, v):  # noqa: E743 - reads like the other statement builders
    return f'INSERT INTO "{t}" ("id", "v") VALUES ({id_}, \'{v}\')'


@dataclass
class State:
    """What every replica held right after one merge, and that merge's summary."""

    summary: MergeSummary
    rows: dict[str, dict[str, dict[int, tuple]]]      # replica -> table -> id -> row
    columns: dict[str, list[str]]                     # table -> column names
    conflicts: list[dict]                             # MSmerge_conflicts_info at the publisher
    nicknames: dict[str, int]                         # table -> article nickname

    def value(self, who: str, table: str, id_: int, col: str = "v"):
        row = self.rows[who][table].get(id_)
        return None if row is None else row[self.columns[table].index(col)]

    def exists(self, who: str, table: str, id_: int) -> bool:
        return id_ in self.rows[who][table]

    def everywhere(self, table: str, id_: int, col: str = "v") -> set:
        return {self.value(who, table, id_, col) for who in self.rows}

    def differences(self) -> list[str]:
        """Tables where a subscriber's rows differ from the publisher's."""
        return [f"{table} at {who}" for who in self.rows if who != "P" for table in self.rows["P"]
                if self.rows[who][table] != self.rows["P"][table]]

    def session(self, name: str) -> SubscriptionSession:
        return next(s for s in self.summary.subscriptions if s.subscription == name)

    def stats(self, name: str, direction: str, table: str):
        """The session's stats for one article (named ``T`` or ``schema.T``)."""
        found = [v for k, v in getattr(self.session(name), direction).items() if k.rsplit(".", 1)[-1] == table]
        return found[0] if found else None

    def conflict_types(self, table: str, subscription: str | None = None) -> list[int]:
        return sorted(c["conflict_type"] for c in self.conflicts if c["tablenick"] == self.nicknames[table]
                      and (subscription is None or c["subscription"] == subscription))


def capture(t: Topo, summary: MergeSummary) -> State:
    rows = {who: t.snapshot_rows(who) for who in ["P", *t.sub_urls]}
    with connect(t.url("P")) as r:
        conflicts = store.select_rows(r, "MSmerge_conflicts_info")
        nicknames = {a["name"].rsplit(".", 1)[-1]: a["nickname"] for a in store.select_rows(r, "sysmergearticles")}
        columns = {}
        for table in rows["P"]:
            info = r.reflect(r.dialect.resolve_name(TableName(None, table)))
            columns[table] = [c.name for c in info.columns]
    return State(summary, rows, columns, conflicts, nicknames)


@pytest.fixture(scope="module", params=PAIRS, ids=lambda p: f"{p[0]}_to_{p[1]}")
def world(request, spark, tmp_path_factory):
    pub_kind, sub_kind = request.param
    tmp = tmp_path_factory.mktemp(f"scenarios-{pub_kind}-{sub_kind}")
    with databases(tmp, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        yield Topo(spark, dbs, tmp, pub_kind, sub_kind)


@pytest.fixture(scope="module")
def first(world) -> State:
    """Every scenario written, one merge."""
    t = world
    # row 1: update-update      row 2: update (P) vs delete (S1)      row 3: delete (P) vs update (S1)
    # row 4: delete-delete      row 5: S1-only update (no conflict)   row 6: S1 (75) vs S2 (50)
    # row 7: S3 vs S4 (local: first to sync wins)                     row 800: insert at S2 spreads everywhere
    for table in MATRIX:
        t.sql("P", U(table, 1, "\"v\" = 'P', \"n\" = 5, \"ts\" = '2024-06-01 00:00:00'"),
              U(table, 2, "\"v\" = 'P2'"), D(table, 3), D(table, 4))
        t.sql("S1", U(table, 1, "\"v\" = 'S1', \"n\" = 9, \"ts\" = '2024-03-01 00:00:00'"),
              D(table, 2), U(table, 3, "\"v\" = 'S1-3'"), D(table, 4), U(table, 5, "\"v\" = 'S1-5'"),
              U(table, 6, "\"v\" = 'S1-6'"))
        t.sql("S2", U(table, 6, "\"v\" = 'S2-6'"), U(table, 7, "\"v\" = 'S2-7'"),
              f'INSERT INTO "{table}" ("id", "v", "n") VALUES (800, \'from S2\', 1)')
        t.sql("S3", U(table, 7, "\"v\" = 'S3-7'"))
        t.sql("S4", U(table, 7, "\"v\" = 'S4-7'"))
    # column tracking: different columns (row 1), the same column (row 2); additive and averaging
    t.sql("P", U("ItemCol", 1, "\"v\" = 'P-v'"), U("ItemCol", 2, "\"v\" = 'P-v', \"w\" = 'P-w'"),
          U("ItemAdd", 1, '"n" = 12'), U("ItemAvg", 1, '"n" = 12'))
    t.sql("S1", U("ItemCol", 1, "\"n\" = 42"), U("ItemCol", 2, "\"v\" = 'S1-v', \"n\" = 7"),
          U("ItemAdd", 1, '"n" = 15'), U("ItemAvg", 1, '"n" = 15'))
    # the same primary key inserted at P and S1, without and with compensate_for_errors
    t.sql("P", I("Item", 900, "P"), I("ItemComp", 901, "P"))
    t.sql("S1", I("Item", 900, "S1"), I("ItemComp", 901, "S1"))
    # a parent and its children inserted in one session
    t.sql("S1", 'INSERT INTO "Parent" ("id", "name") VALUES (1, \'p1\')',
          'INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (1, 1, 3)',
          'INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (2, 1, 4)')
    return capture(t, t.merge())


@pytest.fixture(scope="module")
def second(world, first) -> State:
    """No new writes."""
    return capture(world, world.merge())


@pytest.fixture(scope="module")
def third(world, second) -> State:
    """P deletes the row that blocked S1's insert; S2 deletes the parent and its children."""
    world.sql("P", D("Item", 900))
    world.sql("S2", 'DELETE FROM "Child"', 'DELETE FROM "Parent"')
    return capture(world, world.merge())


# -- 1. one merge of every scenario ----------------------------------------------------------------

def test_every_subscription_merged_without_errors(first):
    assert first.summary.ok, [s.errors for s in first.summary.subscriptions]


def test_update_update_publisher_wins(first):
    assert first.everywhere("Item", 1) == {"P"}


def test_update_delete_the_update_wins_and_is_sent_back(first):
    assert first.everywhere("Item", 2) == {"P2"}


def test_delete_update_publisher_delete_wins(first):
    assert not first.exists("S1", "Item", 3) and not first.exists("P", "Item", 3)


def test_delete_delete_is_gone_everywhere(first):
    assert not any(first.exists(who, "Item", 4) for who in first.rows)


def test_update_at_one_subscriber_reaches_all(first):
    assert first.everywhere("Item", 5) == {"S1-5"}


def test_update_update_higher_priority_subscriber_wins(first):
    assert first.everywhere("Item", 6) == {"S1-6"}               # 75 beats 50


def test_update_update_global_subscriber_beats_local_ones(first):
    assert first.everywhere("Item", 7) == {"S2-7"}               # a global 50 beats local subscriptions (0)


def test_insert_at_a_subscriber_reaches_every_replica_in_one_run(first):
    assert first.everywhere("Item", 800) == {"from S2"}          # S2 -> P -> S1, S3, S4


def test_subscriber_wins_update_update(first):
    assert first.everywhere("ItemSub", 1) == {"S1"}


def test_subscriber_wins_its_delete_beats_an_update(first):
    assert not first.exists("P", "ItemSub", 2)


def test_subscriber_wins_its_update_beats_a_delete(first):
    assert first.everywhere("ItemSub", 3) == {"S1-3"}


def test_maximum_resolver_keeps_the_larger_value(first):
    assert first.everywhere("ItemMax", 1, "n") == {9} and first.everywhere("ItemMax", 1) == {"S1"}


def test_minimum_resolver_keeps_the_smaller_value(first):
    assert first.everywhere("ItemMin", 1, "n") == {5} and first.everywhere("ItemMin", 1) == {"P"}


def test_later_wins_keeps_the_later_timestamp(first):
    assert first.everywhere("ItemLater", 1) == {"P"}


def test_earlier_wins_keeps_the_earlier_timestamp(first):
    assert first.everywhere("ItemEarlier", 1) == {"S1"}


def test_user_resolver_merges_both_versions(first):
    assert first.everywhere("ItemUser", 1) == {"P+S1"} and first.everywhere("ItemUser", 1, "n") == {9}


def test_conflicts_are_logged_with_their_types(first):
    types = first.conflict_types("Item")
    assert ConflictType.UPDATE in types
    assert ConflictType.UPDATE_WINS_DELETE in types and ConflictType.UPDATE_DELETE_WINS in types


def test_column_tracking_edits_of_different_columns_are_both_kept(first):
    assert first.everywhere("ItemCol", 1) == {"P-v"} and first.everywhere("ItemCol", 1, "n") == {42}
    assert first.conflict_types("ItemCol") == [ConflictType.COLUMN_UPDATE]      # only row 2's v


def test_column_tracking_same_column_is_resolved_other_columns_survive(first):
    assert first.everywhere("ItemCol", 2) == {"P-v"}
    assert first.everywhere("ItemCol", 2, "n") == {7} and first.everywhere("ItemCol", 2, "w") == {"P-w"}
    conflicted = [c["columns"] for c in first.conflicts if c["tablenick"] == first.nicknames["ItemCol"]]
    assert conflicted == [["v"]]


def test_additive_resolver_adds_both_values(first):
    assert first.everywhere("ItemAdd", 1, "n") == {27}                   # 12 at P and 15 at S1
    assert first.conflict_types("ItemAdd") == [ConflictType.COLUMN_UPDATE]


def test_averaging_resolver_averages_both_values(first):
    assert first.everywhere("ItemAvg", 1, "n") == {13}                   # 12 and 15, integer column


def test_insert_insert_same_primary_key_is_a_failed_change_both_rows_survive(first):
    assert first.stats("S1", "upload", "Item").failed == 1 and first.stats("S1", "download", "Item").failed == 1
    assert first.value("P", "Item", 900) == "P" and first.value("S1", "Item", 900) == "S1"
    assert first.conflict_types("Item", "S1").count(ConflictType.UPLOAD_INSERT_FAILED) == 1
    assert first.conflict_types("Item", "S1").count(ConflictType.DOWNLOAD_INSERT_FAILED) == 1
    assert {first.value(who, "Item", 900) for who in ("S2", "S3", "S4")} == {"P"}


def test_compensate_for_errors_undoes_the_failed_insert_at_its_origin(first):
    assert first.stats("S1", "upload", "ItemComp").failed == 1
    assert first.everywhere("ItemComp", 901) == {"P"}


def test_parent_and_children_in_one_session_arrive_in_foreign_key_order(first):
    for who in first.rows:
        assert first.value(who, "Child", 2, "qty") == 4, who
    for s in first.summary.subscriptions:
        for d in ("upload", "download"):
            for table in ("Parent", "Child"):
                st = first.stats(s.subscription, d, table)
                assert st is None or st.retries == 0, (s.subscription, d, table)


def test_every_replica_holds_the_publishers_rows_except_the_failed_insert(first):
    assert first.differences() == ["Item at S1"]
    assert {k for k in first.rows["S1"]["Item"] if first.rows["S1"]["Item"][k] != first.rows["P"]["Item"].get(k)} \
        == {900}


# -- 2. a merge with nothing new --------------------------------------------------------------------

def test_a_second_merge_moves_nothing(second):
    for s in second.summary.subscriptions:
        for d in ("upload", "download"):
            tot = s.total(d)
            assert (tot.inserts, tot.updates, tot.deletes, tot.conflicts) == (0, 0, 0, 0), (s.subscription, d)


def test_a_failed_change_is_tried_again_at_every_merge(second):
    assert second.stats("S1", "upload", "Item").failed == 1
    assert second.value("S1", "Item", 900) == "S1" and second.value("P", "Item", 900) == "P"


# -- 3. the obstacle removed; a parent deleted with its children ------------------------------------

def test_the_failed_insert_arrives_once_its_obstacle_is_gone(third):
    assert third.summary.ok, [s.errors for s in third.summary.subscriptions]
    assert third.everywhere("Item", 900) == {"S1"}


def test_a_parent_deleted_with_its_children_is_gone_everywhere(third):
    assert all(third.stats(s.subscription, "download", "Child") is None
               or third.stats(s.subscription, "download", "Child").failed == 0 for s in third.summary.subscriptions)
    assert not third.exists("P", "Parent", 1) and not any(third.exists(who, "Child", 1) for who in third.rows)


def test_in_the_end_every_replica_holds_the_same_rows(third):
    assert third.differences() == []


def test_every_article_of_the_harness_is_exercised():
    assert set(TABLES) == set(MATRIX) | {"ItemCol", "ItemAdd", "ItemAvg", "ItemComp"}
