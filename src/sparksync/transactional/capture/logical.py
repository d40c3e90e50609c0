"""PostgreSQL capture: logical decoding with the ``pgoutput`` plugin.

Setup creates, per transactional publication, a PostgreSQL publication over the articles (with
their row filters: an update that moves a row into the filter arrives as an insert, out of it as a
delete) and a logical replication slot. Articles get ``REPLICA IDENTITY FULL``, so every update
and delete carries the row's before image (SCALL's changed columns, XCALL's before image, the
original key). The server needs ``wal_level = logical``.

Reading streams the slot over a replication connection (``dialects/postgres/replication_stream.py``:
the walsender decodes while the log reader stores), which sends only committed transactions, in
commit order, framed by Begin/Commit. A run first commits a marker into the log (:meth:`horizon`):
it reads up to that marker and stops, in batches of whole transactions; ``confirm`` tells the server
(a standby status update) that everything up to the last stored commit may be recycled. A
transaction that was stored but not confirmed (a crash in between) is read again and skipped by its
position (the commit LSN).

Row changes are not decoded here: consecutive changes of one transaction and one relation are stored
as one ``rows`` command holding the server's messages (each behind its length), with the shape that
decodes them (the Relation message and the article's columns then: ``shapes.ShapeDef``). The
distribution agent's tasks decode them (``delivery/decoding.py``). What the log reader still reads of a change:
its relation (which article, which shape) and one tag byte (is the before image there).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, NoReturn

import sparksync.dialects.postgres.pgoutput as po
from sparksync.dialects.model import TableInfo, from_table_dict
from sparksync.dialects.postgres.replication_stream import ReplicationStream
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, SchemaError, SparksyncError
from sparksync.filters import RowFilter
from sparksync.metadata import store
from sparksync.metadata.records import DistArticleRow
from sparksync.names import TableName
from sparksync.progress import Reporter
from sparksync.transactional.capture.model import Begin, End, StoredCommand
from sparksync.transactional.capture.shapes import (
    CHUNK_BYTES,
    CHUNK_CHANGES,
    CHUNK_LENGTH,
    NoBeforeImage,
    ShapeDef,
    before_image_missing,
)

TRACER_PREFIX = "sparksync.tracer"
DDL_PREFIX = "sparksync.ddl"
HORIZON_PREFIX = "sparksync.horizon"
MARKER_PREFIXES = {"token": TRACER_PREFIX, "ddl": DDL_PREFIX}
# The walsender's session: values are stored in the text form it writes them in, and read by psycopg's
# loaders and by COPY at PostgreSQL subscribers; a transaction bigger than logical_decoding_work_mem
# (64MB by default, ~500,000 narrow rows) is spilled to disk and read back: the log reader may use more.
STREAM_SETTINGS = {"datestyle": "ISO", "intervalstyle": "postgres", "extra_float_digits": "3", "bytea_output": "hex",
                   "logical_decoding_work_mem": "256MB"}
XIP_WAIT_SECONDS = 600          # how long a snapshot waits for transactions that were running when it began


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
        for relation in not_full_identity(replica, [table]):
            replica.execute(f"ALTER TABLE {relation} REPLICA IDENTITY FULL")
        tables.append(f"TABLE {t}" + (f" WHERE ({row_filter})" if row_filter else ""))
    exists = replica.scalar("SELECT count(*) FROM pg_publication WHERE pubname = %s", (pg_publication_name(publication),))
    # A partitioned table's changes are published under its own name, not its partitions' (which are
    # not articles).
    options = "publish = 'insert, update, delete, truncate', publish_via_partition_root = true"
    if exists:
        replica.execute(f"ALTER PUBLICATION {name} SET {', '.join(tables)}")
        replica.execute(f"ALTER PUBLICATION {name} SET ({options})")
    else:
        replica.execute(f"CREATE PUBLICATION {name} FOR {', '.join(tables)} WITH ({options})")


def not_full_identity(replica: Replica, tables: list[TableName]) -> list[str]:
    """The articles' tables, and their partitions, whose REPLICA IDENTITY is not FULL (their updates
    and deletes would carry only the key: no before image for SCALL's changed columns or XCALL)."""
    d = replica.dialect
    out = []
    for table in tables:
        # the table itself, and (a partitioned table) every partition below it
        out += [r for (r,) in replica.query(
            "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relreplident <> 'f' AND c.relkind IN ('r', 'p') "
            "AND (c.oid = %s::regclass OR c.oid IN (SELECT relid FROM pg_partition_tree(%s::regclass))) "
            "ORDER BY c.relkind DESC, 1", (d.table_sql(table), d.table_sql(table)))]
    return out


