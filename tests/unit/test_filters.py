"""Row filters: parsed once, checked against the published columns, rendered per database."""

from __future__ import annotations

import pytest

from sparksync.dialects.postgres.dialect import PostgresDialect
from sparksync.dialects.sqlite.dialect import SQLiteDialect
from sparksync.filters import FilterError, SqlFlavor, parse_filter, parse_join_filter

COLS = ["VendorID", "ActiveFlag", "CreditRating", "Name"]
POSTGRES = PostgresDialect.capabilities.sql       # what each dialect tells the filters of its SQL
SQLITE = SQLiteDialect.capabilities.sql


def test_render_for_postgres_and_sqlite_triggers():
    f = parse_filter("activeflag = 1 AND CreditRating <= 3", COLS, "P, article V")
    assert f.columns == {"ActiveFlag", "CreditRating"}
    assert f.render(POSTGRES, booleans=["ActiveFlag"]) == '"ActiveFlag" = TRUE AND "CreditRating" <= 3'
    assert f.render(SQLITE, "NEW") == 'NEW."ActiveFlag" = 1 AND NEW."CreditRating" <= 3'
    assert f.render(POSTGRES) == '"ActiveFlag" = 1 AND "CreditRating" <= 3'
    # what decides is the capability, never the database's name
    assert f.render(SqlFlavor("sqlite", typed_booleans=True), booleans=["ActiveFlag"]).startswith('"ActiveFlag" = TRUE')
    assert f.render(SqlFlavor("postgres"), booleans=["ActiveFlag"]).startswith('"ActiveFlag" = 1')


def test_functions_like_in_between_null():
    f = parse_filter("lower(Name) LIKE 'a%' AND VendorID IN (1, 2) AND CreditRating BETWEEN 1 AND 3 "
                     "AND Name IS NOT NULL", COLS, "x")
    assert 'LOWER("Name") LIKE' in f.render(SQLITE)


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
    assert f.render(POSTGRES) == '"Name" = \'x"; DROP TABLE t; --\''


# -- parameterized row filters (merge partitions, seed 002) -----------------------------------------------

PRODUCT = ["ProductID", "ProductLine", "ListPrice", "LoginID"]


def _kept(f, params, rows):
    """The rows of an in-memory SQLite table that the rendered filter keeps (real evaluation)."""
    import sqlite3

    db = sqlite3.connect(":memory:")
    db.execute('CREATE TABLE p ("ProductID" INTEGER PRIMARY KEY, "ProductLine" TEXT, "ListPrice" REAL, "LoginID" TEXT)')
    db.executemany("INSERT INTO p VALUES (?, ?, ?, ?)", rows)
    return [r[0] for r in db.execute(f'SELECT "ProductID" FROM p WHERE {f.render(SQLITE, params=params)} '
                                     'ORDER BY 1')]


ROWS = [(1, "M", 500.0, "adventure-works\\pamela0"), (2, "R", 50.0, "adventure-works\\david8"),
        (3, "M", 40.0, None), (4, "T", 900.0, "o'brien")]


def test_host_name_filter_keeps_the_partitions_rows():
    f = parse_filter("ProductLine = HOST_NAME()", PRODUCT, "Sales, article Product", parameters=True)
    assert f.parameters == {"host_name"} and f.columns == {"ProductLine"}
    assert _kept(f, {"host_name": "M"}, ROWS) == [1, 3]
    assert _kept(f, {"host_name": "R"}, ROWS) == [2]


def test_overlapping_partitions_with_or():
    f = parse_filter("ProductLine = host_name() OR ListPrice < 100", PRODUCT, "x", parameters=True)
    assert _kept(f, {"host_name": "M"}, ROWS) == [1, 2, 3]
    assert _kept(f, {"host_name": "T"}, ROWS) == [2, 3, 4]      # rows 2 and 3 are in both partitions


def test_suser_sname_reads_the_login_and_a_quote_in_a_value_stays_a_value():
    f = parse_filter("LoginID = SUSER_SNAME()", PRODUCT, "x", parameters=True)
    assert f.parameters == {"login"}
    assert _kept(f, {"login": "adventure-works\\pamela0"}, ROWS) == [1]
    assert _kept(f, {"login": "o'brien"}, ROWS) == [4]
    assert "'o''brien'" in f.render(POSTGRES, params={"login": "o'brien"})


def test_a_parameter_without_its_value_is_refused_by_name():
    f = parse_filter("ProductLine = HOST_NAME()", PRODUCT, "x", parameters=True)
    with pytest.raises(FilterError, match=r"calls HOST_NAME\(\), which needs the subscription's host_name"):
        f.render(SQLITE, params={"login": "x"})


