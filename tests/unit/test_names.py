"""Unit tests for sparksync.names: identifier validation, quoting and table-name parsing."""

from __future__ import annotations

import pytest

from sparksync.errors import ConfigurationError, InvalidNameError
from sparksync.names import MAX_IDENTIFIER_LENGTH, TableName, check_identifier, quote_ident

# -- check_identifier ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "Customer",
    "customer_2024",
    "Order Details",          # spaces inside are fine
    "Kunde_Straße",           # unicode
    "客户",
    "Ünïcödé name",
    "a" * MAX_IDENTIFIER_LENGTH,
    "é" * 31,                 # 62 bytes in UTF-8
    "x.y-z$#@!%&*()",         # punctuation that is not dangerous is accepted
])
def test_check_identifier_accepts_normal_names(name):
    assert check_identifier(name) == name


@pytest.mark.parametrize("name, fragment", [
    ('Cus"tomer', "'\"'"),
    ("Cus'tomer", '"\'"'),
    ("Cus`tomer", "'`'"),
    ("Cus\\tomer", "'\\\\'"),
    ("Customer;DROP", "';'"),
    ("Cus[tomer", "'['"),
    ("Cus]tomer", "']'"),
    ("Cus\x00tomer", "'\\x00'"),
    ("Cus\ttomer", "'\\t'"),
    ("Cus\ntomer", "'\\n'"),
    ("Cus\x1btomer", "'\\x1b'"),
    ("Cus\x7ftomer", "'\\x7f'"),
])
def test_check_identifier_rejects_dangerous_characters(name, fragment):
    with pytest.raises(InvalidNameError) as ei:
        check_identifier(name, "column name")
    msg = ei.value.message
    assert msg.startswith("invalid column name")
    assert fragment in msg, msg
    assert "not allowed" in msg
    assert ei.value.obj == name


@pytest.mark.parametrize("name", ["", None, 42])
def test_check_identifier_rejects_empty_or_non_string(name):
    with pytest.raises(InvalidNameError, match="empty"):
        check_identifier(name)


@pytest.mark.parametrize("name", [" Customer", "Customer ", " Customer ", "\u00a0Customer", "Customer\n"])
def test_check_identifier_rejects_leading_or_trailing_space(name):
    with pytest.raises(InvalidNameError, match="leading or trailing spaces"):
        check_identifier(name)


@pytest.mark.parametrize("name", [
    "a" * (MAX_IDENTIFIER_LENGTH + 1),
    "é" * 32,                 # 32 characters but 64 bytes
    "客" * 22,                # 66 bytes
])
def test_check_identifier_rejects_names_longer_than_63_bytes(name):
    with pytest.raises(InvalidNameError, match="longer than 63 bytes"):
        check_identifier(name)


def test_invalid_name_error_is_a_configuration_error():
    with pytest.raises(ConfigurationError):
        check_identifier('a"b')
    assert InvalidNameError.code == "invalid_name"


@pytest.mark.parametrize("name", ["Cus\x85tomer", "Cus\x9btomer"])
def test_check_identifier_rejects_c1_control_characters(name):
    with pytest.raises(InvalidNameError):
        check_identifier(name)


# -- quote_ident ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, quoted", [
    ("Customer", '"Customer"'),
    ("Order Details", '"Order Details"'),
    ("select", '"select"'),
    ('a"b', '"a""b"'),
    ('"', '""""'),
    ("", '""'),
    ("客户", '"客户"'),
])
def test_quote_ident(name, quoted):
    assert quote_ident(name) == quoted


def test_quote_ident_round_trips_through_sqlite():
    import sqlite3

    con = sqlite3.connect(":memory:")
    try:
        for name in ['we"ird', "Order Details", "select", "x;y"]:
            con.execute(f"CREATE TABLE {quote_ident(name)} ({quote_ident(name + ' col')} INTEGER)")
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert names == {'we"ird', "Order Details", "select", "x;y"}
    finally:
        con.close()


# -- TableName -----------------------------------------------------------------------------------

def test_table_name_parse_plain():
    t = TableName.parse("Customer")
    assert t == TableName(None, "Customer")
    assert t.schema is None and t.name == "Customer"
    assert str(t) == "Customer"
    assert t.slug == "Customer"


def test_table_name_parse_schema_qualified():
    t = TableName.parse("Sales.Customer")
    assert t == TableName("Sales", "Customer")
    assert str(t) == "Sales.Customer"
    assert t.slug == "Sales_Customer"


@pytest.mark.parametrize("text", ["Customer", "Sales.Customer", "Purchasing.Vendor Contact", "dbo.客户"])
def test_table_name_str_round_trip(text):
    t = TableName.parse(text)
    assert str(t) == text
    assert TableName.parse(str(t)) == t
    assert "." not in t.slug
    assert t.slug == text.replace(".", "_")


def test_table_name_rejects_three_parts():
    with pytest.raises(InvalidNameError, match="use 'table' or 'schema.table'"):
        TableName.parse("a.b.c")


@pytest.mark.parametrize("text", ["", "   ", None])
def test_table_name_rejects_empty(text):
    with pytest.raises(InvalidNameError, match="empty"):
        TableName.parse(text)


@pytest.mark.parametrize("text, what", [
    (".Customer", "schema name"),
    ("Sales.", "table name"),
    ('Sales.Cus"tomer', "table name"),
    ('Sa;les.Customer', "schema name"),
    (" Customer", "table name"),
])
def test_table_name_rejects_bad_parts_naming_the_part(text, what):
    with pytest.raises(InvalidNameError) as ei:
        TableName.parse(text)
    assert f"invalid {what}" in ei.value.message


def test_table_name_ordering_and_hashing():
    a, b = TableName(None, "A"), TableName("s", "B")
    assert {a, TableName.parse("A")} == {a}
    assert sorted([TableName("s", "b"), TableName("s", "a")]) == [TableName("s", "a"), TableName("s", "b")]
    assert a != b


def test_table_name_ordering_mixes_schema_less_and_qualified_names():
    names = [TableName("Sales", "Order"), TableName(None, "Customer")]
    assert len(sorted(names)) == 2
