"""Pure pieces of transactional replication: the snapshot sync point, pgoutput messages, stream
routing, and the messages for a server that cannot decode its log."""

from __future__ import annotations

import datetime as dt
import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparksync.dialects.postgres import pgoutput as po
from sparksync.transactional.capture import seen_by_snapshot
from sparksync.transactional.capture.logical import server_problems, slot_name
from sparksync.transactional.delivery.deliver import route
from sparksync.transactional.delivery.subscriber import ArticleTarget, Command

# -- the sync point ----------------------------------------------------------------------------------


def test_sqlite_sync_point_is_a_sequence_number():
    sync = {"kind": "seq", "seq": 10}
    assert seen_by_snapshot(sync, 12, 10) and not seen_by_snapshot(sync, 12, 11)
    assert not seen_by_snapshot(None, 12, 1)


def test_postgresql_sync_point_is_the_snapshot_visibility():
    sync = {"kind": "snapshot", "xmin": 100, "xmax": 110, "xip": [103, 107], "upto": 5000}
    assert seen_by_snapshot(sync, 10, 99)            # before xmin: committed before the snapshot
    assert seen_by_snapshot(sync, 10, 104)           # between, not running: seen
    assert not seen_by_snapshot(sync, 10, 103)       # running at the snapshot: not seen, deliver
    assert not seen_by_snapshot(sync, 10, 110)       # started after: deliver
    assert not seen_by_snapshot(sync, 6000, 99)      # past every transaction the snapshot knew: deliver


def test_xid_wraparound_and_64_bit_snapshot_values():
    epoch = 3 << 32
    sync = {"kind": "snapshot", "xmin": epoch + 0xFFFFFFF0, "xmax": epoch + (1 << 32) + 5, "xip": [epoch + (1 << 32) + 2],
            "upto": 10}
    assert seen_by_snapshot(sync, 1, 0xFFFFFFF5)     # 32-bit xids from pgoutput, modulo 2^32
    assert seen_by_snapshot(sync, 1, 1)
    assert not seen_by_snapshot(sync, 1, 2)
    assert not seen_by_snapshot(sync, 1, 5)


# -- pgoutput --------------------------------------------------------------------------------------

