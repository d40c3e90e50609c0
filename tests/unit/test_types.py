"""Unit tests for sparksync.types: value conversion for Arrow, and the Arrow / Spark type mapping."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import pyarrow as pa
import pytest

from sparksync.types import Kind, SqlType, ValueError_, arrow_converter, decimal_type, rows_to_record_batch

D = decimal.Decimal
UTC = dt.UTC


def conv(kind, **kw):
    return arrow_converter(SqlType(kind, **kw))


# -- None passes through for every kind ----------------------------------------------------------

@pytest.mark.parametrize("kind", list(Kind))
def test_none_is_none_for_every_kind(kind):
    t = SqlType(kind, precision=10, scale=2) if kind is Kind.DECIMAL else SqlType(kind)
    assert arrow_converter(t)(None) is None


# -- booleans ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (0, False), (1, True), (True, True), (False, False),
    ("true", True), ("FALSE", False), ("t", True), ("f", False), ("1", True), ("0", False),
])
def test_boolean(value, expected):
    out = conv(Kind.BOOLEAN)(value)
    assert out is expected


@pytest.mark.parametrize("value", [2, -1, "yes", "", 1.0, b"\x01"])
def test_boolean_rejects(value):
    with pytest.raises(ValueError_, match="is not a boolean"):
        conv(Kind.BOOLEAN)(value)


# -- integers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", [Kind.SMALLINT, Kind.INTEGER, Kind.BIGINT])
@pytest.mark.parametrize("value, expected", [
    (5, 5), (-7, -7), (0, 0), (2**62, 2**62), (3.0, 3), (D("12"), 12), (D("12.000"), 12), (True, 1),
])
def test_integers(kind, value, expected):
    out = conv(kind)(value)
    assert out == expected and type(out) is int


@pytest.mark.parametrize("value", ["abc", "12", 1.5, D("1.5"), b"1", float("nan")])
def test_integer_rejects(value):
    with pytest.raises(ValueError_, match="is not an integer"):
        conv(Kind.INTEGER)(value)


def test_value_error_is_a_value_error():
    assert issubclass(ValueError_, ValueError)


# -- floats --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", [Kind.REAL, Kind.DOUBLE])
def test_floats(kind):
    c = conv(kind)
    assert c(1) == 1.0 and type(c(1)) is float
    assert c(2.5) == 2.5
    assert c(D("0.25")) == 0.25
    for bad in ("1.5", True, b"x"):
        with pytest.raises(ValueError_, match="is not a number"):
            c(bad)


# -- decimals ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (3, D("3.00")),
    (-3, D("-3.00")),
    ("12.345", D("12.34")),       # half-even
    ("12.355", D("12.36")),
    (D("2.675"), D("2.68")),
    (0.1, D("0.10")),             # through repr(), not the binary expansion
    (1.005, D("1.00")),           # repr(1.005) == '1.005' -> half-even
    (19.99, D("19.99")),
    ("1e2", D("100.00")),
    (D("7"), D("7.00")),
])
def test_decimal_quantized_to_scale(value, expected):
    out = conv(Kind.DECIMAL, precision=10, scale=2)(value)
    assert out == expected
    assert out.as_tuple().exponent == -2, out


def test_decimal_scale_zero():
    assert conv(Kind.DECIMAL, precision=5, scale=0)("41.5") == D("42")
    assert conv(Kind.DECIMAL, precision=5, scale=0)("42.5") == D("42")


def test_decimal_scale_four_from_float():
    out = conv(Kind.DECIMAL, precision=19, scale=4)(1234.5)
    assert out == D("1234.5000") and str(out) == "1234.5000"


@pytest.mark.parametrize("value", ["abc", "", True, b"1", [1]])
def test_decimal_rejects(value):
    with pytest.raises(ValueError_, match="is not a decimal"):
        conv(Kind.DECIMAL, precision=10, scale=2)(value)


def test_decimal_38_digits():
    c = conv(Kind.DECIMAL, precision=38, scale=10)
    assert c("12345678901234567890.5") == D("12345678901234567890.5000000000")


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_decimal_rejects_special_values(value):
    with pytest.raises(ValueError_):
        conv(Kind.DECIMAL, precision=10, scale=2)(value)


@pytest.mark.parametrize("value", [1e80, 10**100, "1E+90", D("-1e85")])
def test_decimal_rejects_values_too_big_to_quantize(value):
    with pytest.raises(ValueError_, match=r"does not fit decimal\(4,0\)"):
        conv(Kind.DECIMAL, precision=4, scale=0)(value)


# -- text, bytes, time ---------------------------------------------------------------------------

def test_text():
    c = conv(Kind.TEXT, length=10)
    assert c("héllo") == "héllo"
    assert c(12) == "12"
    assert c(D("1.50")) == "1.50"
    for bad in (True, b"x", [1]):
        with pytest.raises(ValueError_, match="is not text"):
            c(bad)


def test_bytes():
    c = conv(Kind.BYTES)
    assert c(b"\x00\x01") == b"\x00\x01"
    assert c(bytearray(b"ab")) == b"ab" and type(c(bytearray(b"ab"))) is bytes
    assert c(memoryview(b"cd")) == b"cd"
    assert c("é") == "é".encode()
    with pytest.raises(ValueError_, match="is not binary"):
        c(5)


def test_time():
    c = conv(Kind.TIME)
    assert c(dt.time(13, 5, 7)) == "13:05:07"
    assert c(dt.time(13, 5, 7, 250000)) == "13:05:07.250000"
    assert c("08:00:00") == "08:00:00"
    with pytest.raises(ValueError_, match="is not a time"):
        c(5)


# -- dates and timestamps ------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("2024-02-29", dt.date(2024, 2, 29)),
    ("2024-02-29T23:59:59", dt.date(2024, 2, 29)),
    ("2024-02-29 23:59:59+05:00", dt.date(2024, 2, 29)),
    (dt.date(2024, 1, 2), dt.date(2024, 1, 2)),
    (dt.datetime(2024, 1, 2, 3, 4), dt.date(2024, 1, 2)),
])
def test_date(value, expected):
    out = conv(Kind.DATE)(value)
    assert out == expected and type(out) is dt.date


@pytest.mark.parametrize("value", ["2024-02-30", "yesterday", 20240101])
def test_date_rejects(value):
    with pytest.raises(ValueError_, match="is not a date"):
        conv(Kind.DATE)(value)


@pytest.mark.parametrize("value, expected", [
    ("2024-03-01T12:30:00", dt.datetime(2024, 3, 1, 12, 30)),
    ("2024-03-01 12:30:00", dt.datetime(2024, 3, 1, 12, 30)),
    ("2024-03-01 12:30:00.123456", dt.datetime(2024, 3, 1, 12, 30, 0, 123456)),
    ("2024-03-01T12:30:00+02:00", dt.datetime(2024, 3, 1, 10, 30)),
    ("2024-03-01 12:30:00-05:30", dt.datetime(2024, 3, 1, 18, 0)),
    ("2024-03-01T12:30:00Z", dt.datetime(2024, 3, 1, 12, 30)),
    ("2024-03-01T00:30:00+01:00", dt.datetime(2024, 2, 29, 23, 30)),   # crosses midnight and month
    ("  2024-03-01 12:30:00  ", dt.datetime(2024, 3, 1, 12, 30)),
    ("2024-03-01", dt.datetime(2024, 3, 1)),
    (dt.date(2024, 3, 1), dt.datetime(2024, 3, 1)),
    (dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=-1))), dt.datetime(2024, 3, 1, 13, 30)),
])
def test_timestamp_is_naive_utc(value, expected):
    out = conv(Kind.TIMESTAMP)(value)
    assert out == expected
    assert out.tzinfo is None


@pytest.mark.parametrize("value, expected", [
    ("2024-03-01T12:30:00", dt.datetime(2024, 3, 1, 12, 30, tzinfo=UTC)),        # naive = UTC
    ("2024-03-01 12:30:00", dt.datetime(2024, 3, 1, 12, 30, tzinfo=UTC)),
    ("2024-03-01T12:30:00+02:00", dt.datetime(2024, 3, 1, 10, 30, tzinfo=UTC)),
    ("2024-03-01 12:30:00.5-05:30", dt.datetime(2024, 3, 1, 18, 0, 0, 500000, tzinfo=UTC)),
    ("2024-03-01T12:30:00Z", dt.datetime(2024, 3, 1, 12, 30, tzinfo=UTC)),
    (dt.datetime(2024, 3, 1, 12, 30), dt.datetime(2024, 3, 1, 12, 30, tzinfo=UTC)),
])
def test_timestamptz_is_aware_utc(value, expected):
    out = conv(Kind.TIMESTAMPTZ)(value)
    assert out == expected
    assert out.utcoffset() == dt.timedelta(0)
    assert out.tzinfo is UTC
    assert (out.hour, out.minute) == (expected.hour, expected.minute)   # the wall clock is UTC's


@pytest.mark.parametrize("kind", [Kind.TIMESTAMP, Kind.TIMESTAMPTZ])
@pytest.mark.parametrize("value", ["not a time", "2024-13-01 00:00:00", 1700000000, b"2024-01-01"])
def test_timestamp_rejects(kind, value):
    with pytest.raises(ValueError_, match="is not a timestamp"):
        conv(kind)(value)


# -- uuid and json -------------------------------------------------------------------------------

GUID = "0f9b2c1e-1234-4abc-8def-00000000000a"


@pytest.mark.parametrize("value", [
    GUID,
    GUID.upper(),
    "{" + GUID.upper() + "}",
    GUID.replace("-", ""),
    "urn:uuid:" + GUID,
    uuid.UUID(GUID),
    uuid.UUID(GUID).bytes,
    bytearray(uuid.UUID(GUID).bytes),
])
def test_uuid_normalized_to_lower_canonical_text(value):
    assert conv(Kind.UUID)(value) == GUID


@pytest.mark.parametrize("value", ["not-a-uuid", b"short", 12345, GUID[:-1]])
def test_uuid_rejects(value):
    with pytest.raises(ValueError_, match="is not a uuid"):
        conv(Kind.UUID)(value)


def test_json():
    c = conv(Kind.JSON)
    assert c('{"b": 1}') == '{"b": 1}'           # text is kept as is
    out = c({"b": 1, "a": [1, 2, None], "c": {"z": True}})
    assert out == '{"a": [1, 2, null], "b": 1, "c": {"z": true}}'
    assert json.loads(out) == {"b": 1, "a": [1, 2, None], "c": {"z": True}}
    assert c([1, "x"]) == '[1, "x"]'
    assert c(5) == "5"
    assert json.loads(c({"d": D("1.5")})) == {"d": "1.5"}   # default=str


# -- rows_to_record_batch ------------------------------------------------------------------------

def _cols():
    return [
        ("id", SqlType(Kind.INTEGER)),
        ("price", SqlType(Kind.DECIMAL, precision=10, scale=2)),
        ("at", SqlType(Kind.TIMESTAMPTZ)),
        ("guid", SqlType(Kind.UUID)),
        ("active", SqlType(Kind.BOOLEAN)),
    ]


def _schema(cols):
    return pa.schema([pa.field(n, t.to_arrow()) for n, t in cols])


def test_rows_to_record_batch_converts_values():
    cols = _cols()
    rows = [(1, "9.999", "2024-03-01 12:00:00+01:00", GUID.upper(), 1),
            (2, None, None, None, 0)]
    batch = rows_to_record_batch(rows, cols, _schema(cols), "Sales.Customer")
    assert batch.num_rows == 2
    assert batch.schema == _schema(cols)
    d = batch.to_pydict()
    assert d["id"] == [1, 2]
    assert d["price"] == [D("10.00"), None]
    assert d["at"] == [dt.datetime(2024, 3, 1, 11, 0, tzinfo=UTC), None]
    assert d["guid"] == [GUID, None]
    assert d["active"] == [True, False]


def test_rows_to_record_batch_empty():
    cols = _cols()
    batch = rows_to_record_batch([], cols, _schema(cols), "t")
    assert batch.num_rows == 0 and batch.num_columns == len(cols)


def test_rows_to_record_batch_error_names_where_and_column():
    cols = _cols()
    rows = [(1, "1.00", None, None, 1), ("abc", "1.00", None, None, 1)]
    with pytest.raises(ValueError_) as ei:
        rows_to_record_batch(rows, cols, _schema(cols), "snapshot of Sales.Customer")
    msg = str(ei.value)
    assert msg.startswith("snapshot of Sales.Customer, column id (integer): ")
    assert "'abc' is not an integer" in msg


def test_rows_to_record_batch_error_names_the_right_column():
    cols = _cols()
    rows = [(1, "1.00", None, "nope", 1)]
    with pytest.raises(ValueError_, match=r"^w, column guid \(uuid\): 'nope' is not a uuid$"):
        rows_to_record_batch(rows, cols, _schema(cols), "w")
    rows = [(1, "x", None, None, 1)]
    with pytest.raises(ValueError_, match=r"column price \(decimal\(10,2\)\)"):
        rows_to_record_batch(rows, cols, _schema(cols), "w")


@pytest.mark.parametrize("t, value", [
    (SqlType(Kind.SMALLINT), 70000),
    (SqlType(Kind.DECIMAL, precision=10, scale=2), "123456789012.34"),
])
def test_rows_to_record_batch_out_of_range_names_where_and_column(t, value):
    cols = [("c", t)]
    with pytest.raises(ValueError_, match=r"^where, column c "):
        rows_to_record_batch([(value,)], cols, _schema(cols), "where")


# -- SqlType: Arrow and Spark forms --------------------------------------------------------------

TYPE_TABLE = [
    (SqlType(Kind.BOOLEAN), pa.bool_(), "BOOLEAN"),
    (SqlType(Kind.SMALLINT), pa.int16(), "SMALLINT"),
    (SqlType(Kind.INTEGER), pa.int32(), "INT"),
    (SqlType(Kind.BIGINT), pa.int64(), "BIGINT"),
    (SqlType(Kind.REAL), pa.float32(), "FLOAT"),
    (SqlType(Kind.DOUBLE), pa.float64(), "DOUBLE"),
    (SqlType(Kind.DECIMAL, precision=19, scale=4), pa.decimal128(19, 4), "DECIMAL(19,4)"),
    (SqlType(Kind.TEXT), pa.string(), "STRING"),
    (SqlType(Kind.TEXT, length=50), pa.string(), "STRING"),
    (SqlType(Kind.BYTES), pa.binary(), "BINARY"),
    (SqlType(Kind.DATE), pa.date32(), "DATE"),
    (SqlType(Kind.TIME), pa.string(), "STRING"),
    (SqlType(Kind.TIMESTAMP), pa.timestamp("us"), "TIMESTAMP_NTZ"),
    (SqlType(Kind.TIMESTAMPTZ), pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    (SqlType(Kind.UUID), pa.string(), "STRING"),
    (SqlType(Kind.JSON), pa.string(), "STRING"),
]


def test_type_table_covers_every_kind():
    assert {t.kind for t, _, _ in TYPE_TABLE} == set(Kind)


@pytest.mark.parametrize("t, arrow, spark", TYPE_TABLE, ids=[str(t) for t, _, _ in TYPE_TABLE])
def test_to_arrow_and_to_spark(t, arrow, spark):
    assert t.to_arrow() == arrow
    assert t.to_spark() == spark


@pytest.mark.parametrize("t, arrow, spark", TYPE_TABLE, ids=[str(t) for t, _, _ in TYPE_TABLE])
def test_converted_values_fit_the_arrow_type(t, arrow, spark):
    samples = {
        Kind.BOOLEAN: 1, Kind.SMALLINT: 7, Kind.INTEGER: 7, Kind.BIGINT: 2**40, Kind.REAL: 1.5, Kind.DOUBLE: 1.5,
        Kind.DECIMAL: "1.23456", Kind.TEXT: "x", Kind.BYTES: b"x", Kind.DATE: "2024-01-02",
        Kind.TIME: "10:00:00", Kind.TIMESTAMP: "2024-01-02 03:04:05+01:00",
        Kind.TIMESTAMPTZ: "2024-01-02T03:04:05Z", Kind.UUID: GUID, Kind.JSON: {"a": 1},
    }
    value = arrow_converter(t)(samples[t.kind])
    arr = pa.array([value, None], type=arrow)
    assert arr.null_count == 1 and arr.type == arrow


def test_str_of_types():
    assert str(SqlType(Kind.DECIMAL, precision=19, scale=4)) == "decimal(19,4)"
    assert str(SqlType(Kind.TEXT, length=50)) == "text(50)"
    assert str(SqlType(Kind.TIMESTAMPTZ)) == "timestamptz"


@pytest.mark.parametrize("a, b, ok", [
    (SqlType(Kind.SMALLINT), SqlType(Kind.BIGINT), True),
    (SqlType(Kind.INTEGER), SqlType(Kind.SMALLINT), True),
    (SqlType(Kind.REAL), SqlType(Kind.DOUBLE), True),
    (SqlType(Kind.TEXT, length=50), SqlType(Kind.TEXT), True),
    (SqlType(Kind.DECIMAL, precision=10, scale=2), SqlType(Kind.DECIMAL, precision=38, scale=10), True),
    (SqlType(Kind.INTEGER), SqlType(Kind.DOUBLE), False),
    (SqlType(Kind.INTEGER), SqlType(Kind.DECIMAL, precision=10, scale=0), False),
    (SqlType(Kind.TIMESTAMP), SqlType(Kind.TIMESTAMPTZ), False),
    (SqlType(Kind.UUID), SqlType(Kind.TEXT), False),
    (SqlType(Kind.JSON), SqlType(Kind.TEXT), False),
    (SqlType(Kind.BOOLEAN), SqlType(Kind.SMALLINT), False),
])
def test_compatible_with(a, b, ok):
    assert a.compatible_with(b) is ok
    assert b.compatible_with(a) is ok


def test_to_dict_from_dict_round_trip():
    for t, _, _ in TYPE_TABLE:
        assert SqlType.from_dict(t.to_dict()) == t
    assert SqlType(Kind.TEXT).to_dict() == {"kind": "text"}
    assert SqlType(Kind.DECIMAL, precision=5, scale=1).to_dict() == {"kind": "decimal", "precision": 5, "scale": 1}


def test_decimal_type_defaults_and_caps():
    assert decimal_type(None, None) == SqlType(Kind.DECIMAL)          # unconstrained
    assert decimal_type(50, 4) == SqlType(Kind.DECIMAL)               # beyond decimal128: unconstrained too
    assert decimal_type(38, 4) == SqlType(Kind.DECIMAL, precision=38, scale=4)
    assert decimal_type(7, None) == SqlType(Kind.DECIMAL, precision=7, scale=0)


def test_rows_to_record_batch_error_names_the_row_by_its_key():
    cols = _cols()
    rows = [(1, "1.00", None, None, 1), (2, "not a number", None, None, 1)]
    with pytest.raises(ValueError_, match=r"snapshot of T, row id=2, column "):
        rows_to_record_batch(rows, cols, _schema(cols), "snapshot of T", key=["id"])


def test_dates_python_cannot_hold_are_not_read_as_other_dates():
    conv = arrow_converter(SqlType(Kind.DATE))
    for text in ("0044-03-15 BC", "2024-01-02junk"):
        with pytest.raises(ValueError_):
            conv(text)
