"""The conflict matrix, run for every publisher/subscriber dialect pair and every resolver.

One topology per pair; every scenario uses its own rows, so one merge exercises them all.
"""

from __future__ import annotations

import pytest

from sparksync.merge.conflicts import ConflictType

from .harness import Topo

pytestmark = pytest.mark.spark

PAIRS = [("sqlite", "sqlite"), ("postgresql", "sqlite"), ("sqlite", "postgresql"), ("postgresql", "postgresql")]


@pytest.fixture(params=PAIRS, ids=lambda p: f"{p[0]}_to_{p[1]}")
def topo(request, spark, dbs, tmp_path):
    pub_kind, sub_kind = request.param
    for k in request.param:
        if k == "postgresql":
            request.getfixturevalue("pg_admin_url")
    return Topo(spark, dbs, tmp_path, pub_kind, sub_kind)


def U(t, id_, sets):
    return f'UPDATE "{t}" SET {sets} WHERE "id" = {id_}'


def D(t, id_):
    return f'DELETE FROM "{t}" WHERE "id" = {id_}'


def test_conflict_matrix(topo):
    t = topo
    # row 1: update-update      row 2: update (P) vs delete (S1)      row 3: delete (P) vs update (S1)
    # row 4: delete-delete      row 5: S1-only update (no conflict)   row 6: S1 (75) vs S2 (50)
    # row 7: S3 vs S4 (local: first to sync wins)                     row 8: insert at S2 spreads everywhere
    for table in ("Item", "ItemSub", "ItemMax", "ItemLater", "ItemUser", "ItemMin", "ItemEarlier"):
        t.sql("P", U(table, 1, "\"v\" = 'P', \"n\" = 5, \"ts\" = '2024-06-01 00:00:00'"),
              U(table, 2, "\"v\" = 'P2'"), D(table, 3), D(table, 4))
        t.sql("S1", U(table, 1, "\"v\" = 'S1', \"n\" = 9, \"ts\" = '2024-03-01 00:00:00'"),
              D(table, 2), U(table, 3, "\"v\" = 'S1-3'"), D(table, 4), U(table, 5, "\"v\" = 'S1-5'"),
              U(table, 6, "\"v\" = 'S1-6'"))
        t.sql("S2", U(table, 6, "\"v\" = 'S2-6'"), U(table, 7, "\"v\" = 'S2-7'"),
              f'INSERT INTO "{table}" ("id", "v", "n") VALUES (800, \'from S2\', 1)')
        t.sql("S3", U(table, 7, "\"v\" = 'S3-7'"))
        t.sql("S4", U(table, 7, "\"v\" = 'S4-7'"))
    summary = t.merge()
    assert summary.ok, [s.errors for s in summary.subscriptions]
    t.assert_converged()

    # default resolver: the publisher beats a subscriber; priorities between global subscriptions
    assert t.everywhere("Item", 1) == {"P"}
    assert t.everywhere("Item", 2) == {"P2"}                 # update wins delete: re-sent to S1
    assert not t.exists("S1", "Item", 3) and not t.exists("P", "Item", 3)   # the publisher's delete wins
    assert not t.exists("S4", "Item", 4)
    assert t.everywhere("Item", 5) == {"S1-5"}
    assert t.everywhere("Item", 6) == {"S1-6"}               # 75 beats 50
    assert t.everywhere("Item", 7) == {"S2-7"}               # a global 50 beats local subscriptions (0)
    assert t.everywhere("Item", 800) == {"from S2"}          # S2 -> P -> S1, S3, S4 in one run
    # subscriber always wins
    assert t.everywhere("ItemSub", 1) == {"S1"}
    assert not t.exists("P", "ItemSub", 2)                   # the subscriber's delete wins
    assert t.everywhere("ItemSub", 3) == {"S1-3"}            # the subscriber's update wins the delete
    # maximum n / later ts
    assert t.everywhere("ItemMax", 1, "n") == {9} and t.everywhere("ItemMax", 1) == {"S1"}
    assert t.everywhere("ItemLater", 1) == {"P"}
    assert t.everywhere("ItemMin", 1, "n") == {5} and t.everywhere("ItemEarlier", 1) == {"S1"}
    # user resolver merges
    assert t.everywhere("ItemUser", 1) == {"P+S1"} and t.everywhere("ItemUser", 1, "n") == {9}

    types = {}
    for c in t.conflicts("P"):
        types.setdefault(c["tablenick"], []).append(c["conflict_type"])
    all_types = [x for v in types.values() for x in v]
    assert ConflictType.UPDATE in all_types
    assert ConflictType.UPDATE_WINS_DELETE in all_types and ConflictType.UPDATE_DELETE_WINS in all_types

    # A second run moves nothing: no echo, nothing applied twice.
    again = t.merge()
    for s in again.subscriptions:
        for d in ("upload", "download"):
            tot = s.total(d)
            assert (tot.inserts, tot.updates, tot.deletes, tot.conflicts) == (0, 0, 0, 0), (s.subscription, d)


