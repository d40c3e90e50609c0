"""Filtered merge publications (seed 002) end to end, on real databases: a parameterized row filter
(``Territory = HOST_NAME()``) and a 3-level join-filter chain (Orders -> Customer -> SalesPerson),
precomputed partitions, partitioned snapshots, realignment both ways, deletes, and a subscriber's
insert out of its partition.

One topology per dialect pair runs a scripted scenario once; after *every* merge each subscriber's
rows are compared with its partition computed independently in Python from the publisher's rows
(a leak check, not only an end state). The named tests check the steps.
"""

from __future__ import annotations

import pytest

from sparksync.dialects import connect
from sparksync.errors import ConfigurationError, SchemaError
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.metadata import store
from sparksync.provision import setup
from sparksync.snapshot.manifest import current_snapshot
from sparksync.status import gather_status
from sparksync.topology import parse_topology
from tests.support.databases import databases
from tests.support.filtered import KEYS, STORES, Scenario, build, oracle, publication, rows

PAIRS = {
    "sqlite_to_sqlite": ("sqlite", {"StoreN": "sqlite", "StoreS": "sqlite", "StoreN2": "sqlite", "StoreQ": "sqlite",
                                    "StoreX": "sqlite"}),
    "postgresql_to_mixed": ("postgresql", {"StoreN": "sqlite", "StoreS": "postgresql", "StoreN2": "sqlite",
                                           "StoreQ": "postgresql", "StoreX": "sqlite"}),
    "sqlite_to_postgresql": ("sqlite", {"StoreN": "postgresql", "StoreS": "postgresql", "StoreN2": "sqlite",
                                        "StoreQ": "sqlite", "StoreX": "postgresql"}),
    # membership evaluated at sync time (use_partition_groups = false), PostgreSQL publisher
    "setupbelongs_postgresql_to_mixed": ("postgresql", {"StoreN": "sqlite", "StoreS": "postgresql",
                                                        "StoreN2": "sqlite", "StoreQ": "sqlite", "StoreX": "sqlite"}),
}
SETUPBELONGS = {"setupbelongs_postgresql_to_mixed"}


