"""Seed 001's call syntaxes: parsing, the defaults per subscriber, parameter layouts, the bitmap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparksync.names import TableName
from sparksync.transactional.delivery.calls import (
    CallSpec,
    CommandSyntaxError,
    arguments,
    bit_of,
    bitmap,
    bitmap_length,
    changed_columns,
    default_procedure,
    effective_command,
    parameters,
    parse_command,
)

VENDOR = TableName("Purchasing", "Vendor")
COLS = ["VendorID", "AccountNumber", "Name", "CreditRating", "PreferredVendorStatus", "ActiveFlag",
        "PurchasingWebServiceURL", "ModifiedDate"]
KEY = ["VendorID"]


def test_default_procedure_names_follow_the_seed():
    assert [default_procedure(op, VENDOR) for op in ("ins", "upd", "del")] == \
        ["sp_MSins_PurchasingVendor", "sp_MSupd_PurchasingVendor", "sp_MSdel_PurchasingVendor"]
    long = default_procedure("upd", TableName("s" * 40, "t" * 40))
    assert len(long.encode()) <= 63 and long.startswith("sp_MSupd_sss")


def test_defaults_depend_on_the_subscriber():
    assert str(effective_command(None, "upd", VENDOR, procedures=True)) == "SCALL sp_MSupd_PurchasingVendor"
    assert effective_command(None, "ins", VENDOR, procedures=True).generated
    assert effective_command(None, "del", VENDOR, procedures=False) == CallSpec("del", "SQL")
    with pytest.raises(CommandSyntaxError, match="no stored procedures"):
        effective_command("XCALL my_proc", "upd", VENDOR, procedures=False)


def test_parse_generated_custom_sql_none():
    assert parse_command("MCALL sp_MSupd_PurchasingVendor", "upd", VENDOR).generated
    assert parse_command("CALL Purchasing.sp_MSupd_PurchasingVendor", "upd", VENDOR).generated
    custom = parse_command("CALL audit.my_upd", "upd", VENDOR)
    assert not custom.generated and custom.procedure == TableName("audit", "my_upd")
    assert parse_command("sql", "ins", VENDOR) == CallSpec("ins", "SQL")
    assert not parse_command("NONE", "del", VENDOR).replicated


@pytest.mark.parametrize("text,op,msg", [
    ("SCALL p", "ins", "cannot be used for inserts"), ("MCALL p", "del", "cannot be used for deletes"),
    ("VCALL p", "upd", "cannot be used for updates"), ("FOO p", "upd", "unknown call syntax"),
    ("CALL", "ins", "use 'CALL procedure_name'"), ("NONE x", "ins", "takes no procedure name"),
    ("CALL a.b.c", "ins", "use 'table' or 'schema.table'"), ("", "ins", "empty"),
])
def test_bad_commands(text, op, msg):
    with pytest.raises(CommandSyntaxError, match=msg):
        parse_command(text, op, VENDOR)


def names(spec_text: str, op: str) -> list[str]:
    return [p.name for p in parameters(parse_command(spec_text, op, VENDOR), COLS, KEY)]


def test_layouts_of_seed_001():
    cs = [f"c{i}" for i in range(1, 9)]
    olds = [f"old_c{i}" for i in range(1, 9)]
    assert names("CALL p", "ins") == cs
    assert names("CALL p", "upd") == cs + ["pkc1"]
    assert names("SCALL p", "upd") == cs + ["pkc1", "bitmap"]
    assert names("MCALL p", "upd") == cs + ["pkc1", "bitmap"]
    assert names("XCALL p", "upd") == olds + cs
    assert names("CALL p", "del") == ["pkc1"]
    assert names("XCALL p", "del") == olds


def test_bitmap_bits_follow_the_seed():
    assert bitmap_length(8) == 2          # the Vendor example: binary(2)
    assert bitmap_length(7) == 1 and bitmap_length(16) == 3
    assert [bit_of(k) for k in (1, 2, 3, 8, 9, 17)] == [(0, 1), (0, 2), (0, 4), (0, 128), (1, 1), (2, 1)]
    assert bitmap([False, False, True] + [False] * 5) == bytes([4, 0])
    assert bitmap([True] * 9) == bytes([255, 1])


BEFORE = dict(zip(COLS, [1, "AN1", "Old name", 1, True, True, None, "2024-01-01"]))


def test_scall_passes_changed_columns_only_and_the_bitmap():
    after = {**BEFORE, "Name": "New name", "CreditRating": 1}        # CreditRating unchanged (same value)
    args = arguments(parse_command("SCALL p", "upd", VENDOR), COLS, KEY, BEFORE, after)
    assert args[:8] == [None, None, "New name", None, None, None, None, None]
    assert args[8] == 1 and args[9] == bytes([4, 0])


def test_mcall_passes_every_column_with_the_bitmap():
    after = {**BEFORE, "ActiveFlag": False}
    args = arguments(parse_command("MCALL p", "upd", VENDOR), COLS, KEY, BEFORE, after)
    assert args[:8] == [after[c] for c in COLS] and args[8] == 1 and args[9] == bytes([32, 0])


def test_call_update_passes_the_original_key_and_xcall_both_images():
    after = {**BEFORE, "VendorID": 2}
    call = arguments(parse_command("CALL p", "upd", VENDOR), COLS, KEY, BEFORE, after)
    assert call[0] == 2 and call[-1] == 1
    x = arguments(parse_command("XCALL p", "upd", VENDOR), COLS, KEY, BEFORE, after)
    assert x == [BEFORE[c] for c in COLS] + [after[c] for c in COLS]
    assert arguments(parse_command("CALL p", "del", VENDOR), COLS, KEY, BEFORE, None) == [1]
    assert arguments(parse_command("XCALL p", "del", VENDOR), COLS, KEY, BEFORE, None) == [BEFORE[c] for c in COLS]
    assert arguments(parse_command("CALL p", "ins", VENDOR), COLS, KEY, None, after) == [after[c] for c in COLS]


def test_no_before_image_counts_every_column_as_changed():
    assert changed_columns(["a", "b"], None, {"a": 1, "b": 2}) == [True, True]
    assert changed_columns(["a"], {"a": float("nan")}, {"a": float("nan")}) == [False]
    assert changed_columns(["a", "b"], {"a": None, "b": 1}, {"a": 0, "b": 1}) == [True, False]


@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_bitmap_round_trip(flags):
    bm = bitmap(flags)
    assert len(bm) == bitmap_length(len(flags))
    for k, flag in enumerate(flags, 1):
        byte, bit = bit_of(k)
        assert bool(bm[byte] & bit) == flag
