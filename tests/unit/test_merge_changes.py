"""Unit tests for sparksync.merge.session.changes: a row's values as JSON text and back, for every Kind."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparksync.merge.session.changes import CHANGE_COLUMNS, CHANGE_SCHEMA
from sparksync.rows import decode_row, encode_row, json_text
from sparksync.types import Kind, SqlType

D = decimal.Decimal
UTC = dt.UTC
PLUS2 = dt.timezone(dt.timedelta(hours=2))
MINUS5_30 = dt.timezone(-dt.timedelta(hours=5, minutes=30))
U = uuid.UUID("6f9619ff-8b86-d011-b42d-00c04fc964ff")

# (kind, type, driver value, the value decode_row must give back)
CASES = [
    (SqlType(Kind.BOOLEAN), True, True),
    (SqlType(Kind.BOOLEAN), 0, False),
    (SqlType(Kind.SMALLINT), -32768, -32768),
    (SqlType(Kind.INTEGER), 2_147_483_647, 2_147_483_647),
    (SqlType(Kind.BIGINT), -9_223_372_036_854_775_808, -9_223_372_036_854_775_808),
    (SqlType(Kind.BIGINT), D("42"), 42),
    (SqlType(Kind.REAL), 1.5, 1.5),
    (SqlType(Kind.DOUBLE), 0.1, 0.1),
    (SqlType(Kind.DOUBLE), 7, 7.0),
    (SqlType(Kind.DECIMAL, precision=38, scale=10), D("1234567890123456789012345678.0123456789"),
     D("1234567890123456789012345678.0123456789")),
    (SqlType(Kind.DECIMAL, precision=10, scale=2), D("-0.01"), D("-0.01")),
    (SqlType(Kind.DECIMAL, precision=10, scale=2), D("1.5"), D("1.50")),
    (SqlType(Kind.DECIMAL, precision=12, scale=10), D("0.0000000001"), D("0.0000000001")),
    (SqlType(Kind.DECIMAL, precision=10, scale=0), 123, D("123")),
    (SqlType(Kind.TEXT), "héllo \"wörld\" \\ \n ✓ 𝄞", "héllo \"wörld\" \\ \n ✓ 𝄞"),
    (SqlType(Kind.TEXT), "", ""),
    (SqlType(Kind.BYTES), b"\x00\x01\xff binary \n", b"\x00\x01\xff binary \n"),
    (SqlType(Kind.BYTES), b"", b""),
    (SqlType(Kind.BYTES), memoryview(b"mv"), b"mv"),
    (SqlType(Kind.DATE), dt.date(2024, 2, 29), dt.date(2024, 2, 29)),
    (SqlType(Kind.DATE), dt.date(1, 1, 1), dt.date(1, 1, 1)),
    (SqlType(Kind.DATE), "2024-02-29", dt.date(2024, 2, 29)),
    (SqlType(Kind.TIME), dt.time(23, 59, 58, 123456), "23:59:58.123456"),
    (SqlType(Kind.TIMESTAMP), dt.datetime(2024, 1, 2, 3, 4, 5, 678901), dt.datetime(2024, 1, 2, 3, 4, 5, 678901)),
    (SqlType(Kind.TIMESTAMP), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=PLUS2), dt.datetime(2024, 1, 2, 1, 4, 5)),
    (SqlType(Kind.TIMESTAMP), "2024-01-02 03:04:05", dt.datetime(2024, 1, 2, 3, 4, 5)),
    (SqlType(Kind.TIMESTAMPTZ), dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
     dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)),
    (SqlType(Kind.TIMESTAMPTZ), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=MINUS5_30),
     dt.datetime(2024, 1, 2, 8, 34, 5, tzinfo=UTC)),
    (SqlType(Kind.TIMESTAMPTZ), dt.datetime(2024, 1, 2, 3, 4, 5), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    (SqlType(Kind.TIMESTAMPTZ), "2024-01-02T03:04:05Z", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
    (SqlType(Kind.UUID), U, str(U)),
    (SqlType(Kind.UUID), U.bytes, str(U)),
    (SqlType(Kind.UUID), str(U).upper(), str(U)),
    (SqlType(Kind.JSON), {"b": [1, 2.5, None], "a": "x"}, '{"a": "x", "b": [1, 2.5, null]}'),
    (SqlType(Kind.JSON), '{"k": 1}', '{"k": 1}'),
    (SqlType(Kind.JSON), "null", "null"),
    (SqlType(Kind.JSON), [], "[]"),
]


def _id(case):
    return f"{case[0]}-{type(case[1]).__name__}"


@pytest.mark.parametrize("t, value, expected", CASES, ids=[_id(c) for c in CASES])
def test_round_trip(t, value, expected):
    cols = [("v", t)]
    text = encode_row([value], cols)
    assert isinstance(text, str)
    json.loads(text)                                         # valid JSON
    out = decode_row(text, cols)["v"]
    assert out == expected
    assert type(out) is type(expected)
    if isinstance(expected, dt.datetime):
        assert (out.tzinfo is None) == (expected.tzinfo is None)
        if out.tzinfo is not None:
            assert out.utcoffset() == dt.timedelta(0)
    if isinstance(expected, D):
        assert out.as_tuple() == expected.as_tuple()         # exact, scale included


@pytest.mark.parametrize("kind", list(Kind))
def test_none_round_trips_for_every_kind(kind):
    t = SqlType(kind, precision=10, scale=2) if kind is Kind.DECIMAL else SqlType(kind)
    cols = [("v", t)]
    text = encode_row([None], cols)
    assert json.loads(text) == {"v": None}
    assert decode_row(text, cols) == {"v": None}


def test_every_kind_is_covered_by_a_round_trip_case():
    assert {c[0].kind for c in CASES} == set(Kind)


def test_a_whole_row_round_trips():
    cols = [(f"c_{c[0].kind}_{i}", c[0]) for i, c in enumerate(CASES)]
    text = encode_row([c[1] for c in CASES], cols)
    assert decode_row(text, cols) == {name: c[2] for (name, _), c in zip(cols, CASES)}


def test_encoded_bytes_are_base64_and_decimals_are_strings():
    cols = [("b", SqlType(Kind.BYTES)), ("d", SqlType(Kind.DECIMAL, precision=5, scale=2))]
    assert json.loads(encode_row([b"\x00\xff", D("1.1")], cols)) == {"b": "AP8=", "d": "1.10"}


def test_encoding_keeps_non_ascii_text_readable():
    assert "ü" in encode_row(["ü"], [("t", SqlType(Kind.TEXT))])


def test_missing_columns_decode_as_none_and_extra_keys_are_ignored():
    cols = [("a", SqlType(Kind.INTEGER)), ("b", SqlType(Kind.TEXT))]
    assert decode_row('{"a": 1, "zzz": 5}', cols) == {"a": 1, "b": None}


def test_decode_none_is_none():
    assert decode_row(None, [("a", SqlType(Kind.INTEGER))]) is None


def test_change_schema_lists_the_change_columns():
    names = [part.strip().split()[0] for part in CHANGE_SCHEMA.split(",")]
    assert names == CHANGE_COLUMNS


@pytest.mark.parametrize("value, expected", [
    (None, None),
    ('{"1":2}', '{"1":2}'),
    (b'{"1":2}', '{"1":2}'),
    ({"2": 1, "1": 3}, '{"1":3,"2":1}'),
    ([1, D("1.5")], '[1,"1.5"]'),
])
def test_json_text(value, expected):
    assert json_text(value) == expected


# -- properties ----------------------------------------------------------------------------------

SETTINGS = settings(max_examples=200, deadline=None, database=None)


@SETTINGS
@given(st.integers(1, 38).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, p))).flatmap(
    lambda ps: st.tuples(st.just(ps), st.decimals(min_value=-(10 ** (ps[0] - ps[1])) + 1,
                                                  max_value=10 ** (ps[0] - ps[1]) - 1,
                                                  places=ps[1], allow_nan=False, allow_infinity=False))))
def test_decimals_are_exact(args):
    (precision, scale), value = args
    cols = [("d", SqlType(Kind.DECIMAL, precision=precision, scale=scale))]
    out = decode_row(encode_row([value], cols), cols)["d"]
    assert out == value
    assert out.as_tuple().exponent == -scale


@SETTINGS
@given(st.binary(max_size=64))
def test_bytes_are_exact(value):
    cols = [("b", SqlType(Kind.BYTES))]
    assert decode_row(encode_row([value], cols), cols)["b"] == value


@SETTINGS
@given(st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
       st.one_of(st.none(), st.sampled_from([UTC, PLUS2, MINUS5_30])))
def test_timestamps_keep_the_instant(value, tz):
    value = value if tz is None else value.replace(tzinfo=tz)
    naive = [("t", SqlType(Kind.TIMESTAMP))]
    aware = [("t", SqlType(Kind.TIMESTAMPTZ))]
    as_utc = value.replace(tzinfo=UTC) if tz is None else value.astimezone(UTC)
    out = decode_row(encode_row([value], naive), naive)["t"]
    assert out.tzinfo is None and out == as_utc.replace(tzinfo=None)
    out = decode_row(encode_row([value], aware), aware)["t"]
    assert out == as_utc and out.utcoffset() == dt.timedelta(0)


@SETTINGS
@given(st.text(), st.integers(-(2 ** 63), 2 ** 63 - 1), st.floats(allow_nan=False, allow_infinity=False),
       st.booleans(), st.dates(), st.uuids())
def test_mixed_rows_round_trip(text, big, flt, flag, date, uid):
    cols = [("t", SqlType(Kind.TEXT)), ("i", SqlType(Kind.BIGINT)), ("f", SqlType(Kind.DOUBLE)),
            ("b", SqlType(Kind.BOOLEAN)), ("d", SqlType(Kind.DATE)), ("u", SqlType(Kind.UUID))]
    out = decode_row(encode_row([text, big, flt, flag, date, uid], cols), cols)
    assert out == {"t": text, "i": big, "f": flt, "b": flag, "d": date, "u": str(uid)}


# -- the compiled encoder writes what the specification says -------------------------------------

def _spec_json(values, columns) -> str:
    """The change JSON by its definition: every value through its column's converter and _jsonable."""
    from sparksync.rows import _jsonable
    from sparksync.types import arrow_converter

    return json.dumps({name: _jsonable(arrow_converter(t)(v), t) for (name, t), v in zip(columns, values)},
                      separators=(",", ":"), ensure_ascii=False)


