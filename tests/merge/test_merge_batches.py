"""Generation batches and article processing order across batches (seed 003's warning), and where
conflicts are logged."""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.merge.conflicts.model import ConflictType
from sparksync.merge.tracking.generations import make_generation
from tests.support.merge_topology import Topo

pytestmark = pytest.mark.spark


@pytest.fixture
def topo(spark, dbs, tmp_path):
    return Topo(spark, dbs, tmp_path, "sqlite", "sqlite", logging="subscriber", tables=["Item"])


def test_a_child_in_an_earlier_batch_than_its_parent(topo):
    """Seed 003: with several generation batches, a child can arrive before its parent. The child fails
    on its foreign key, is logged, and is applied by the next merge; nothing is lost."""
    t = topo
    t.sql("P", 'INSERT INTO "Parent" ("id", "name") VALUES (1, \'p\')')
    with connect(t.pub_url) as r:
        make_generation(r, 1)
    t.sql("P", 'INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (1, 1, 1)')
    with connect(t.pub_url) as r:
        make_generation(r, 1)
    t.sql("P", 'UPDATE "Parent" SET "name" = \'p2\' WHERE "id" = 1')   # the parent's change moves to a later generation
    first = t.merge(download_generations_per_batch=1)
    s1 = next(s for s in first.subscriptions if s.subscription == "S1")
    d = s1.total("download")
    assert d.failed == 1 and d.retries == 1                 # retried after the other articles, then logged
    assert t.exists("S1", "Parent", 1) and not t.exists("S1", "Child", 1)
    failed = [c for c in t.conflicts("S1") if c["conflict_type"] == ConflictType.DOWNLOAD_INSERT_FAILED]
    assert failed and "FOREIGN KEY" in failed[0]["reason_text"].upper()
    second = t.merge(download_generations_per_batch=1)
    assert second.ok and t.everywhere("Child", 1, "qty") == {1}
    t.assert_converged()
    # with one batch for all generations, processing order alone gets it right
    t.sql("P", 'INSERT INTO "Parent" ("id", "name") VALUES (2, \'q\')',
          'INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (2, 2, 2)')
    third = t.merge()
    assert all(s.total("download").retries == 0 for s in third.subscriptions)


def test_conflicts_are_logged_where_conflict_logging_says(topo):
    t = topo
    t.sql("P", 'UPDATE "Item" SET "v" = \'P\' WHERE "id" = 1')
    t.sql("S2", 'UPDATE "Item" SET "v" = \'S2\' WHERE "id" = 1')
    t.merge()
    assert t.conflicts("P") == []                          # conflict_logging = "subscriber"
    (c,) = t.conflicts("S2")
    assert c["conflict_type"] == ConflictType.UPDATE and c["origin_datasource"] == "S2" and c["winner"] == "P"
    assert t.everywhere("Item", 1) == {"P"}