def test_transactional_filters_refuse_parameters():
    with pytest.raises(FilterError, match="merge publications only"):
        parse_filter("ProductLine = HOST_NAME()", PRODUCT, "publication R, article Product")


@pytest.mark.parametrize("text,msg", [
    ("ProductLine = HOST_NAME('x')", r"HOST_NAME\(\) takes no arguments"),
    ("ListPrice < random()", "not deterministic"),
    ("ProductID < 10 AND current_timestamp > '2020-01-01'", "not deterministic"),
    ("count(ProductID) > 1", "not a function of one row"),
    ("ProductID IN (SELECT ProductID FROM Other)", "not allowed"),
    ("HOST_NAME()", "is a condition"),
])
def test_bad_parameterized_filters(text, msg):
    with pytest.raises(FilterError, match=msg):
        parse_filter(text, PRODUCT, "Sales, article Product", parameters=True)


# -- join filters -----------------------------------------------------------------------------------------

CUSTOMER = ["CustomerID", "SalesPersonID", "Name"]
SALESPERSON = ["SalesPersonID", "Territory"]


def test_join_filter_equi_pairs_and_rendering():
    j = parse_join_filter("customer.salespersonid = SalesPerson.SalesPersonID", "Customer", CUSTOMER,
                          "SalesPerson", SALESPERSON, "Sales, article Customer")
    assert j.pairs == (("SalesPersonID", "SalesPersonID"),)
    assert j.child_columns == {"SalesPersonID"} and j.parent_columns == {"SalesPersonID"}
    assert j.render(POSTGRES, "c", "p") == '"c"."SalesPersonID" = "p"."SalesPersonID"'


def test_join_filter_with_schemas_and_a_non_equi_condition():
    j = parse_join_filter("Sales.Customer.SalesPersonID = SalesPerson.SalesPersonID AND Customer.Name <> 'x'",
                          "Sales.Customer", CUSTOMER, "Sales.SalesPerson", SALESPERSON, "x")
    assert j.pairs == ()                       # not only equalities: no shortcut
    assert j.render(SQLITE, "c", "p") == '"c"."SalesPersonID" = "p"."SalesPersonID" AND "c"."Name" <> \'x\''


def test_join_filter_evaluates_in_a_real_join():
    import sqlite3

    j = parse_join_filter("Customer.SalesPersonID = SalesPerson.SalesPersonID", "Customer", CUSTOMER,
                          "SalesPerson", SALESPERSON, "x")
    db = sqlite3.connect(":memory:")
    db.execute('CREATE TABLE sp ("SalesPersonID" INTEGER PRIMARY KEY, "Territory" TEXT)')
    db.execute('CREATE TABLE cu ("CustomerID" INTEGER PRIMARY KEY, "SalesPersonID" INTEGER, "Name" TEXT)')
    db.executemany("INSERT INTO sp VALUES (?, ?)", [(1, "N"), (2, "S")])
    db.executemany("INSERT INTO cu VALUES (?, ?, ?)", [(10, 1, "a"), (11, 2, "b"), (12, 1, "c"), (13, None, "d")])
    rows = db.execute(f'SELECT "c"."CustomerID" FROM cu AS "c" JOIN sp AS "p" ON {j.render(SQLITE, "c", "p")} '
                      'WHERE "p"."Territory" = \'N\' ORDER BY 1').fetchall()
    assert rows == [(10,), (12,)]


@pytest.mark.parametrize("text,msg", [
    ("SalesPersonID = SalesPerson.SalesPersonID", "with its table"),
    ("Customer.SalesPersonID = Store.SalesPersonID", "is neither Customer nor SalesPerson"),
    ("Customer.SalesPersonID = 1", "must relate a column of Customer to a column of SalesPerson"),
    ("Customer.Nope = SalesPerson.SalesPersonID", "no published column Nope in Customer"),
    ("Customer.SalesPersonID = SalesPerson.SalesPersonID AND SalesPerson.Territory = HOST_NAME()",
     "parameters belong in the parent's row filter"),
    ("Customer.SalesPersonID = SalesPerson.SalesPersonID; DROP TABLE x", "write one condition"),
])
def test_bad_join_filters_name_the_article(text, msg):
    with pytest.raises(FilterError, match=msg) as ei:
        parse_join_filter(text, "Customer", CUSTOMER, "SalesPerson", SALESPERSON, "Sales, article Customer")
    assert ei.value.message.startswith("Sales, article Customer: join filter ")


def test_a_self_join_is_refused():
    with pytest.raises(FilterError, match="join with itself"):
        parse_join_filter("Customer.CustomerID = Customer.SalesPersonID", "Customer", CUSTOMER, "Customer",
                          CUSTOMER, "x")
