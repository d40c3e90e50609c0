"""PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1), parsed.

The log reader streams a replication slot (``replication_stream.py``; the merge capture peeks at its
own with ``pg_logical_slot_peek_binary_changes(...)``): one message per row, in commit order, only
committed transactions, each framed by Begin and Commit.
Formats: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html
Column values arrive in PostgreSQL's text format; :func:`value_loader` turns them into Python
values with psycopg's own loaders, chosen by the column's type OID from the Relation message.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparksync.errors import SchemaError

PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


class Unchanged:
    """A TOASTed value the update did not change (not sent: take it from the old tuple)."""

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return "UNCHANGED"


UNCHANGED = Unchanged()
Value = bytes | None | Unchanged


@dataclass
class Begin:
    final_lsn: int
    commit_time: dt.datetime
    xid: int


@dataclass
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_time: dt.datetime


@dataclass
class RelationColumn:
    key: bool
    name: str
    type_oid: int
    typmod: int


@dataclass
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str
    columns: list[RelationColumn] = field(default_factory=list)


@dataclass
class Insert:
    relid: int
    new: list[Value]


@dataclass
class Update:
    relid: int
    new: list[Value]
    old: list[Value] | None = None      # REPLICA IDENTITY FULL: every column before the update
    key: list[Value] | None = None      # the old key, when the key changed (default identity)


@dataclass
class Delete:
    relid: int
    old: list[Value] | None = None
    key: list[Value] | None = None


@dataclass
class Truncate:
    relids: list[int]
    cascade: bool
    restart_identity: bool


@dataclass
class Message:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


@dataclass
class Ignored:
    kind: str


class ProtocolError(SchemaError, ValueError):
    """A pgoutput message that cannot be read: damaged (a stored change changed by hand, a truncated
    file), or of a protocol version this reader does not know."""

    def __init__(self, message: str, *, obj: str | None = None):
        super().__init__(f"pgoutput: {message}", obj=obj)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def byte(self) -> str:
        b = self.buf[self.pos:self.pos + 1]
        if not b:
            raise ProtocolError("message ends early")
        self.pos += 1
        return chr(b[0])

    def _unpack(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.buf):
            raise ProtocolError("message ends early")
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def int8(self) -> int:
        return self._unpack("!b", 1)

    def int16(self) -> int:
        return self._unpack("!h", 2)

    def int32(self) -> int:
        return self._unpack("!i", 4)

    def uint32(self) -> int:
        return self._unpack("!I", 4)

    def uint64(self) -> int:
        return self._unpack("!Q", 8)

    def string(self) -> str:
        end = self.buf.find(b"\x00", self.pos)
        if end < 0:
            raise ProtocolError("unterminated string")
        s = self.buf[self.pos:end].decode("utf-8")
        self.pos = end + 1
        return s

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise ProtocolError("message ends early")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(b)


_I16, _I32, _U32 = struct.Struct("!h"), struct.Struct("!i"), struct.Struct("!I")
BEGIN, COMMIT = struct.Struct("!QqI"), struct.Struct("!QQq")      # after the tag (Commit: and its flags byte)
BEGIN_LENGTH, COMMIT_LENGTH = 1 + BEGIN.size, 2 + COMMIT.size
_T, _B, _N, _U = ord("t"), ord("b"), ord("n"), ord("u")


_UNPACK_U32 = _U32.unpack_from


def read_tuple(buf: bytes, pos: int, null: Any = None, unchanged: Any = UNCHANGED,
               convert: Callable[[bytes], Any] | None = None, limit: int | None = None) -> tuple[list, int]:
    """TupleData at ``pos`` -> (values, position after it). The hot loop of decoding. A value is its
    bytes (``convert``-ed when given), ``null`` for NULL, ``unchanged`` for a TOASTed value an update
    kept. ``limit``: read only the first columns (the position returned is then inside the tuple)."""
    try:
        n = (buf[pos] << 8) | buf[pos + 1]
        if limit is not None and limit < n:
            n = limit
        pos += 2
        out: list = []
        append = out.append
        for _ in range(n):
            kind = buf[pos]
            if kind in (_T, _B):
                ln = _UNPACK_U32(buf, pos + 1)[0]
                pos += 5
                append(buf[pos:pos + ln] if convert is None else convert(buf[pos:pos + ln]))
                pos += ln
            elif kind == _N:
                append(null)
                pos += 1
            elif kind == _U:
                append(unchanged)
                pos += 1
            else:
                raise ProtocolError(f"unknown tuple value kind {chr(kind)!r}")
    except (struct.error, IndexError):
        raise ProtocolError("message ends early") from None
    if pos > len(buf):
        raise ProtocolError("message ends early")
    return out, pos


_O, _K, _NEW = ord("O"), ord("K"), ord("N")


def read_change(buf: bytes, null: Any = None, unchanged: Any = UNCHANGED, convert: Callable[[bytes], Any] | None = None
                ) -> tuple[str, int, list | None, list | None, list | None]:
    """An Insert / Update / Delete message -> (kind "I" | "U" | "D", relation id, old tuple, old key,
    new tuple); what the message does not carry is None. The hot path of decoding; ``null``,
    ``unchanged`` and ``convert`` as :func:`read_tuple` takes them."""
    if len(buf) < 6:
        raise ProtocolError("message ends early")
    kind = chr(buf[0])
    relid = _UNPACK_U32(buf, 1)[0]
    tag, pos = buf[5], 6
    old = key = None
    if kind == "D":
        if tag != _O and tag != _K:
            raise ProtocolError("delete without an old tuple or key")
        values = read_tuple(buf, pos, null, unchanged, convert)[0]
        return kind, relid, values if tag == _O else None, values if tag == _K else None, None
    if kind == "U" and tag in (_O, _K):
        values, pos = read_tuple(buf, pos, null, unchanged, convert)
        old, key = (values, None) if tag == _O else (None, values)
        if pos >= len(buf):
            raise ProtocolError("message ends early")
        tag, pos = buf[pos], pos + 1
    if tag != _NEW:
        raise ProtocolError(f"{'insert' if kind == 'I' else 'update'} without a new tuple")
    return kind, relid, old, key, read_tuple(buf, pos, null, unchanged, convert)[0]


def parse(data: bytes) -> Any:
    """One pgoutput message (bytes) -> Begin | Commit | Relation | Insert | Update | Delete | Truncate |
    Message | Ignored (origin, type)."""
    buf = bytes(data)
    if not buf:
        raise ProtocolError("empty message")
    kind = chr(buf[0])
    if kind in "IUD":             # row changes: the common case, parsed without a reader object
        _, relid, old, key, new = read_change(buf)
        if kind == "D":
            return Delete(relid, old, key)
        assert new is not None            # read_change refuses an insert or update without one
        if kind == "I":
            return Insert(relid, new)
        return Update(relid, new, old, key)
    if kind == "B" and len(buf) >= BEGIN_LENGTH:
        lsn, micros, xid = BEGIN.unpack_from(buf, 1)
        return Begin(lsn, PG_EPOCH + dt.timedelta(microseconds=micros), xid)
    if kind == "C" and len(buf) >= COMMIT_LENGTH:
        commit, end, micros = COMMIT.unpack_from(buf, 2)
        return Commit(commit, end, PG_EPOCH + dt.timedelta(microseconds=micros))
    r = _Reader(buf)
    r.byte()
    if kind == "R":
        rel = Relation(r.uint32(), r.string(), r.string(), r.byte())
        for _ in range(r.int16()):
            flags = r.int8()
            rel.columns.append(RelationColumn(bool(flags & 1), r.string(), r.uint32(), r.int32()))
        return rel
    if kind == "T":
        n = r.int32()
        options = r.int8()
        return Truncate([r.uint32() for _ in range(n)], bool(options & 1), bool(options & 2))
    if kind == "M":
        flags = r.int8()
        lsn = r.uint64()
        prefix = r.string()
        return Message(bool(flags & 1), lsn, prefix, r.raw(r.int32()))
    if kind == "O":
        return Ignored("origin")
    if kind == "Y":
        return Ignored("type")
    raise ProtocolError(f"unknown pgoutput message {kind!r}")


def value_loader(type_oid: int) -> Callable[[bytes], Any]:
    """A function turning a text-format value of type ``type_oid`` into a Python value (psycopg's loader)."""
    from psycopg import adapt, pq

    loader = adapt.Transformer().get_loader(type_oid, pq.Format.TEXT)
    return loader.load


def lsn_text(lsn: int) -> str:
    """1234567 -> '0/12D687' (how PostgreSQL writes an LSN)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)