@pytest.fixture(scope="module", params=list(PAIRS))
def scenario(request, spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    with databases(tmp, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        pub_kind, sub_kinds = PAIRS[request.param]
        pub_url, urls, topology = build(dbs, tmp, pub_kind, sub_kinds,
                                        publication({"use_partition_groups": False} if request.param in SETUPBELONGS
                                                    else None))
        setup(topology, lambda: spark)
        sc = Scenario(pub_url, urls, MergeAgent(topology, spark))
        sc.setupbelongs = request.param in SETUPBELONGS
        sc.record("setup")
        sc.snapshot = current_snapshot(topology.snapshots, "Sales")[1]
        # 1. publisher: a new salesperson with a customer and an order, a customer moved N -> S, an order deleted
        sc.sql("HQ", 'INSERT INTO "SalesPerson" ("SalesPersonID", "Territory", "Name") VALUES (4, \'S\', \'sp4\')',
               'INSERT INTO "Customer" ("CustomerID", "SalesPersonID", "Name") VALUES (14, 4, \'c14\')',
               'INSERT INTO "Orders" ("OrderID", "CustomerID", "Total") VALUES (105, 14, 7)',
               'UPDATE "Customer" SET "SalesPersonID" = 2 WHERE "CustomerID" = 12',
               'DELETE FROM "Orders" WHERE "OrderID" = 102')
        sc.merge("publisher_changes")
        # 2. a parent moves: salesperson 1 from N to S takes customer 10 and orders 100, 101 along
        sc.sql("HQ", 'UPDATE "SalesPerson" SET "Territory" = \'S\' WHERE "SalesPersonID" = 1')
        sc.merge("parent_moved")
        # 3. StoreN inserts a customer of salesperson 2 (partition S): uploaded, then removed from StoreN
        sc.sql("StoreN", 'INSERT INTO "Customer" ("CustomerID", "SalesPersonID", "Name") VALUES (15, 2, \'c15\')')
        sc.merge("subscriber_out_of_partition")
        sc.merge("after_removal")            # the removal at StoreN is not a delete: nothing goes back up
        # 4. moved out and back in before a merge; and moved back N after being S
        sc.sql("HQ", 'UPDATE "SalesPerson" SET "Territory" = \'S\' WHERE "SalesPersonID" = 3',
               'UPDATE "SalesPerson" SET "Territory" = \'N\' WHERE "SalesPersonID" = 3',
               'UPDATE "SalesPerson" SET "Territory" = \'N\' WHERE "SalesPersonID" = 1')
        sc.merge("moved_and_back")
        # 5. a subscriber's change inside its partition travels to the publisher and its partition's peers
        sc.sql("StoreS", 'UPDATE "Orders" SET "Total" = 99 WHERE "OrderID" = 104')
        sc.sql("StoreN", 'UPDATE "Customer" SET "Name" = \'renamed\' WHERE "CustomerID" = 12')   # gone from N: no-op
        sc.merge("subscriber_changes")
        # 6. a subscriber moves a parent out of its own partition: salesperson 2 (with customers 11, 13, 15, 12
        #    and their orders) goes from S to N; StoreS loses the subtree, StoreN and StoreN2 get it
        sc.sql("StoreS", 'UPDATE "SalesPerson" SET "Territory" = \'N\' WHERE "SalesPersonID" = 2')
        sc.merge("subscriber_moved_parent")
        # 7. status counts, for each subscription, only the changes of its partition
        sc.sql("HQ", 'UPDATE "Orders" SET "Total" = 1 WHERE "OrderID" = 105')      # customer 14: partition S
        sc.status = {s["name"]: s for s in gather_status(topology)["subscriptions"]}
        # 8. that change is in partition S only: the other stores' downloads enumerate no generation
        sc.reports = []
        sc.agent = MergeAgent(topology, spark, report=sc.reports.append)
        sc.merge("partition_s_only")
        yield sc


def test_no_row_outside_its_partition_after_any_merge(scenario):
    assert scenario.leaks == []


def test_setup_initializes_each_store_with_its_partition_only(scenario):
    s = scenario.states["setup"]
    assert set(s["StoreN"]["Customer"]) == {10, 12} and set(s["StoreN"]["Orders"]) == {100, 101, 103}
    assert set(s["StoreS"]["Customer"]) == {11, 13} and set(s["StoreS"]["Orders"]) == {102, 104}
    assert s["StoreN2"] == s["StoreN"]


def test_snapshot_holds_one_folder_per_partition_shared_by_its_subscriptions(scenario):
    arts = {a.name.split(".")[-1]: a for a in scenario.snapshot.articles}
    assert all(a.partitions is not None and len(a.partitions) == 4 for a in arts.values())
    assert sorted(int(p["rows"]) for p in arts["Orders"].partitions.values()) == [0, 1, 2, 3]


def test_customer_moved_between_stores_takes_its_orders(scenario):
    s = scenario.states["publisher_changes"]
    assert 12 not in s["StoreN"]["Customer"] and 103 not in s["StoreN"]["Orders"]
    assert s["StoreS"]["Customer"][12] == (2, "c12") and 103 in s["StoreS"]["Orders"]


def test_new_rows_reach_only_their_partition(scenario):
    s = scenario.states["publisher_changes"]
    assert 14 in s["StoreS"]["Customer"] and 105 in s["StoreS"]["Orders"]
    assert 14 not in s["StoreN"]["Customer"] and 4 not in s["StoreN"]["SalesPerson"]


def test_delete_reaches_the_partition_that_held_the_row(scenario):
    assert 102 not in scenario.states["publisher_changes"]["StoreS"]["Orders"]


def test_parent_moved_realigns_the_whole_join_chain(scenario):
    s = scenario.states["parent_moved"]
    assert 1 not in s["StoreN"]["SalesPerson"] and 10 not in s["StoreN"]["Customer"]
    assert not {100, 101} & set(s["StoreN"]["Orders"])
    assert {100, 101} <= set(s["StoreS"]["Orders"]) and 10 in s["StoreS"]["Customer"]


def test_rows_that_left_a_partition_are_counted_as_removed_not_deleted(scenario):
    down = {sub.subscription: sub.total("download") for sub in scenario.summaries["parent_moved"].subscriptions}
    # salesperson 1, customer 10, its 2 orders and visit 200 (in N through customer 10 only)
    assert down["StoreN"].removed == 5 and down["StoreN"].deletes == 0
    assert down["StoreS"].inserts == 4 and down["StoreS"].removed == 0
    assert 1 in scenario.states["parent_moved"]["HQ"]["SalesPerson"]
    session = scenario.summaries["parent_moved"].session_id
    with connect(scenario.pub_url) as r:
        history = store.select_rows(r, "MSmerge_articlehistory", {"session_id": session, "subscription": "StoreN",
                                                                  "direction": "download"})
    assert sum(h["removed"] for h in history) == 5 and sum(h["deletes"] for h in history) == 0


def test_subscriber_insert_out_of_its_partition_is_kept_at_the_publisher_and_removed_from_it(scenario):
    s = scenario.states["subscriber_out_of_partition"]
    assert s["HQ"]["Customer"][15] == (2, "c15")
    assert 15 not in s["StoreN"]["Customer"] and 15 in s["StoreS"]["Customer"]


def test_removal_is_not_uploaded_as_a_delete(scenario):
    s = scenario.states["after_removal"]
    assert 15 in s["HQ"]["Customer"] and 15 in s["StoreS"]["Customer"]


def test_moved_out_and_back_before_a_merge_stays(scenario):
    s = scenario.states["moved_and_back"]
    assert 3 in s["StoreN"]["SalesPerson"] and 3 in s["StoreN2"]["SalesPerson"]
    assert 3 not in s["StoreS"]["SalesPerson"]


def test_parent_moved_back_brings_its_subtree_back(scenario):
    s = scenario.states["moved_and_back"]
    assert 10 in s["StoreN"]["Customer"] and {100, 101} <= set(s["StoreN"]["Orders"])
    assert 10 not in s["StoreS"]["Customer"] and not {100, 101} & set(s["StoreS"]["Orders"])


def test_subscriber_change_in_its_partition_reaches_publisher(scenario):
    s = scenario.states["subscriber_changes"]
    assert s["HQ"]["Orders"][104] == (13, 99)


def test_publisher_keeps_every_row(scenario):
    s = scenario.states["subscriber_changes"]["HQ"]
    assert set(s["Customer"]) == {10, 11, 12, 13, 14, 15, 16}
    assert set(s["Orders"]) == {100, 101, 103, 104, 105, 106}


def test_subscriber_moving_a_parent_out_of_its_partition_loses_the_subtree(scenario):
    s = scenario.states["subscriber_moved_parent"]
    assert s["HQ"]["SalesPerson"][2] == ("N", "sp2")
    assert s["StoreS"]["SalesPerson"] == {4: ("S", "sp4")} and set(s["StoreS"]["Customer"]) == {14}
    assert {11, 12, 13, 15} <= set(s["StoreN"]["Customer"]) and {103, 104} <= set(s["StoreN2"]["Orders"])


def test_a_row_with_two_join_filters_is_in_the_partitions_of_both_parents(scenario):
    s = scenario.states["setup"]
    assert set(s["StoreN"]["Visit"]) == {200, 202} and set(s["StoreS"]["Visit"]) == {200, 201, 202}
    moved = scenario.states["parent_moved"]                # customer 10 went to S with salesperson 1
    assert 200 not in moved["StoreN"]["Visit"] and 200 in moved["StoreS"]["Visit"]


def test_an_empty_partition_initializes_empty_and_stays_empty(scenario):
    for step in ("setup", "subscriber_moved_parent"):
        assert all(not rows_ for rows_ in scenario.states[step]["StoreX"].values())


def test_a_quote_in_a_partition_value_is_data(scenario):
    s = scenario.states["subscriber_moved_parent"]["StoreQ"]
    assert set(s["SalesPerson"]) == {5} and set(s["Customer"]) == {16} and set(s["Orders"]) == {106}


def test_status_counts_the_changes_of_each_subscriptions_partition(scenario):
    pending = {n: s["pending_download"] for n, s in scenario.status.items()}
    if scenario.setupbelongs:   # no mappings: every change is pending for everyone until the sync evaluates it
        assert pending == {"StoreN": 1, "StoreS": 1, "StoreN2": 1, "StoreQ": 1, "StoreX": 1}
        return
    assert pending == {"StoreN": 0, "StoreS": 1, "StoreN2": 0, "StoreQ": 0, "StoreX": 0}
    assert scenario.status["StoreS"]["partition_id"] != scenario.status["StoreN"]["partition_id"]


def test_a_download_skips_the_generations_without_changes_for_its_partition(scenario):
    planned = {line.split()[1].rstrip(":"): line for line in scenario.reports
               if line.startswith("download ") and ": generations (" in line}
    assert set(planned) == set(STORES)
    sent = {n: int(line.split("], ")[1].split()[0]) for n, line in planned.items()}
    if scenario.setupbelongs:      # no generation partition mappings: every generation is enumerated
        assert set(sent.values()) == {sent["StoreS"]} and sent["StoreS"] >= 1
        return
    assert sent["StoreS"] >= 1
    assert {n: v for n, v in sent.items() if n != "StoreS"} == {"StoreN": 0, "StoreN2": 0, "StoreQ": 0, "StoreX": 0}
    assert scenario.states["partition_s_only"]["StoreS"]["Orders"][105] == (14, 1)


def test_generation_partition_mappings_name_the_partitions_each_generation_reaches(scenario):
    with connect(scenario.pub_url) as r:
        groups = {g["partition_id"]: g["host_name"] for g in store.select_rows(r, "MSmerge_partition_groups")}
        gpm = store.select_rows(r, "MSmerge_generation_partition_mappings")
        evaluated = store.select_rows(r, "sysmergepublications")[0]["partitions_evaluated"]
    if scenario.setupbelongs:
        assert gpm == []
        return
    by_gen: dict[int, set[str]] = {}
    for m in gpm:
        assert m["generation"] <= evaluated and m["changecount"] >= 1
        by_gen.setdefault(m["generation"], set()).add(groups[m["partition_id"]])
    assert by_gen[max(by_gen)] == {"S"}                  # the last change: order 105 of partition S
    reached = set().union(*by_gen.values())
    assert {"N", "S"} <= reached and "X" not in reached      # nothing ever changed in partition X


def test_join_filter_articles_are_the_second_processing_group_parents_first(scenario):
    with connect(scenario.pub_url) as r:
        arts = {a["source_table"]: a for a in store.select_rows(r, "sysmergearticles")}
    assert {a["processing_group"] for a in arts.values()} == {2}
    assert arts["SalesPerson"]["nickname"] < arts["Customer"]["nickname"] < arts["Orders"]["nickname"]


def test_partition_groups_and_subscriptions_at_the_publisher(scenario):
    with connect(scenario.pub_url) as r:
        groups = {g["host_name"]: g["partition_id"] for g in store.select_rows(r, "MSmerge_partition_groups")}
        subs = {s["name"]: s["partition_id"] for s in store.select_rows(r, "sysmergesubscriptions")
                if s["role"] == "subscriber"}
    assert set(groups) == {"N", "S", "O'Hara", "X"}
    assert subs == {"StoreN": groups["N"], "StoreS": groups["S"], "StoreN2": groups["N"], "StoreQ": groups["O'Hara"],
                    "StoreX": groups["X"]}


# -- crashes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_crashes_in_evaluation_and_in_a_removal_batch_recover(pub_kind, spark, dbs, tmp_path, failpoints):
    from sparksync.failpoints import InjectedFault

    pub_url, urls, topology = build(dbs, tmp_path, pub_kind, {"StoreN": pub_kind, "StoreS": "sqlite"})
    setup(topology, lambda: spark)
    sc = Scenario(pub_url, urls, MergeAgent(topology, spark))
    sc.sql("HQ", 'UPDATE "SalesPerson" SET "Territory" = \'S\' WHERE "SalesPersonID" = 1')
    failpoints("partitions.before_commit")
    with pytest.raises(InjectedFault):
        sc.agent.run(MergeOptions())
    with connect(pub_url) as r:        # the evaluation rolled back whole
        assert store.select_rows(r, "MSmerge_past_partition_mappings") == []
    assert 1 in rows(urls["StoreN"])["SalesPerson"]
    failpoints("apply.before_commit StoreN:0")
    first = sc.agent.run(MergeOptions())
    failed = {s.subscription: s.errors for s in first.subscriptions if s.errors}
    assert list(failed) == ["StoreN"] and "failpoint" in failed["StoreN"][0]
    behind = rows(urls["StoreN"])                    # its batch rolled back whole: behind, not half-realigned
    assert 1 in behind["SalesPerson"] and 10 in behind["Customer"] and {100, 101} <= set(behind["Orders"])
    assert 1 in rows(urls["StoreS"])["SalesPerson"]  # the other subscriber went on
    sc.merge("recovered")
    assert sc.leaks == []
    assert 1 not in sc.states["recovered"]["StoreN"]["SalesPerson"]
    assert {100, 101} <= set(sc.states["recovered"]["StoreS"]["Orders"])


def test_an_initialized_subscription_cannot_change_partition(spark, dbs, tmp_path):
    pub_url, urls, topology = build(dbs, tmp_path, "sqlite", {"StoreN": "sqlite"})
    setup(topology, lambda: spark)
    moved = topology.model_copy(update={"subscriptions": [s.model_copy(update={"host_name": "S"})
                                                          for s in topology.subscriptions]})
    with pytest.raises(ConfigurationError) as e:
        setup(moved, lambda: spark)
    assert "StoreN" in " ".join(e.value.problems) and "host_name = 'N'" in " ".join(e.value.problems)
    with connect(pub_url) as r:
        assert {g["host_name"] for g in store.select_rows(r, "MSmerge_partition_groups")} == {"N"}
    assert set(rows(urls["StoreN"])["Customer"]) == {10, 12}


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_late_subscribers_get_their_partition_and_nothing_twice(pub_kind, spark, dbs, tmp_path):
    """Subscriptions added after the others synced: one in an existing partition, one in a new one
    (a new snapshot holds it). Each gets its partition; the next merge sends neither anything again."""
    pub_url, urls, topology = build(dbs, tmp_path, pub_kind, {"StoreN": "sqlite", "StoreS": pub_kind})
    setup(topology, lambda: spark)
    agent = MergeAgent(topology, spark)
    with connect(pub_url) as r, r.transaction():
        r.execute('UPDATE "Customer" SET "SalesPersonID" = 2 WHERE "CustomerID" = 12')
    assert agent.run(MergeOptions()).ok
    first = current_snapshot(topology.snapshots, "Sales")[1].snapshot_id
    late = {"StoreN2": dbs.url("sqlite", "storen2"), "StoreQ": dbs.url(pub_kind, "storeq")}
    data = {"publisher": {"name": "HQ", "database": pub_url, "snapshot_dir": str(tmp_path / "snap")},
            "publications": [publication()],
            "subscriptions": [{"name": n, "publication": "Sales", "database": u, "host_name": STORES[n]}
                              for n, u in {**urls, **late}.items()]}
    topology = parse_topology(data, tmp_path)
    setup(topology, lambda: spark)
    assert current_snapshot(topology.snapshots, "Sales")[1].snapshot_id != first   # a new partition: new snapshot
    summary = MergeAgent(topology, spark).run(MergeOptions())
    assert summary.ok
    moved = {s.subscription: s.total("download") for s in summary.subscriptions}
    assert all(m.inserts + m.updates + m.deletes + m.removed + m.skipped == 0 for m in moved.values()), moved
    hq = rows(pub_url)
    for n, u in {**urls, **late}.items():
        want, have = oracle(hq, STORES[n]), rows(u)
        assert all(set(have[t]) == want[t] for t in KEYS), (n, have, want)


# -- refused at setup, before anything changes ----------------------------------------------------

def _refused(dbs, tmp_path, pub=None, subs=None) -> str:
    pub_url, _, topology = build(dbs, tmp_path, "sqlite", {"StoreN": "sqlite"}, pub, subs)

    def no_spark():
        raise AssertionError("Spark must not start")

    with pytest.raises((ConfigurationError, SchemaError)) as e:
        setup(topology, no_spark)
    with connect(pub_url) as r:
        assert store.metadata_version(r) is None, "a refused setup changed the publisher"
    return str(e.value.message) + " " + " ".join(getattr(e.value, "problems", None) or [])


def test_subscription_without_the_parameter_its_partition_needs_is_refused(dbs, tmp_path):
    msg = _refused(dbs, tmp_path, subs={"StoreN": {}})
    assert "StoreN" in msg and "HOST_NAME()" in msg and "host_name" in msg


def test_filter_on_unknown_column_is_refused_naming_the_article(dbs, tmp_path):
    pub = publication()
    pub["articles"][0]["filter"] = "Teritory = HOST_NAME()"
    msg = _refused(dbs, tmp_path, pub)
    assert "SalesPerson" in msg and "Teritory" in msg and "did you mean Territory" in msg


def test_join_filter_parent_that_is_not_an_article_is_refused(dbs, tmp_path):
    pub = publication()
    pub["articles"][2]["join_filters"][0]["parent"] = "Invoice"
    assert "Invoice is not an article" in _refused(dbs, tmp_path, pub)


def test_unique_key_promise_that_does_not_hold_is_refused(dbs, tmp_path):
    pub = publication()
    pub["articles"][1]["join_filters"][0]["clause"] = "Customer.SalesPersonID = SalesPerson.SalesPersonID + 0"
    assert "unique_key" in _refused(dbs, tmp_path, pub)


def test_partition_options_on_an_unfiltered_article_is_refused(dbs, tmp_path):
    pub = publication()
    pub["articles"][3] = {"table": "Visit", "partition_options": 2}
    msg = _refused(dbs, tmp_path, pub)
    assert "Visit" in msg and "partition_options = 2 is for a filtered article" in msg


@pytest.mark.parametrize("pub_kind", ["sqlite", "postgresql"])
def test_a_delete_that_wins_over_a_subscribers_update_reaches_it(pub_kind, spark, dbs, tmp_path):
    """The publisher deletes an order a store updates meanwhile: the delete wins at the publisher and
    is sent back to the store in a later generation than the one the row left its partition in."""
    pub_url, urls, topology = build(dbs, tmp_path, pub_kind, {"StoreN": "sqlite", "StoreS": pub_kind})
    setup(topology, lambda: spark)
    sc = Scenario(pub_url, urls, MergeAgent(topology, spark))
    sc.sql("HQ", 'DELETE FROM "Orders" WHERE "OrderID" = 101')
    assert sc.agent.run(MergeOptions(subscriptions=["StoreS"])).ok        # the delete is evaluated, StoreN waits
    sc.sql("StoreN", 'UPDATE "Orders" SET "Total" = 77 WHERE "OrderID" = 101')
    sc.merge("conflict")
    sc.merge("again")
    assert sc.leaks == []
    assert 101 not in sc.states["again"]["HQ"]["Orders"] and 101 not in sc.states["again"]["StoreN"]["Orders"]


@pytest.mark.parametrize("mode", ["precomputed", "setupbelongs"])
def test_a_failed_change_of_a_filtered_article_is_retried_in_its_partition(mode, spark, dbs, tmp_path):
    """A change a store could not apply (its own CHECK constraint) is retried at every merge and arrives
    once the store accepts it; with SetupBelongs too (no mappings to find its partition in)."""
    pub_url, urls, topology = build(dbs, tmp_path, "sqlite", {"StoreN": "sqlite", "StoreS": "sqlite"},
                                    publication({"use_partition_groups": False} if mode == "setupbelongs" else None))
    setup(topology, lambda: spark)
    sc = Scenario(pub_url, urls, MergeAgent(topology, spark))
    with connect(urls["StoreN"]) as r:     # SQLite: a trigger plays the CHECK constraint the store added
        r.execute('CREATE TRIGGER no_big_orders BEFORE UPDATE ON "Orders" WHEN NEW."Total" > 1000 '
                  "BEGIN SELECT RAISE(ABORT, 'order too big'); END")
    sc.sql("HQ", 'UPDATE "Orders" SET "Total" = 5000 WHERE "OrderID" = 100',
           'UPDATE "Orders" SET "Total" = 6000 WHERE "OrderID" = 102')      # StoreS's: applies there
    summary = sc.agent.run(MergeOptions())
    stats = {s.subscription: s.total("download") for s in summary.subscriptions}
    assert stats["StoreN"].failed == 1 and stats["StoreS"].failed == 0
    assert rows(urls["StoreN"])["Orders"][100] == (10, 5) and rows(urls["StoreS"])["Orders"][102] == (11, 6000)
    with connect(urls["StoreN"]) as r:
        r.execute("DROP TRIGGER no_big_orders")
    sc.merge("retried")
    assert sc.states["retried"]["StoreN"]["Orders"][100] == (10, 5000)
    assert 102 not in sc.states["retried"]["StoreN"]["Orders"]              # the retry stays in its partition
    assert sc.leaks == []
