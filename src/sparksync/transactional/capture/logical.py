"""PostgreSQL capture: logical decoding with the ``pgoutput`` plugin.

Setup creates, per transactional publication, a PostgreSQL publication over the articles (with
their row filters: an update that moves a row into the filter arrives as an insert, out of it as a
delete) and a logical replication slot. Articles get ``REPLICA IDENTITY FULL``, so every update
and delete carries the row's before image (SCALL's changed columns, XCALL's before image, the
original key). The server needs ``wal_level = logical``.

Reading peeks at the slot (``pg_logical_slot_peek_binary_changes``), which returns only committed
transactions, in commit order, framed by Begin/Commit; ``confirm`` advances the slot past what was
stored, so the server can recycle that part of its log. A transaction that was stored but not
confirmed (a crash in between) is read again and skipped by its position (the commit LSN).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zlib
from collections.abc import Iterator
from typing import Any

from ...dialects.base import Replica, from_table_dict
from ...errors import ConfigurationError, SchemaError, SparksyncError
from ...merge.changes import RowCodec
from ...names import TableName
from ...types import Kind, SqlType
from .. import pgoutput as po
from ..distribution import StoredCommand
from . import Begin, End

TRACER_PREFIX = "sparksync.tracer"
DDL_PREFIX = "sparksync.ddl"
FETCH = 2_000


def slot_name(database: str, publication: str) -> str:
    """A replication slot name (lower case letters, digits, underscores; unique per database and publication)."""
    base = re.sub(r"[^a-z0-9_]", "_", publication.lower())[:32]
    digest = hashlib.sha1(f"{database}/{publication}".encode()).hexdigest()[:10]
    return f"sparksync_{base}_{digest}"


def pg_publication_name(publication: str) -> str:
    return f"sparksync_{publication}"


def server_problems(replica: Replica, wants_filters: bool) -> list[str]:
    """What keeps this server from logical decoding, as messages for the user."""
    problems = []
    level = replica.scalar("SHOW wal_level")
    if level != "logical":
        problems.append(f"{replica.label}: wal_level is '{level}'; transactional publications read the server's log "
                        "by logical decoding, which needs wal_level = logical (ALTER SYSTEM SET wal_level = logical; "
                        "then restart PostgreSQL)")
    version = int(replica.scalar("SHOW server_version_num"))
    if wants_filters and version < 150000:
        problems.append(f"{replica.label}: row filters need PostgreSQL 15 or later (this is "
                        f"{replica.scalar('SHOW server_version')})")
    if version < 140000:
        problems.append(f"{replica.label}: transactional publications need PostgreSQL 14 or later")
    return problems


def slot_exists(replica: Replica, slot: str) -> bool:
    return bool(replica.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)))


def free_slots(replica: Replica) -> int:
    return int(replica.scalar("SELECT current_setting('max_replication_slots')::int - count(*) "
                              "FROM pg_replication_slots"))


def publish(replica: Replica, publication: str, articles: list[tuple[TableName, str | None]]) -> None:
    """Inside a transaction: REPLICA IDENTITY FULL on every article, and the PostgreSQL publication
    over them (with their row filters), created or brought up to date."""
    d = replica.dialect
    name = d.quote(pg_publication_name(publication))
    tables = []
    for table, row_filter in articles:
        t = d.table_sql(table)
        if replica.scalar("SELECT relreplident FROM pg_class WHERE oid = %s::regclass", (t,)) != "f":
            replica.execute(f"ALTER TABLE {t} REPLICA IDENTITY FULL")
        tables.append(f"TABLE {t}" + (f" WHERE ({row_filter})" if row_filter else ""))
    exists = replica.scalar("SELECT count(*) FROM pg_publication WHERE pubname = %s", (pg_publication_name(publication),))
    if exists:
        replica.execute(f"ALTER PUBLICATION {name} SET {', '.join(tables)}")
    else:
        replica.execute(f"CREATE PUBLICATION {name} FOR {', '.join(tables)} "
                        "WITH (publish = 'insert, update, delete, truncate')")


def create_slot(replica: Replica, slot: str) -> None:
    """Outside any transaction (PostgreSQL waits for running transactions to find a consistent start)."""
    if not slot_exists(replica, slot):
        replica.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


def current_lsn(replica: Replica) -> int:
    """The end of the server's log now, as an integer position."""
    return po.lsn_int(replica.scalar("SELECT pg_current_wal_lsn()::text"))


