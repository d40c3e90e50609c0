"""A small round applied in the agent's own process (``[spark] driver_round_changes``) does exactly what
the Spark stage does: two identical topologies get the same writes (conflicts under several resolvers,
column-level merges, an insert that fails on a foreign key and is compensated, deletes with children),
one merges on Spark, the other in the driver; every replica ends with the same rows and each merge
reports the same per-article counts and the same conflicts."""

from __future__ import annotations

import contextlib

import pytest

from sparksync.merge.session.summary import MergeSummary
from tests.support.databases import databases
from tests.support.merge_topology import Topo

pytestmark = pytest.mark.spark

TABLES = ["Item", "ItemCol", "ItemSub", "ItemComp"]

WRITES = [
    ("P", 'UPDATE "Item" SET "v" = \'pub\' WHERE "id" = 1'),
    ("S1", 'UPDATE "Item" SET "v" = \'s1\' WHERE "id" = 1'),
    ("S3", 'UPDATE "Item" SET "v" = \'s3\' WHERE "id" = 1'),
    ("P", 'UPDATE "ItemSub" SET "v" = \'pub\' WHERE "id" = 2'),
    ("S2", 'UPDATE "ItemSub" SET "v" = \'s2\' WHERE "id" = 2'),
    ("P", 'UPDATE "ItemCol" SET "v" = \'pub\' WHERE "id" = 3'),
    ("S4", 'UPDATE "ItemCol" SET "n" = 44 WHERE "id" = 3'),
    ("P", 'DELETE FROM "Item" WHERE "id" = 4'),
    ("S2", 'UPDATE "Item" SET "v" = \'s2 keeps it\' WHERE "id" = 4'),
    ("S1", 'INSERT INTO "Item" ("id", "v") VALUES (101, \'from s1\')'),
    ("S3", 'INSERT INTO "Parent" ("id", "name") VALUES (7, \'p7\')'),
    ("S3", 'INSERT INTO "Child" ("id", "parent_id", "qty") VALUES (70, 7, 1)'),
    ("P", 'INSERT INTO "ItemComp" ("id", "v", "n") VALUES (21, \'pub\', 1)'),
    ("S4", 'INSERT INTO "ItemComp" ("id", "v", "n") VALUES (21, \'taken\', 1)'),
    ("S2", 'UPDATE "ItemComp" SET "v" = \'s2\' WHERE "id" = 6'),
    ("P", 'DELETE FROM "ItemComp" WHERE "id" = 6'),
]


def _report(summary: MergeSummary) -> dict:
    """What a merge did, without its timings and ids."""
    out = {}
    for s in summary.subscriptions:
        out[s.subscription] = {
            "ok": s.ok, "errors": s.errors, "batches": dict(s.batches),
            **{d: {a: {k: v for k, v in vars(st).items() if k != "seconds"} for a, st in getattr(s, d).items()}
               for d in ("upload", "download")}}
    out["conflicts"] = sorted((c["subscription"], c["direction"], int(c["conflict_type"]), c["reason_text"],
                               c["origin"], c["winner"]) for c in summary.conflicts)
    return out


def _rows(topo: Topo) -> dict:
    """Every replica's rows of every article, by key, without rowguids (they differ between topologies)."""
    out = {}
    for who in ["P", *topo.sub_urls]:
        for table, rows in topo.snapshot_rows(who).items():
            out[(who, table)] = {k: tuple(x for x in row if not (isinstance(x, str) and len(x) == 36 and x.count("-") == 4))
                                 for k, row in rows.items()}
    return out


def test_a_round_in_the_driver_is_the_round_on_spark(spark, tmp_path, pg_admin_url):
    with contextlib.ExitStack() as stack:
        worlds = {}
        for path in ("spark", "driver"):
            (tmp_path / path).mkdir()
            dbs = stack.enter_context(databases(tmp_path / path, pg_admin_url))
            worlds[path] = Topo(spark, dbs, tmp_path / path, "sqlite", "sqlite", tables=TABLES)
        reports: dict[str, list[dict]] = {p: [] for p in worlds}
        for path, topo in worlds.items():
            for who, stmt in WRITES:
                topo.sql(who, stmt)
            limit = 0 if path == "spark" else 1_000_000
            for _ in range(2):
                reports[path].append(_report(topo.merge(driver_round_changes=limit)))
            topo.sql("S4", 'DELETE FROM "Child" WHERE "id" = 70', 'DELETE FROM "Parent" WHERE "id" = 7')
            reports[path].append(_report(topo.merge(driver_round_changes=limit)))
        assert reports["spark"] == reports["driver"]
        assert any(r["conflicts"] for r in reports["driver"]), "the writes made no conflict: the test checks nothing"
        assert _rows(worlds["spark"]) == _rows(worlds["driver"])
        worlds["driver"].assert_converged()