def test_column_tracking_keeps_every_non_conflicting_edit(topo):
    t = topo
    t.sql("P", U("ItemCol", 1, "\"v\" = 'P-v'"), U("ItemCol", 2, "\"v\" = 'P-v', \"w\" = 'P-w'"))
    t.sql("S1", U("ItemCol", 1, "\"n\" = 42"), U("ItemCol", 2, "\"v\" = 'S1-v', \"n\" = 7"))
    t.sql("P", U("ItemAdd", 1, '"n" = 12'), U("ItemAvg", 1, '"n" = 12'))
    t.sql("S1", U("ItemAdd", 1, '"n" = 15'), U("ItemAvg", 1, '"n" = 15'))
    summary = t.merge()
    assert summary.ok
    t.assert_converged()
    # different columns: no conflict, both edits kept
    assert t.everywhere("ItemCol", 1) == {"P-v"} and t.everywhere("ItemCol", 1, "n") == {42}
    # same column: only v is resolved (publisher wins); S1's n and P's w both survive
    assert t.everywhere("ItemCol", 2) == {"P-v"}
    assert t.everywhere("ItemCol", 2, "n") == {7} and t.everywhere("ItemCol", 2, "w") == {"P-w"}
    col = [c for c in t.conflicts("P") if c["conflict_type"] == ConflictType.COLUMN_UPDATE]
    assert sorted(c["columns"][0] for c in col) == ["n", "n", "v"]   # ItemCol on v; ItemAdd, ItemAvg on n
    assert t.everywhere("ItemAvg", 1, "n") == {13}
    # additive: 12 at P and 15 at S1 -> 27; averaging: 12 and 15 -> 13 (integer column)
    assert t.everywhere("ItemAdd", 1, "n") == {27}


def test_insert_insert_same_primary_key_is_a_failed_change(topo):
    t = topo
    t.sql("P", 'INSERT INTO "Item" ("id", "v") VALUES (900, \'P\')')
    t.sql("S1", 'INSERT INTO "Item" ("id", "v") VALUES (900, \'S1\')')
    summary = t.merge()
    s1 = next(s for s in summary.subscriptions if s.subscription == "S1")
    assert s1.total("upload").failed == 1 and s1.total("download").failed == 1
    assert t.value("P", "Item", 900) == "P" and t.value("S1", "Item", 900) == "S1"   # both survive (default)
    types = sorted(c["conflict_type"] for c in t.conflicts("P") if c["subscription"] == "S1")
    assert types == [ConflictType.UPLOAD_INSERT_FAILED, ConflictType.DOWNLOAD_INSERT_FAILED]
    # S2, S3, S4 got the publisher's row
    assert t.value("S2", "Item", 900) == "P"
    # compensate_for_errors = false: tried again at every merge (and failing again) ...
    again = t.merge()
    s1 = next(s for s in again.subscriptions if s.subscription == "S1")
    assert s1.total("upload").failed == 1
    # ... until the obstacle is gone: then S1's row arrives everywhere
    t.sql("P", 'DELETE FROM "Item" WHERE "id" = 900')
    third = t.merge()
    assert third.ok and t.everywhere("Item", 900) == {"S1"}
    t.assert_converged()


def test_compensate_for_errors_undoes_the_failed_insert_at_its_origin(topo):
    t = topo
    t.sql("P", 'INSERT INTO "ItemComp" ("id", "v") VALUES (901, \'P\')')
    t.sql("S1", 'INSERT INTO "ItemComp" ("id", "v") VALUES (901, \'S1\')')
    summary = t.merge()
    s1 = next(s for s in summary.subscriptions if s.subscription == "S1")
    assert s1.total("upload").failed == 1
    assert t.everywhere("ItemComp", 901) == {"P"}        # S1's insert was undone there by a compensating delete
    t.assert_converged()


def test_parent_and_child_in_one_session_respect_foreign_keys(topo):
    t = topo
    t.sql("S1", 'INSERT INTO "Parent" ("id", "name") VALUES (1, \'p1\')',
          'INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (1, 1, 3)', 'INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (2, 1, 4)')
    summary = t.merge()
    assert summary.ok
    assert all(s.total("upload").retries == 0 and s.total("download").retries == 0 for s in summary.subscriptions)
    assert t.everywhere("Child", 2, "qty") == {4}
    t.sql("S2", 'DELETE FROM "Child"', 'DELETE FROM "Parent"')
    summary = t.merge()
    assert summary.ok and all(s.total("download").failed == 0 for s in summary.subscriptions)
    assert not t.exists("P", "Parent", 1) and not t.exists("S3", "Child", 1)
    t.assert_converged()