def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _tuple(*values) -> bytes:
    out = struct.pack("!h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is po.UNCHANGED:
            out += b"u"
        else:
            out += b"t" + struct.pack("!i", len(v)) + v
    return out


def test_parse_every_message_kind():
    t = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    micros = int((t - po.PG_EPOCH).total_seconds() * 1_000_000)
    assert po.parse(b"B" + struct.pack("!QqI", 0x1_0000_0010, micros, 77)) == po.Begin(0x1_0000_0010, t, 77)
    assert po.parse(b"C" + struct.pack("!bQQq", 0, 5, 6, micros)) == po.Commit(5, 6, t)
    rel = po.parse(b"R" + struct.pack("!I", 9) + _s("Purchasing") + _s("Vendor") + b"f" + struct.pack("!h", 2)
                   + struct.pack("!b", 1) + _s("id") + struct.pack("!Ii", 23, -1)
                   + struct.pack("!b", 0) + _s("name") + struct.pack("!Ii", 25, -1))
    assert rel.namespace == "Purchasing" and [c.name for c in rel.columns] == ["id", "name"] and rel.columns[0].key
    assert po.parse(b"I" + struct.pack("!I", 9) + b"N" + _tuple(b"1", None)) == po.Insert(9, [b"1", None])
    upd = po.parse(b"U" + struct.pack("!I", 9) + b"O" + _tuple(b"1", b"a") + b"N" + _tuple(b"1", po.UNCHANGED))
    assert upd.old == [b"1", b"a"] and upd.new == [b"1", po.UNCHANGED] and upd.key is None
    key = po.parse(b"U" + struct.pack("!I", 9) + b"K" + _tuple(b"1", None) + b"N" + _tuple(b"2", b"b"))
    assert key.key == [b"1", None] and key.old is None
    assert po.parse(b"D" + struct.pack("!I", 9) + b"O" + _tuple(b"1", b"a")).old == [b"1", b"a"]
    assert po.parse(b"T" + struct.pack("!ib", 2, 1) + struct.pack("!II", 9, 10)) == po.Truncate([9, 10], True, False)
    msg = po.parse(b"M" + struct.pack("!bQ", 1, 42) + _s("sparksync.tracer") + struct.pack("!i", 2) + b"{}")
    assert msg == po.Message(True, 42, "sparksync.tracer", b"{}")
    assert isinstance(po.parse(b"Y" + b"..."), po.Ignored)


@pytest.mark.parametrize("data", [b"B\x00", b"I" + struct.pack("!I", 1) + b"X", b"Z", b"R\x00\x00\x00\x01abc",
                                  b"D" + struct.pack("!I", 1) + b"N" + _tuple(b"1"), b"U\x00\x00"])
def test_malformed_messages_raise_protocol_errors(data):
    with pytest.raises(po.ProtocolError):
        po.parse(data)


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_lsn_text_round_trip(lsn):
    assert po.lsn_int(po.lsn_text(lsn)) == lsn


def test_value_loaders_are_psycopgs():
    assert po.value_loader(23)(b"42") == 42
    assert po.value_loader(16)(b"t") is True
    assert str(po.value_loader(1700)(b"1.50")) == "1.50"


# -- routing ---------------------------------------------------------------------------------------

def test_a_rows_commands_stay_in_one_stream():
    t = ArticleTarget(1, "v", None, (), ("id",), None, None, None)
    ins = Command(1, 1, 1, "ins", None, json.dumps({"id": 5, "x": 1}), None)
    upd = Command(2, 1, 1, "upd", None, json.dumps({"id": 5, "x": 2}), json.dumps({"id": 5, "x": 1}))
    assert route(t, ins, 4) == route(t, upd, 4)
    assert route(t, ins, 1) == 0
    assert route(t, Command(1, 2, 0, "token", None, "{}", None), 4) == 0
    assert len({route(t, Command(1, 1, 1, "ins", None, json.dumps({"id": i}), None), 4) for i in range(50)}) == 4


# -- servers that cannot decode -------------------------------------------------------------------

class _Server:
    label = "HQ"

    def __init__(self, settings):
        self.settings = settings

    def scalar(self, sql, params=()):
        return self.settings[sql.split()[-1]]


def test_wal_level_and_version_messages():
    old = _Server({"wal_level": "replica", "server_version_num": "140005", "server_version": "14.5"})
    problems = server_problems(old, wants_filters=True)
    assert any("wal_level is 'replica'" in p and "ALTER SYSTEM SET wal_level = logical" in p for p in problems)
    assert any("row filters need PostgreSQL 15 or later (this is 14.5)" in p for p in problems)
    assert server_problems(_Server({"wal_level": "logical", "server_version_num": "150004",
                                    "server_version": "15.4"}), wants_filters=True) == []


def test_slot_names_are_valid_and_distinct():
    a, b = slot_name("db1", "Purchasing"), slot_name("db2", "Purchasing")
    assert a != b and a.startswith("sparksync_purchasing_") and a == a.lower() and len(a) <= 63



def test_continuous_agents_pause_only_after_a_round_that_found_nothing(monkeypatch):
    """A backlog is worked off round after round without pauses; an idle agent waits the polling
    interval; --rounds stops it; without --continuous there is one round."""
    from sparksync.cli import transactional_cmds

    slept: list[float] = []
    monkeypatch.setattr(transactional_cmds.time, "sleep", slept.append)
    rounds = transactional_cmds._Rounds(True, 5.0, 5)
    found = [True, True, False, True, False]
    for n in rounds:
        rounds.busy = found[n]
    assert slept == [5.0]                   # after the third round only (the fifth is the last)
    assert list(transactional_cmds._Rounds(False, 5.0, 0)) == [0]