class _Article:
    def __init__(self, row: dict):
        self.id = row["article_id"]
        info = from_table_dict(row["table_schema"])
        self.table = info.name
        self.columns = [c.name for c in info.columns]
        self.types = [c.type for c in info.columns]
        self.key = set(info.primary_key)
        self.codec = RowCodec([(c.name, c.type) for c in info.columns])


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
    return lambda b: codec.value_json(i, load(b))


class _Shape:
    """How one relation's tuples become one article's commands (built when the Relation message comes):
    change messages are decoded here in one pass, straight into the commands' JSON."""

    def __init__(self, art: _Article, cols: list[po.RelationColumn]):
        self.article, self.cols = art, cols
        where = {c.name: i for i, c in enumerate(cols)}
        self.parts = []          # (position in the tuple or None, '"name":', fragment function, is key)
        for i, (name, t) in enumerate(zip(art.columns, art.types)):
            pos = where.get(name)
            frag = _fragment(t, cols[pos].type_oid, art.codec, i) if pos is not None else None
            self.parts.append((pos, _TEXT_JSON(name) + ":", frag, name in art.key))
        self.key_positions = [where[k] for k in art.columns if k in art.key and k in where]

    def row(self, values: list, fallback: list | None = None) -> str:
        out = []
        for pos, name, frag, _ in self.parts:
            v = None if pos is None else values[pos]
            if v is po.UNCHANGED:    # a TOASTed value the update kept: the before image has it
                v = fallback[pos] if fallback is not None and fallback[pos] is not po.UNCHANGED else None
            out.append(name + ("null" if v is None else frag(v)))
        return "{" + ",".join(out) + "}"

    def changed(self, old: list, new: list) -> str:
        """The before image of an update, compact: the key columns and the columns that changed
        (the others are as in the after image)."""
        out = []
        for pos, name, frag, key in self.parts:
            if pos is None:
                continue
            v, n = old[pos], new[pos]
            if key or (n is not po.UNCHANGED and v != n):
                out.append(name + ("null" if v is None else frag(v)))
        return "{" + ",".join(out) + "}"

    def rowhash(self, values: list) -> int:
        """A hash of the row's key as the server writes it (every command of a row gets the same)."""
        return zlib.crc32(b"\x00".join(values[p] or b"" for p in self.key_positions), self.article.id)

    def command(self, buf: bytes, xid: int | None) -> StoredCommand:
        """One Insert / Update / Delete message -> its command."""
        kind, _, old, key, new = po.read_change(buf)
        aid = self.article.id
        if kind == "I":
            return StoredCommand(aid, "ins", xid, self.row(new), None, self.rowhash(new))
        if kind == "D":
            gone = old if old is not None else key
            return StoredCommand(aid, "del", xid, None, self.row(gone), self.rowhash(gone))
        if old is not None:
            before, hashed = self.changed(old, new), old
        elif key is not None:    # without a full before image: the old key, when it changed
            before, hashed = self.row(key), key
        else:
            before, hashed = None, new
        return StoredCommand(aid, "upd", xid, self.row(new, old), before, self.rowhash(hashed))


_INSERT, _UPDATE, _DELETE = ord("I"), ord("U"), ord("D")


