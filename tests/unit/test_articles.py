"""Unit tests for sparksync.merge.publish.processing_order: DRI order, nicknames, processing groups."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparksync.merge.publish.processing_order import (
    NICKNAME_STEP,
    assign_nicknames,
    dri_edges,
    processing_groups,
    related_articles,
)
from sparksync.ordering import dri_order

# SalesOrderDetail -> SalesOrder -> Customer, SalesOrderDetail -> Product; Currency unrelated.
SALES = {
    "SalesOrderDetail": ["SalesOrder", "Product"],
    "SalesOrder": ["Customer"],
    "Customer": [],
    "Product": [],
    "Currency": [],
}


def assert_parents_lower(nicks, parents_of):
    for child, parents in parents_of.items():
        for p in parents:
            if p != child and p in nicks and child in nicks:
                assert nicks[p] < nicks[child], f"{p} ({nicks[p]}) should be lower than {child} ({nicks[child]})"


# -- dri_edges / dri_order -----------------------------------------------------------------------

def test_dri_edges_ignores_self_references_and_unpublished_parents():
    parents_of = {"A": ["A", "B", "Unpublished"], "B": []}
    assert dri_edges(parents_of) == {("B", "A")}


def test_dri_order_puts_parents_first():
    order = dri_order(["SalesOrderDetail", "SalesOrder", "Customer"], SALES)
    assert order == ["Customer", "SalesOrder", "SalesOrderDetail"]


def test_dri_order_keeps_config_order_without_dri():
    assert dri_order(["B", "A", "C"], {}) == ["B", "A", "C"]
    assert dri_order(["B", "A", "C"], {"A": [], "B": [], "C": []}) == ["B", "A", "C"]


def test_dri_order_ties_keep_the_order_added():
    # C needs A; B is free: B comes first because it was added before A.
    assert dri_order(["C", "B", "A"], {"C": ["A"]}) == ["B", "A", "C"]


def test_dri_order_ignores_parents_that_are_not_articles():
    assert dri_order(["Order", "Item"], {"Order": ["Customer"], "Item": ["Order"]}) == ["Order", "Item"]


def test_dri_order_ignores_self_references():
    assert dri_order(["Employee", "Dept"], {"Employee": ["Employee", "Dept"]}) == ["Dept", "Employee"]


@pytest.mark.timeout(5)
@pytest.mark.parametrize("parents_of, expected", [
    ({"A": ["B"], "B": ["A"]}, ["A", "B"]),
    ({"A": ["B"], "B": ["C"], "C": ["A"]}, ["A", "C", "B"]),
    ({"A": ["B"], "B": ["A"], "C": ["B"]}, ["A", "B", "C"]),
])
def test_dri_order_breaks_cycles_at_the_earliest_added(parents_of, expected):
    assert dri_order(list(parents_of), parents_of) == expected


# -- assign_nicknames ----------------------------------------------------------------------------

def test_parents_get_lower_nicknames_than_children():
    arts = ["SalesOrderDetail", "SalesOrder", "Customer", "Product", "Currency"]
    nicks = assign_nicknames(arts, SALES)
    assert set(nicks) == set(arts)
    assert_parents_lower(nicks, SALES)
    assert len(set(nicks.values())) == len(arts)
    assert nicks == {"Customer": 10, "SalesOrder": 20, "Product": 30, "SalesOrderDetail": 40, "Currency": 50}


def test_no_dri_tables_numbered_in_config_order():
    nicks = assign_nicknames(["Zeta", "Alpha", "Mid"], {})
    assert nicks == {"Zeta": NICKNAME_STEP, "Alpha": 2 * NICKNAME_STEP, "Mid": 3 * NICKNAME_STEP}


def test_existing_nicknames_are_kept():
    existing = {"Customer": 70, "SalesOrder": 80}
    nicks = assign_nicknames(["Customer", "SalesOrder", "SalesOrderDetail", "Product"], SALES, existing)
    assert nicks["Customer"] == 70 and nicks["SalesOrder"] == 80
    assert nicks["Product"] > 80 and nicks["SalesOrderDetail"] > nicks["Product"]
    assert len(set(nicks.values())) == 4


def test_existing_nicknames_of_removed_articles_are_dropped_but_not_reused():
    nicks = assign_nicknames(["B"], {}, {"A": 10, "B": 20})
    assert nicks == {"B": 20}
    nicks = assign_nicknames(["B", "C"], {}, {"A": 30, "B": 20})
    assert nicks["B"] == 20 and nicks["C"] not in (20, 30)


def test_existing_nicknames_are_kept_even_if_they_violate_dri():
    nicks = assign_nicknames(["Child", "Parent"], {"Child": ["Parent"]}, {"Child": 10, "Parent": 20})
    assert nicks == {"Child": 10, "Parent": 20}


def test_parent_added_later_slots_between_existing_parent_and_child():
    parents_of = {"Customer": [], "SalesOrder": ["Customer"], "SalesOrderDetail": ["SalesOrder"]}
    existing = {"Customer": 10, "SalesOrderDetail": 20}
    nicks = assign_nicknames(["Customer", "SalesOrderDetail", "SalesOrder"], parents_of, existing)
    assert nicks == {"Customer": 10, "SalesOrderDetail": 20, "SalesOrder": 15}


def test_parent_added_later_slots_below_its_existing_child():
    nicks = assign_nicknames(["Detail", "Order"], {"Detail": ["Order"], "Order": []}, {"Detail": 10})
    assert nicks["Detail"] == 10
    assert 0 < nicks["Order"] < 10


def test_parent_added_later_avoids_used_nicknames_in_the_gap():
    parents_of = {"A": [], "C": ["B"], "B": ["A"]}
    existing = {"A": 10, "X": 15, "C": 20}   # 15 is taken by another article
    nicks = assign_nicknames(["A", "C", "B", "X"], parents_of, existing)
    assert 10 < nicks["B"] < 20 and nicks["B"] != 15
    assert len(set(nicks.values())) == 4


def test_no_room_still_gives_a_unique_nickname_above_the_parent():
    parents_of = {"A": [], "C": ["B"], "B": ["A"]}
    nicks = assign_nicknames(["A", "C", "B"], parents_of, {"A": 10, "C": 11})
    assert nicks["A"] == 10 and nicks["C"] == 11
    assert nicks["B"] > 10
    assert len(set(nicks.values())) == 3


def test_chain_of_parents_added_later_stays_below_existing_child():
    parents_of = {"SalesOrderDetail": ["SalesOrder"], "SalesOrder": ["Customer"], "Customer": []}
    nicks = assign_nicknames(["SalesOrderDetail", "SalesOrder", "Customer"], parents_of, {"SalesOrderDetail": 10})
    assert nicks["SalesOrderDetail"] == 10
    assert nicks["Customer"] < nicks["SalesOrder"] < nicks["SalesOrderDetail"]


@pytest.mark.timeout(5)
def test_cycles_do_not_hang_and_get_unique_nicknames():
    parents_of = {"A": ["C"], "B": ["A"], "C": ["B"], "D": ["D"]}
    nicks = assign_nicknames(["A", "B", "C", "D"], parents_of)
    assert set(nicks) == {"A", "B", "C", "D"}
    assert len(set(nicks.values())) == 4
    # The cycle is broken at A (added first); B and C then follow their parents.
    assert nicks["A"] < nicks["B"] < nicks["C"]


def test_assign_nicknames_accepts_sets_and_tuples_as_parent_collections():
    nicks = assign_nicknames(["Child", "Parent"], {"Child": {"Parent"}, "Parent": ()})
    assert nicks["Parent"] < nicks["Child"]


# -- related_articles / processing_groups --------------------------------------------------------

def test_related_articles_is_symmetric():
    rel = related_articles(SALES)
    assert rel == {
        "SalesOrderDetail": {"SalesOrder", "Product"},
        "SalesOrder": {"Customer", "SalesOrderDetail"},
        "Customer": {"SalesOrder"},
        "Product": {"SalesOrderDetail"},
        "Currency": set(),
    }


def test_related_articles_ignores_self_references_and_unpublished_tables():
    assert related_articles({"Emp": ["Emp", "Other"]}) == {"Emp": set()}


def test_processing_groups_without_join_filters_are_all_group_1():
    assert processing_groups(SALES) == {a: 1 for a in SALES}
    assert processing_groups(SALES, []) == {a: 1 for a in SALES}


def test_processing_groups_with_join_filter():
    groups = processing_groups(SALES, ["SalesOrder"])
    assert groups == {"SalesOrder": 2, "Customer": 2, "SalesOrderDetail": 2, "Product": 2, "Currency": 1}


def test_processing_groups_two_components():
    parents_of = {"Order": ["Customer"], "Customer": [], "Log": [], "LogLine": ["Log"]}
    assert processing_groups(parents_of, ["Customer"]) == {"Order": 2, "Customer": 2, "Log": 1, "LogLine": 1}
    assert processing_groups(parents_of, ["LogLine"]) == {"Order": 1, "Customer": 1, "Log": 2, "LogLine": 2}


def test_processing_groups_unrelated_join_filter_article_alone():
    groups = processing_groups(SALES, ["Currency"])
    assert groups == {"SalesOrderDetail": 1, "SalesOrder": 1, "Customer": 1, "Product": 1, "Currency": 2}


def test_processing_groups_ignores_unknown_join_filter_articles():
    assert processing_groups(SALES, ["NotAnArticle"]) == {a: 1 for a in SALES}


@pytest.mark.timeout(5)
def test_processing_groups_with_cycles():
    parents_of = {"A": ["B"], "B": ["A"], "C": []}
    assert processing_groups(parents_of, ["A"]) == {"A": 2, "B": 2, "C": 1}


# -- properties ----------------------------------------------------------------------------------

@st.composite
def dags(draw, max_tables=8):
    """(articles in config order, parents_of) for a random DAG of foreign keys."""
    n = draw(st.integers(min_value=1, max_value=max_tables))
    names = [f"T{i}" for i in range(n)]          # T{i} may only reference T{j} with j < i: acyclic
    parents_of = {}
    for i, name in enumerate(names):
        parents_of[name] = draw(st.lists(st.sampled_from(names[:i]), unique=True)) if i else []
    config_order = draw(st.permutations(names))
    return list(config_order), parents_of


@settings(max_examples=200, deadline=None, database=None)
@given(dags())
def test_property_fk_parents_get_strictly_lower_unique_nicknames(dag):
    articles, parents_of = dag
    nicks = assign_nicknames(articles, parents_of)
    assert set(nicks) == set(articles)
    assert len(set(nicks.values())) == len(articles)
    assert all(isinstance(v, int) and v > 0 for v in nicks.values())
    for child, parents in parents_of.items():
        for p in parents:
            assert nicks[p] < nicks[child]


@settings(max_examples=200, deadline=None, database=None)
@given(dags())
def test_property_dri_order_is_a_topological_order(dag):
    articles, parents_of = dag
    order = dri_order(articles, parents_of)
    assert sorted(order) == sorted(articles)
    pos = {a: i for i, a in enumerate(order)}
    for child, parents in parents_of.items():
        for p in parents:
            assert pos[p] < pos[child]


@settings(max_examples=200, deadline=None, database=None)
@given(dags(), st.data())
def test_property_incremental_publishing_keeps_nicknames_unique(dag, data):
    articles, parents_of = dag
    k = data.draw(st.integers(min_value=0, max_value=len(articles)))
    first = assign_nicknames(articles[:k], parents_of)
    nicks = assign_nicknames(articles, parents_of, first)
    assert {a: nicks[a] for a in first} == first
    assert set(nicks) == set(articles)
    assert len(set(nicks.values())) == len(articles)


@settings(max_examples=100, deadline=None, database=None)
@given(dags(), st.data())
def test_property_processing_groups_are_closed_under_dri(dag, data):
    articles, parents_of = dag
    jf = data.draw(st.lists(st.sampled_from(articles), unique=True, max_size=2))
    groups = processing_groups(parents_of, jf)
    assert set(groups) == set(articles)
    assert all(groups[a] == 2 for a in jf)
    for p, c in dri_edges(parents_of):
        assert groups[p] == groups[c]
