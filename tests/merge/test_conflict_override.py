"""Conflict override (``sparksync conflicts --resolve ID --keep winner|loser``) on real databases: an
update-update conflict and an update that lost to a delete are resolved again after the fact; the
losing version becomes the winner at every replica on the next merge.

One topology per publisher dialect; the named checks read what the scenario recorded.
"""

from __future__ import annotations

import pytest

from sparksync.merge.conflicts.override import ConflictNotResolvable, resolve_conflict
from sparksync.merge.conflicts.view import list_conflicts
from sparksync.merge.session.agent import MergeAgent
from sparksync.provision import setup
from tests.support.databases import databases
from tests.support.filtered import Scenario, build

PAIRS = {"sqlite_publisher": ("sqlite", {"StoreN": "postgresql", "StoreS": "sqlite"}),
         "postgresql_publisher": ("postgresql", {"StoreN": "sqlite", "StoreS": "postgresql"})}
UNFILTERED = {"name": "Sales", "articles": [{"table": t} for t in ("SalesPerson", "Customer", "Orders", "Visit")]}


def conflict_of(topology, table: str) -> dict:
    (c,) = [c for c in list_conflicts(topology) if c["article"].split(".")[-1] == table and not c.get("resolution")]
    return c


@pytest.fixture(scope="module", params=list(PAIRS))
def world(request, spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    with databases(tmp, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        pub_kind, kinds = PAIRS[request.param]
        pub_url, urls, topology = build(dbs, tmp, pub_kind, kinds, UNFILTERED)
        setup(topology, lambda: spark)
        sc = Scenario(pub_url, urls, MergeAgent(topology, spark))
        w: dict = {"sc": sc, "topology": topology}
        # update-update: the publisher wins, StoreN's name loses
        sc.sql("HQ", 'UPDATE "Customer" SET "Name" = \'hq\' WHERE "CustomerID" = 10')
        sc.sql("StoreN", 'UPDATE "Customer" SET "Name" = \'store\' WHERE "CustomerID" = 10')
        # update-delete: the publisher's delete wins over StoreN's update
        sc.sql("HQ", 'DELETE FROM "Orders" WHERE "OrderID" = 101')
        sc.sql("StoreN", 'UPDATE "Orders" SET "Total" = 77 WHERE "OrderID" = 101')
        # update-update that stays as resolved
        sc.sql("HQ", 'UPDATE "SalesPerson" SET "Name" = \'hq\' WHERE "SalesPersonID" = 2')
        sc.sql("StoreS", 'UPDATE "SalesPerson" SET "Name" = \'store\' WHERE "SalesPersonID" = 2')
        sc.merge("conflicts")
        w["customer"], w["order"], w["person"] = (conflict_of(topology, t) for t in ("Customer", "Orders", "SalesPerson"))
        w["kept_customer"] = resolve_conflict(topology, str(w["customer"]["conflict_id"]), "loser")
        w["kept_order"] = resolve_conflict(topology, str(w["order"]["conflict_id"]), "loser")
        w["kept_person"] = resolve_conflict(topology, str(w["person"]["conflict_id"]), "winner")
        sc.merge("overridden")
        with pytest.raises(ConflictNotResolvable) as again:
            resolve_conflict(topology, str(w["customer"]["conflict_id"]), "winner")
        w["again"] = again.value
        with pytest.raises(ConflictNotResolvable) as unknown:
            resolve_conflict(topology, "00000000-0000-0000-0000-000000000000", "loser")
        w["unknown"] = unknown.value
        w["listed"] = {str(c["conflict_id"]): c for c in list_conflicts(topology)}
        yield w


def test_the_publisher_won_both_conflicts_first(world):
    s = world["sc"].states["conflicts"]
    assert all(s[n]["Customer"][10] == (1, "hq") for n in ("HQ", "StoreN", "StoreS"))
    assert all(101 not in s[n]["Orders"] for n in ("HQ", "StoreN", "StoreS"))
    assert world["customer"]["losing_row"]["Name"] == "store"


def test_keeping_the_loser_of_an_update_conflict_reaches_every_replica(world):
    assert world["kept_customer"]["written_at_publisher"] == "update"
    assert world["kept_customer"]["row"] == "CustomerID=10"
    s = world["sc"].states["overridden"]
    assert all(s[n]["Customer"][10] == (1, "store") for n in ("HQ", "StoreN", "StoreS"))


def test_keeping_an_update_that_lost_to_a_delete_brings_the_row_back(world):
    assert world["kept_order"]["written_at_publisher"] == "insert"
    s = world["sc"].states["overridden"]
    assert all(s[n]["Orders"][101] == (10, 77) for n in ("HQ", "StoreN", "StoreS"))


def test_keeping_the_winner_changes_no_data(world):
    s = world["sc"].states["overridden"]
    assert all(s[n]["SalesPerson"][2] == ("S", "hq") for n in ("HQ", "StoreN", "StoreS"))


def test_resolved_conflicts_are_listed_as_resolved(world):
    listed = world["listed"]
    assert listed[str(world["customer"]["conflict_id"])]["resolution"] == "loser"
    assert listed[str(world["person"]["conflict_id"])]["resolution"] == "winner"
    assert listed[str(world["person"]["conflict_id"])]["resolved_at"] is not None


def test_a_conflict_resolves_once_and_an_unknown_id_is_named(world):
    assert "resolved already (kept the loser" in world["again"].message
    assert "no conflict with ID 00000000-0000-0000-0000-000000000000" in world["unknown"].message