class LogicalCapture:
    def __init__(self, replica: Replica, publication, articles: list[dict], read_batch: int):
        if not publication.slot:
            raise ConfigurationError(f"publication {publication.name}: no replication slot recorded; run 'sparksync setup'")
        self.replica = replica
        self.publication = publication
        self.read_batch_changes = max(1, int(read_batch))
        self.by_table = {(a.table.schema, a.table.name): a for a in map(_Article, articles)}
        self.relations: dict[int, _Shape | None] = {}
        self._pending_end: int | None = None

    def read_batch(self, after: int | None) -> Iterator[Any]:
        r = self.replica
        if not slot_exists(r, self.publication.slot):
            raise SchemaError(f"publication {self.publication.name}: replication slot {self.publication.slot} is "
                              f"missing at {r.label}; run 'sparksync setup' (subscriptions must be reinitialized)")
        self._pending_end = None
        self.relations = {}    # each peek is a new decoding session: relations are sent again
        raw = r.raw
        try:
            raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            with raw.cursor(name="sparksync_logreader") as cur:
                cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, 'proto_version', '1', "
                            "'publication_names', %s, 'messages', 'true')",
                            (self.publication.slot, self.read_batch_changes,
                             r.dialect.quote(self.publication.pg_publication)))   # an identifier list: quoted
                yield from self._events(cur, after)
            raw.execute("COMMIT")
        except SparksyncError:
            self._rollback()
            raise
        except Exception as exc:  # noqa: BLE001
            self._rollback()
            raise r.dialect.translate_error(exc, f"{r.label}: read slot {self.publication.slot}") from exc

    def _rollback(self) -> None:
        try:
            self.replica.raw.execute("ROLLBACK")
        except Exception:  # noqa: BLE001
            pass

    def _events(self, cur, after: int | None) -> Iterator[Any]:
        skip = False
        xid = None
        open_txn = False
        while True:
            rows = cur.fetchmany(FETCH)
            if not rows:
                break
            for (data,) in rows:
                first = data[0]
                if first == _UPDATE or first == _INSERT or first == _DELETE:     # the common case, fast
                    if not skip:
                        shape = self.relations.get(struct.unpack_from("!I", data, 1)[0])
                        if shape is not None:
                            yield shape.command(bytes(data), xid)
                    continue
                m = po.parse(data)
                if isinstance(m, po.Begin):
                    skip = after is not None and m.final_lsn <= after
                    xid = m.xid
                    if not skip:
                        open_txn = True
                        yield Begin(m.final_lsn, str(m.xid), m.commit_time)
                elif isinstance(m, po.Commit):
                    self._pending_end = m.end_lsn
                    if not skip:
                        open_txn = False
                        yield End()
                elif isinstance(m, po.Relation):
                    art = self.by_table.get((m.namespace, m.name))
                    self.relations[m.relid] = _Shape(art, m.columns) if art is not None else None
                elif skip:
                    continue
                else:
                    yield from self._commands(m, xid)
        if open_txn:   # the slot always returns whole transactions; anything else is a server bug
            raise SparksyncError(f"{self.replica.label}: slot {self.publication.slot} returned an unfinished transaction")

    def _commands(self, m: Any, xid: int | None) -> Iterator[StoredCommand]:
        """Commands of the messages that are not row changes: TRUNCATE, tracer tokens, schema changes."""
        if isinstance(m, po.Truncate):
            for relid in m.relids:
                shape = self.relations.get(relid)
                if shape is not None:
                    yield StoredCommand(shape.article.id, "trunc", xid, None, None)
        elif isinstance(m, po.Message):
            content = json.loads(m.content.decode("utf-8")) if m.content else {}
            if content.get("publication") != self.publication.name:
                return
            if m.prefix == TRACER_PREFIX:
                yield StoredCommand(0, "token", xid, json.dumps(content), None)
            elif m.prefix == DDL_PREFIX:
                # later changes of the article carry its new columns
                art = _Article({"article_id": content["article_id"], "table_schema": content["table_schema"]})
                self.by_table[(art.table.schema, art.table.name)] = art
                for relid, shape in list(self.relations.items()):
                    if shape is not None and shape.article.id == art.id:
                        self.relations[relid] = _Shape(art, shape.cols)
                yield StoredCommand(art.id, "ddl", xid, json.dumps(content), None)

    def horizon(self) -> int:
        """The end of the server's log now: a run that started here stops once it gets there."""
        return current_lsn(self.replica)

    def confirm(self) -> bool:
        """Advance the slot past the last transaction read (stored or skipped). False: nothing was read."""
        if self._pending_end is None:
            return False
        self.replica.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                             (self.publication.slot, po.lsn_text(self._pending_end)))
        self._pending_end = None
        return True
