"""Row filters: parsed once, checked against the published columns, rendered per database."""

from __future__ import annotations

import pytest

from sparksync.transactional.filters import FilterError, parse_filter

COLS = ["VendorID", "ActiveFlag", "CreditRating", "Name"]


def test_render_for_postgres_and_sqlite_triggers():
    f = parse_filter("activeflag = 1 AND CreditRating <= 3", COLS, "P, article V")
    assert f.columns == {"ActiveFlag", "CreditRating"}
    assert f.render("postgres", booleans=["ActiveFlag"]) == '"ActiveFlag" = TRUE AND "CreditRating" <= 3'
    assert f.render("sqlite", "NEW") == 'NEW."ActiveFlag" = 1 AND NEW."CreditRating" <= 3'
    assert f.render("postgres") == '"ActiveFlag" = 1 AND "CreditRating" <= 3'


def test_functions_like_in_between_null():
    f = parse_filter("lower(Name) LIKE 'a%' AND VendorID IN (1, 2) AND CreditRating BETWEEN 1 AND 3 "
                     "AND Name IS NOT NULL", COLS, "x")
    assert 'LOWER("Name") LIKE' in f.render("sqlite")


@pytest.mark.parametrize("text,msg", [
    ("ActiveFlag = 1; DROP TABLE x", "write one condition"),
    ("DROP TABLE Vendor", "not allowed"),
    ("VendorID IN (SELECT 1)", "not allowed"),
    ("Activ = 1", r"no published column Activ \(did you mean"),
    ("v.ActiveFlag = 1", "without a table name"),
    ("my_func(VendorID) = 1", "unknown function my_func"),
    ("1 = 1", "reads no column"),
    ("VendorID", "is a condition"),
    ("VendorID = ", "not a valid SQL condition"),
    ("VendorID = ?", "not allowed"),
])
def test_bad_filters_name_the_article(text, msg):
    with pytest.raises(FilterError, match=msg) as ei:
        parse_filter(text, COLS, "publication P, article Vendor")
    assert ei.value.message.startswith("publication P, article Vendor: filter ")


def test_quotes_in_a_filter_cannot_escape():
    f = parse_filter("Name = 'x\"; DROP TABLE t; --'", COLS, "x")
    assert f.render("postgres") == '"Name" = \'x"; DROP TABLE t; --\''
