"""Decoding a PostgreSQL publisher's stored messages without a server: random Insert / Update / Delete
messages of a relation whose key is not its first column. The route's rowhash read from the first
columns only equals the hash of the fully decoded key; a chunk as the log reader stores it comes
back as its commands, numbered from the row's command_id; the COPY fields of the text staging are the
decoded values, escaped."""

from __future__ import annotations

import random
import struct

import pytest

from sparksync.dialects.postgres import pgoutput as po
from sparksync.transactional.capture.logical import _Chunk
from sparksync.transactional.capture.shapes import ShapeDef
from sparksync.transactional.delivery.bulk_text import NULL, _escape, _fields
from sparksync.transactional.delivery.decoding import Decoder, RawChange, Shape

COLUMNS = (("a", "text", 25), ("id", "integer", 23), ("b", "text", 25), ("id2", "integer", 23))
SCHEMA = {"schema": "public", "name": "T", "primary_key": ["id", "id2"], "foreign_keys": [],
          "columns": [{"name": n, "type": {"kind": k}, "nullable": True} for n, k, _ in COLUMNS]}


def _relation() -> bytes:
    rel = b"R" + struct.pack("!I", 5) + b"public\x00T\x00f" + struct.pack("!h", len(COLUMNS))
    for name, _, oid in COLUMNS:
        rel += b"\x01" + name.encode() + b"\x00" + struct.pack("!Ii", oid, -1)
    return rel


def _tuple(values: list) -> bytes:
    out = struct.pack("!h", len(values))
    for v in values:
        out += b"n" if v is None else b"t" + struct.pack("!i", len(v)) + v
    return out


def _messages(seed: int, n: int = 500) -> list[tuple[bytes, list, list | None]]:
    """(message, its first tuple's values, the new tuple's values or None)."""
    rng = random.Random(seed)
    text = [None, b"", b"x\ty", b"back\\slash", b"new\nline", b"\x09" * 9, b"plain", "ünï".encode()]
    out = []
    for _ in range(n):
        old = [rng.choice(text), str(rng.randint(-99, 99)).encode(), rng.choice(text), str(rng.randint(1, 9)).encode()]
        new = [rng.choice(text), old[1], rng.choice(text), old[3]]
        kind = rng.choice("IUD")
        head = kind.encode() + struct.pack("!I", 5)
        if kind == "I":
            out.append((head + b"N" + _tuple(new), new, new))
        elif kind == "U":
            out.append((head + b"O" + _tuple(old) + b"N" + _tuple(new), old, new))
        else:
            out.append((head + b"O" + _tuple(old), old, None))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_routes_rowhash_reads_only_the_key(seed):
    shape = Shape(ShapeDef.make(1, _relation(), SCHEMA))
    for msg, first, _ in _messages(seed):
        full = RawChange(shape, msg)
        full.tuples()
        assert RawChange(shape, msg).rowhash() == full.rowhash() == shape.rowhash(first)


@pytest.mark.parametrize("seed", [4, 5])
def test_a_chunk_comes_back_as_its_commands(seed):
    sd = ShapeDef.make(1, _relation(), SCHEMA)
    rel = type("Rel", (), {"article_id": 1, "shape_id": sd.shape_id})()
    chunk = _Chunk()
    chunk.rel = rel
    messages = _messages(seed, 50)
    for msg, _, _ in messages:
        chunk.add(msg)
    (stored,) = list(chunk.take(77))
    assert stored.type == "rows" and stored.changes == 50 and not list(chunk.take(77))
    row = (900, 11, stored.article_id, stored.type, stored.origin, None, None, None, stored.data, stored.shape)
    commands = list(Decoder({sd.shape_id: sd}).commands(row))
    assert [c.command_id for c in commands] == list(range(11, 61))
    assert [c.type for c in commands] == [{"I": "ins", "U": "upd", "D": "del"}[chr(m[0])] for m, _, _ in messages]
    assert [c.change.data for c in commands] == [m for m, _, _ in messages]


@pytest.mark.parametrize("seed", [6, 7])
def test_copy_fields_are_the_decoded_values_escaped(seed):
    for msg, _, _ in _messages(seed):
        old_f, new_f = _fields(msg)
        kind, _, old, _, decoded_new = po.read_change(msg)
        field = lambda v: NULL if v is None else _escape(v)  # noqa: E731
        assert new_f == (None if decoded_new is None else [field(v) for v in decoded_new])
        assert old_f == (None if old is None else [field(v) for v in old])
        assert all(b"\t" not in f and b"\n" not in f for f in (new_f or []) + (old_f or []))