_SPEC_COLUMNS = [("id", SqlType(Kind.BIGINT)), ("small", SqlType(Kind.SMALLINT)), ('say "hi"', SqlType(Kind.TEXT)),
                 ("price", SqlType(Kind.DECIMAL, precision=6, scale=2)),
                 ("whole", SqlType(Kind.DECIMAL, precision=4, scale=0)),
                 ("g", SqlType(Kind.UUID)), ("f", SqlType(Kind.DOUBLE)), ("ü", SqlType(Kind.TEXT, length=5))]
_values = st.one_of(st.none(), st.integers(-10**6, 10**6), st.integers(), st.booleans(), st.text(max_size=8),
                    st.sampled_from([str(U), str(U).upper(), "not-a-uuid", "12", "1.5"]),
                    st.decimals(allow_nan=False, allow_infinity=False, places=3),
                    st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=500, deadline=None)
@given(st.tuples(*[_values for _ in _SPEC_COLUMNS]))
def test_encoder_writes_what_the_converters_give(values):
    from sparksync.rows import RowCodec
    from sparksync.types import ValueError_

    try:
        expected = _spec_json(values, _SPEC_COLUMNS)
    except ValueError_:
        with pytest.raises(ValueError_):
            RowCodec(_SPEC_COLUMNS).encode(values)
        return
    assert RowCodec(_SPEC_COLUMNS).encode(values) == expected


