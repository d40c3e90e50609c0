"""A PostgreSQL publisher's stored changes decoded: in the distribution agent's tasks, not in the log reader.

The log reader stores each row change as the server sent it (the pgoutput Insert / Update / Delete
message), with the *shape* that decodes it: the Relation message the server sent before it and the
article's columns in effect at that point of the log (``MSrepl_shapes``; a schema change makes a new
shape, and changes made before it keep theirs; the stored form is ``capture/shapes.py``'s). Each
subscription's task decodes its own commands, in parallel with the others, and only as far as its
subscriber needs: a PostgreSQL subscriber's set-based apply takes the values in the server's text form
as they are (:meth:`RawChange.tuples`, into ``COPY``); JSON images (what a SQLite subscriber, a
procedure call or a command-by-command retry binds) are made from a message the first time a command's
``after`` or ``before`` is read.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

from sparksync.dialects.model import from_table_dict
from sparksync.dialects.postgres import pgoutput as po
from sparksync.errors import SchemaError
from sparksync.rows import VERBATIM_KINDS, RowCodec
from sparksync.transactional.capture.shapes import CHUNK_LENGTH, OPERATIONS, NoBeforeImage, ShapeDef
from sparksync.transactional.delivery.subscriber import Command
from sparksync.types import Kind, SqlType

_TEXT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_INT_KINDS = (Kind.SMALLINT, Kind.INTEGER, Kind.BIGINT)


def _fragment(t: SqlType, type_oid: int, codec: RowCodec, i: int):
    """A function: PostgreSQL's text form of a value -> its JSON, as RowCodec.encode writes it. Integers,
    booleans, text and UUIDs go straight from the text form; other types through psycopg's loader and
    the codec's conversion (decimals, timestamps, bytes...)."""
    if t.kind in _INT_KINDS:
        return bytes.decode
    if t.kind is Kind.BOOLEAN:
        return lambda b: "true" if b == b"t" else "false"
    if t.kind is Kind.TEXT:
        return lambda b: _TEXT_JSON(b.decode("utf-8"))
    if t.kind is Kind.UUID:
        return lambda b: '"' + b.decode("ascii") + '"'
    load = po.value_loader(type_oid)
    verbatim = t.kind in VERBATIM_KINDS

    def fragment(b: bytes) -> str:
        if verbatim and b.endswith(b" BC"):        # psycopg would read it as the same date AD
            return _TEXT_JSON(b.decode("utf-8"))
        try:
            return codec.value_json(i, load(b))
        except Exception:  # noqa: BLE001 - psycopg's loader or the codec: a value Python cannot hold
            if not verbatim:
                raise
            return _TEXT_JSON(b.decode("utf-8"))     # PostgreSQL's own text form ('infinity', 'NaN', BC...)

    return fragment


class Shape:
    """How one relation's messages become one article's commands: positions of the article's columns
    in the relation's tuples, and (made on first use) each column's JSON fragment function."""

    def __init__(self, d: ShapeDef):
        info = from_table_dict(d.table_schema)
        self.article_id = d.article_id
        self.table = str(info.name)
        self.columns = [c.name for c in info.columns]
        self.types = [c.type for c in info.columns]
        self.key = set(info.primary_key)
        relation = po.parse(d.relation)
        if not isinstance(relation, po.Relation):
            raise po.ProtocolError(f"shape {d.shape_id}: not a Relation message")
        self.cols = relation.columns
        where = {c.name: i for i, c in enumerate(self.cols)}
        # per article column: its position in the relation's tuples (None: the relation lacks it)
        self.positions: list[int | None] = [where.get(name) for name in self.columns]
        self.key_positions = [where[k] for k in self.columns if k in self.key and k in where]
        self.key_last = max(self.key_positions, default=-1)
        self._parts: list[tuple[Any, str, Any, bool]] | None = None

    def _json_parts(self) -> list[tuple[Any, str, Any, bool]]:
        """(position, '"name":', fragment function, is key) per article column."""
        if self._parts is None:
            codec = RowCodec(list(zip(self.columns, self.types)))
            self._parts = [(pos, _TEXT_JSON(name) + ":",
                            _fragment(t, self.cols[pos].type_oid, codec, i) if pos is not None else None,
                            name in self.key)
                           for i, (name, t, pos) in enumerate(zip(self.columns, self.types, self.positions))]
        return self._parts

    def row(self, values: Sequence, fallback: Sequence | None = None) -> str:
        out = []
        for pos, name, frag, _ in self._json_parts():
            v = None if pos is None else values[pos]
            if v is po.UNCHANGED:    # a TOASTed value the update kept: the before image has it
                v = fallback[pos] if fallback is not None and fallback[pos] is not po.UNCHANGED else None
            out.append(name + ("null" if v is None else frag(v)))
        return "{" + ",".join(out) + "}"

    def changed(self, old: Sequence, new: Sequence) -> str:
        """The before image of an update, compact: the key columns and the columns that changed
        (the others are as in the after image)."""
        out = []
        for pos, name, frag, key in self._json_parts():
            if pos is None:
                continue
            v, n = old[pos], new[pos]
            if key or (n is not po.UNCHANGED and v != n):
                out.append(name + ("null" if v is None else frag(v)))
        return "{" + ",".join(out) + "}"

    def rowhash(self, values: Sequence) -> int:
        """A hash of the row's key as the server writes it (every command of a row gets the same)."""
        return zlib.crc32(b"\x00".join(values[p] or b"" for p in self.key_positions), self.article_id)