def create_slot(replica: Replica, slot: str) -> None:
    """Outside any transaction (PostgreSQL waits for running transactions to find a consistent start)."""
    if not slot_exists(replica, slot):
        replica.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


def current_lsn(replica: Replica) -> int:
    """The end of the server's log now, as an integer position."""
    return po.lsn_int(replica.scalar("SELECT pg_current_wal_lsn()::text"))


class _Article:
    def __init__(self, article_id: int, table_schema: dict):
        self.id = article_id
        self.table_schema = table_schema
        self.table = from_table_dict(table_schema).name


class _Relation:
    """A relation the server described in this decoding session that is an article: the shape its
    changes are stored with."""

    __slots__ = ("article_id", "table", "message", "shape_id")

    def __init__(self, art: _Article, message: bytes, shape: ShapeDef):
        self.article_id, self.table, self.message, self.shape_id = art.id, str(art.table), message, shape.shape_id


_INSERT, _UPDATE, _DELETE, _BEGIN, _COMMIT = ord("I"), ord("U"), ord("D"), ord("B"), ord("C")


class _Chunk:
    """Consecutive row changes of one transaction and one shape, stored as one ``rows`` command
    (``shapes.CHUNK_LENGTH``: each message behind its length)."""

    def __init__(self) -> None:
        self.rel: _Relation | None = None
        self.parts: list[bytes] = []
        self.n = self.size = 0

    def add(self, data: bytes) -> None:
        self.parts += (CHUNK_LENGTH.pack(len(data)), data)
        self.n += 1
        self.size += len(data)

    def full(self) -> bool:
        return self.n >= CHUNK_CHANGES or self.size >= CHUNK_BYTES

    def take(self, xid: int | None) -> Iterator[StoredCommand]:
        if self.n:
            rel = self.rel
            assert rel is not None
            yield StoredCommand(rel.article_id, "rows", xid, None, None, None, b"".join(self.parts), rel.shape_id,
                                self.n)
            self.parts, self.n, self.size = [], 0, 0


def identity_advice(publication: str) -> str:
    """How to recover from a REPLICA IDENTITY that was changed after setup (docs/failures.md)."""
    return (f"run 'sparksync setup' to put REPLICA IDENTITY FULL back; the updates and deletes made meanwhile are in "
            f"the log without their before image, so the log reader stops at the first of them until every "
            f"subscription of {publication} is reinitialized ('sparksync reinit -s NAME': their new snapshots "
            "hold those changes), then passes them")