@pytest.mark.parametrize("value", [0, 1, -1, 9999, 10000, -9999, -10000, 99_999_999])
def test_encoder_writes_ints_in_decimal_columns_like_the_converter(value):
    from sparksync.rows import RowCodec
    from sparksync.types import ValueError_

    cols = [("price", SqlType(Kind.DECIMAL, precision=6, scale=2)), ("whole", SqlType(Kind.DECIMAL, precision=4, scale=0))]
    for col in cols:
        try:
            expected = _spec_json((value,), [col])
        except ValueError_:
            with pytest.raises(ValueError_):
                RowCodec([col]).encode((value,))
            continue
        assert RowCodec([col]).encode((value,)) == expected


def test_rows_holding_finds_exactly_the_rows_with_a_marker():
    from sparksync.merge.apply.classify import _rows_holding

    rows = ['{"a":"x"}', None, '{"a":"NaN"}', '{"f":"NaN","b":"\\\\u0000"}', "", '{"a":"\\\\u0000"}']
    assert _rows_holding(rows, ('"NaN"',)) == [2, 3]
    assert _rows_holding(rows, ("\\u0000",)) == [3, 5]
    assert _rows_holding(rows, ('"NaN"', "\\u0000")) == [2, 3, 5]
    assert _rows_holding(rows, ()) == [] and _rows_holding(['{"a":1}'], ('"NaN"',)) == []