class RawChange:
    """One stored change message and its shape; its tuples are read once, on first use."""

    __slots__ = ("shape", "data", "_tuples")

    def __init__(self, shape: Shape, data: bytes):
        self.shape, self.data = shape, data
        self._tuples: tuple[list | None, list | None] | None = None

    def tuples(self) -> tuple[list | None, list | None]:
        """(old tuple, new tuple) in the server's text form; None where the message has none."""
        if self._tuples is None:
            kind, _, old, _, new = po.read_change(self.data)
            if old is None and kind != "I":
                raise NoBeforeImage("update" if kind == "U" else "delete", self.shape.table)
            self._tuples = (old, new)
        return self._tuples

    def images(self) -> tuple[str | None, str | None, int]:
        """(after, before, rowhash) as the commands' JSON images."""
        old, new = self.tuples()
        s = self.shape
        if new is not None and old is None:
            return s.row(new), None, s.rowhash(new)
        if new is None:
            assert old is not None
            return None, s.row(old), s.rowhash(old)
        assert old is not None
        return s.row(new, old), s.changed(old, new), s.rowhash(old)

    def rowhash(self) -> int:
        """The shape's rowhash of the row's key before the change (after it, for an insert), read from the
        message's first tuple only as far as the key's last column (a route needs no more)."""
        s, d = self.shape, self.data
        if self._tuples is not None or not s.key_positions:
            old, new = self.tuples()
            values = old if old is not None else new
            assert values is not None
            return s.rowhash(values)
        return s.rowhash(po.read_tuple(d, 6, limit=s.key_last + 1)[0])   # (the first tuple: old, or an insert's new)


class Decoder:
    """A task's decoder: the publication's shapes, each made into a :class:`Shape` on first use."""

    def __init__(self, shapes: dict[str, ShapeDef]):
        self.defs = shapes
        self.shapes: dict[str, Shape] = {}

    def shape(self, shape_id: str) -> Shape:
        s = self.shapes.get(shape_id)
        if s is None:
            d = self.defs.get(shape_id)
            if d is None:
                raise SchemaError(f"stored change of shape {shape_id}: no such shape in MSrepl_shapes (the "
                                  "distribution database was changed by hand?)", obj=shape_id)
            s = self.shapes[shape_id] = Shape(d)
        return s

    def commands(self, row: Sequence) -> Iterator[Command]:
        """A command row as the agent reads it (xact_seqno, command_id, article_id, type, origin, after,
        before, rowhash, data, shape) -> its commands: one, or (``rows``: a PostgreSQL publisher's row
        changes, each message behind its length) one per message, numbered from the row's command_id."""
        data = row[8]
        if data is None:
            yield Command(*row[:8])
            return
        xact, cid, aid, _, origin = row[:5]
        shape = self.shape(row[9])
        blob = bytes(data)
        pos, end = 0, len(blob)
        unpack, ops = CHUNK_LENGTH.unpack_from, OPERATIONS
        try:
            while pos < end:
                (n,) = unpack(blob, pos)
                pos += 4
                msg = blob[pos:pos + n]
                pos += n
                if len(msg) != n:
                    raise IndexError
                yield Command(xact, cid, aid, ops[msg[0]], origin, change=RawChange(shape, msg))
                cid += 1
        except (struct.error, IndexError, KeyError):
            raise po.ProtocolError(f"stored command {cid} of transaction {xact} (article {aid}) is damaged: it is not "
                                   "a sequence of row change messages", obj=shape.table) from None