class LogicalCapture:
    def __init__(self, replica: Replica, publication, articles: list[DistArticleRow], read_batch: int,
                 needed_by: Callable[[int, int | None], list[str]] | None = None):
        if not publication.slot:
            raise ConfigurationError(f"publication {publication.name}: no replication slot recorded; run 'sparksync setup'")
        self.replica = replica
        self.publication = publication
        self.read_batch_changes = max(1, int(read_batch))
        arts = (_Article(a.article_id, a.table_schema) for a in articles)
        self.by_table = {(a.table.schema, a.table.name): a for a in arts}
        self.relations: dict[int, _Relation | str] = {}   # relation id -> its shape, or the name of a non-article
        self._pending_end: int | None = None
        self.needed_by = needed_by
        self._marker: str | None = None
        self.caught_up = False          # the last batch read the horizon's marker: the run is done
        self._stream = ReplicationStream(replica.url, replica.label, publication.slot, {
            "proto_version": "1", "messages": "true",
            "publication_names": replica.dialect.quote(publication.pg_publication)},   # an identifier list
            STREAM_SETTINGS)
        changed = not_full_identity(replica, [a.table for a in self.by_table.values()])
        if changed:
            raise SchemaError(f"publication {publication.name}: REPLICA IDENTITY of {', '.join(changed)} is no longer "
                              "FULL (it was changed after setup), so its updates and deletes lose their before image: "
                              f"{identity_advice(publication.name)}", obj=publication.name)

    def read_batch(self, after: int | None) -> Iterator[Any]:
        """The next whole transactions after ``after`` from the slot's stream: at least ``read_batch``
        changes, or up to the horizon (:meth:`horizon`; posted now if it was not): ``caught_up`` then."""
        if self._marker is None:
            self.horizon()
        self._pending_end = None
        stream = self._stream
        if not stream.is_open:
            r = self.replica
            if not slot_exists(r, self.publication.slot):
                raise SchemaError(f"publication {self.publication.name}: replication slot {self.publication.slot} "
                                  f"is missing at {r.label}; run 'sparksync setup' (subscriptions must be "
                                  "reinitialized)")
            stream.open()
            self.relations = {}    # a new stream is a new decoding session: relations are sent again
        ended = False
        try:
            yield from self._events(stream.messages(), after)
            ended = True
        finally:
            if not ended:
                # a failure, or a consumer that stopped early (GeneratorExit): the stream is cut where it
                # is, and nothing is confirmed (what was read may not be stored)
                self._pending_end = None
                stream.abort()

    def close(self, clean: bool = True) -> None:
        """End the stream (the slot is released at the confirmed position); not ``clean``: cut it."""
        if clean:
            self._stream.close()
        else:
            self._stream.abort()

    def _events(self, messages: Iterator[bytes], after: int | None) -> Iterator[Any]:
        """The batch's events from the stream (endless: it returns after a Commit, or raises)."""
        skip = False
        xid = None
        final_lsn = 0
        chunk = _Chunk()
        changes = 0
        limit = self.read_batch_changes
        for data in messages:
            first = data[0]
            if first in (_UPDATE, _INSERT, _DELETE):     # the common case, fast: stored undecoded
                if not skip:
                    rel = self.relations.get(struct.unpack_from("!I", data, 1)[0])
                    if not isinstance(rel, _Relation):
                        self._unknown(rel)
                    missing = before_image_missing(data) if first != _INSERT else None
                    if missing is not None:
                        self._without_before_image(NoBeforeImage(missing, rel.table), final_lsn, xid)
                        continue             # passed over: every subscription's snapshot holds it
                    if chunk.rel is not rel or chunk.full():
                        yield from chunk.take(xid)
                        chunk.rel = rel
                    chunk.add(data)
                    changes += 1
                continue
            yield from chunk.take(xid)
            if first == _BEGIN and len(data) >= po.BEGIN_LENGTH:      # a transaction each: also fast
                final_lsn, micros, xid = po.BEGIN.unpack_from(data, 1)
                skip = after is not None and final_lsn <= after
                if not skip:
                    yield Begin(final_lsn, str(xid), po.PG_EPOCH + timedelta(microseconds=micros))
                continue
            if first == _COMMIT and len(data) >= po.COMMIT_LENGTH:
                self._pending_end = po.COMMIT.unpack_from(data, 2)[1]
                if not skip:
                    yield End()
                if changes >= limit or self.caught_up:
                    return              # a batch ends between transactions
                continue
            m = po.parse(data)
            if isinstance(m, po.Relation):
                art = self.by_table.get((m.namespace, m.name))
                if art is None:
                    self.relations[m.relid] = f"{m.namespace}.{m.name}"
                else:
                    yield from self._relation(m.relid, art, bytes(data))
            elif skip:
                continue
            else:
                yield from self._commands(m, xid)

    def _relation(self, relid: int, art: _Article, message: bytes) -> Iterator[ShapeDef]:
        """A relation that is an article: its changes are stored with this shape (yielded to be stored)."""
        shape = ShapeDef.make(art.id, message, art.table_schema)
        self.relations[relid] = _Relation(art, message, shape)
        yield shape

    def _commands(self, m: Any, xid: int | None) -> Iterator[StoredCommand | ShapeDef]:
        """Commands of the messages that are not row changes: TRUNCATE, tracer tokens, schema changes."""
        if isinstance(m, po.Truncate):
            for relid in m.relids:
                rel = self.relations.get(relid)
                if not isinstance(rel, _Relation):
                    self._unknown(rel)
                yield StoredCommand(rel.article_id, "trunc", xid, None, None)
        elif isinstance(m, po.Message):
            content = json.loads(m.content.decode("utf-8")) if m.content else {}
            if content.get("publication") != self.publication.name:
                return
            if m.prefix == HORIZON_PREFIX:
                self.caught_up = self.caught_up or content.get("marker") == self._marker
            elif m.prefix == TRACER_PREFIX:
                yield StoredCommand(0, "token", xid, json.dumps(content), None)
            elif m.prefix == DDL_PREFIX:
                # later changes of the article are decoded with its new columns: a new shape
                art = _Article(content["article_id"], content["table_schema"])
                self.by_table[(art.table.schema, art.table.name)] = art
                for relid, rel in list(self.relations.items()):
                    if isinstance(rel, _Relation) and rel.article_id == art.id:   # (str: not an article)
                        yield from self._relation(relid, art, rel.message)
                yield StoredCommand(art.id, "ddl", xid, json.dumps(content), None)

    def _without_before_image(self, e: NoBeforeImage, xact_seqno: int, xid: int | None) -> None:
        """A change without its before image: passed over when every subscription's snapshot holds its
        transaction (they were reinitialized after it: delivering it would be skipped everywhere), else
        the log reader stops here, naming the subscriptions that need it."""
        needing = self.needed_by(xact_seqno, xid) if self.needed_by is not None else ["(unknown)"]
        if not needing:
            return
        raise SchemaError(f"publication {self.publication.name}: {e.message} (transaction {xid}, LSN "
                          f"{po.lsn_text(xact_seqno)}): its REPLICA IDENTITY was not FULL when it was made; "
                          f"subscription(s) {', '.join(needing)} still need it; {identity_advice(self.publication.name)}",
                          obj=self.publication.name)

    def _unknown(self, relation: str | None) -> NoReturn:
        """A change of a relation that is not an article: never dropped silently."""
        raise SchemaError(f"publication {self.publication.name}: the server's log has a change of "
                          f"{relation or 'a relation it never described'}, which is not an article (a partition of a "
                          "partitioned article?); run 'sparksync setup', which publishes partitioned tables "
                          "through their root", obj=self.publication.name)

    def horizon(self) -> int:
        """Where a run that starts now stops: a marker committed into the log now (every transaction
        committed before it is read before it: ``caught_up`` once it is read). Returns its position."""
        self._marker = store.new_guid()
        self.caught_up = False
        content = json.dumps({"publication": self.publication.name, "marker": self._marker})
        return po.lsn_int(self.replica.scalar("SELECT pg_logical_emit_message(true, %s, %s)::text",
                                              (HORIZON_PREFIX, content)))

    def confirm(self) -> bool:
        """Move the slot past the last transaction read (stored or skipped). False: nothing was read."""
        if self._pending_end is None:
            return False
        self._stream.confirm(self._pending_end)
        self._pending_end = None
        return True


# -- the capture method -----------------------------------------------------------------------------

class LogicalDecoding:
    """PostgreSQL's :class:`~sparksync.transactional.capture.CaptureMethod`."""

    def problems(self, replica: Replica, wants_filters: bool) -> list[str]:
        return server_problems(replica, wants_filters)

    def install(self, replica: Replica, publication: str, articles: list) -> tuple[str | None, str | None]:
        dbname = replica.scalar("SELECT current_database()")
        slot, pgpub = slot_name(dbname, publication), pg_publication_name(publication)
        if not slot_exists(replica, slot) and free_slots(replica) < 1:
            raise ConfigurationError(f"{replica.label}: no free replication slot for publication {publication} "
                                     "(raise max_replication_slots and restart PostgreSQL)", obj=publication)
        d = replica.dialect
        with replica.transaction():
            publish(replica, publication, [(a.name, a.filter.sql_for(d.capabilities.sql, a.published.columns)
                                            if a.filter else None) for a in articles])
        create_slot(replica, slot)
        return slot, pgpub

    def log_position(self, replica: Replica) -> int | None:
        return current_lsn(replica)

    def sync_point(self, publisher: Replica, frozen: Replica, report: Reporter) -> tuple[dict, int]:
        """The transactions the exported snapshot sees (``pg_current_snapshot()``), and the end of the
        log once every transaction it did not see had ended. Delivery starts from the caller's log
        position from before the snapshot (0 here: the caller knows it)."""
        xmin, xmax, xip = _pg_snapshot(frozen.scalar("SELECT pg_current_snapshot()::text"))
        _wait_for(publisher, xip, report)
        return {"kind": "snapshot", "xmin": xmin, "xmax": xmax, "xip": xip, "upto": current_lsn(publisher)}, 0

    def post_marker(self, replica: Replica, publication: str, kind: str, content: dict, article_id: int = 0) -> None:
        replica.execute("SELECT pg_logical_emit_message(true, %s, %s)", (MARKER_PREFIXES[kind], json.dumps(content)))

    def alter_table(self, replica: Replica, publication: str, article_id: int, alter: Callable[[Replica], object],
                    new: TableInfo, row_filter: RowFilter | None) -> None:
        alter(replica)        # the next Relation message carries the new columns

    def backlog(self, replica: Replica, publication) -> dict:
        row = replica.query_one("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint "
                                "FROM pg_replication_slots WHERE slot_name = %s", (publication.slot,))
        out = {"slot_lag_bytes": int(row[0]) if row else None, "slot_present": row is not None}
        if row and int(row[0]) > 0:
            out["oldest_unread"] = self._oldest_unread(replica, publication)
        return out

    @staticmethod
    def _oldest_unread(replica: Replica, publication) -> Any:
        """The commit time of the first transaction left in the slot for this publication (peeked: the
        slot does not move), or None: nothing of it, or the log reader is reading the slot right now."""
        try:
            row = replica.query_one(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, 1, 'proto_version', '1', "
                "'publication_names', %s) LIMIT 1", (publication.slot, replica.dialect.quote(publication.pg_publication)))
        except SparksyncError:
            return None
        if row is None or len(row[0]) < po.BEGIN_LENGTH or row[0][0] != _BEGIN:
            return None
        _, micros, _ = po.BEGIN.unpack_from(row[0], 1)
        return po.PG_EPOCH + timedelta(microseconds=micros)

    def reader(self, replica: Replica, publication, articles: list[DistArticleRow], read_batch: int,
               needed_by=None) -> LogicalCapture:
        return LogicalCapture(replica, publication, articles, read_batch, needed_by)


def _xid_precedes(a: int, b: int) -> bool:
    """PostgreSQL's TransactionIdPrecedes on 32-bit xids (modulo 2^32)."""
    return ((a - b) & 0xFFFFFFFF) >= 0x80000000


def seen_by_snapshot(sync: dict, xact_seqno: int, origin: int | None) -> bool:
    """The snapshot saw the transaction ``origin`` (an xid) committed at ``xact_seqno`` (its commit LSN)."""
    if xact_seqno > sync["upto"] or origin is None:     # past every transaction the snapshot knew
        return False
    x = origin & 0xFFFFFFFF
    xmin, xmax = sync["xmin"] & 0xFFFFFFFF, sync["xmax"] & 0xFFFFFFFF
    if _xid_precedes(x, xmin):
        return True
    if not _xid_precedes(x, xmax):
        return False
    return x not in {v & 0xFFFFFFFF for v in sync["xip"]}


def _pg_snapshot(text: str) -> tuple[int, int, list[int]]:
    xmin, xmax, xip = text.split(":")
    return int(xmin), int(xmax), [int(x) for x in xip.split(",") if x]


def _wait_for(replica: Replica, xip: list[int], report: Reporter) -> None:
    """Until every transaction running when the snapshot was taken has ended."""
    deadline = time.monotonic() + XIP_WAIT_SECONDS
    told = False
    while True:
        running = [x for x in xip if replica.scalar("SELECT pg_xact_status(%s::text::xid8)", (str(x),)) ==
                   "in progress"]
        if not running:
            return
        if not told:
            report(f"snapshot: waiting for {len(running)} transaction(s) that were running at the snapshot to end")
            told = True
        if time.monotonic() > deadline:
            raise SparksyncError(f"{replica.label}: transactions {running[:5]} have been running for more than "
                                 f"{XIP_WAIT_SECONDS}s; end them and run setup again")
        time.sleep(0.2)
