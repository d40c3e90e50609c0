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

import contextlib
import hashlib
import json
import re
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, NoReturn

from sparksync.dialects.model import TableInfo, from_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, SchemaError, SparksyncError
from sparksync.filters import RowFilter
from sparksync.metadata.records import DistArticleRow
from sparksync.names import TableName
from sparksync.progress import Reporter
from sparksync.rows import VERBATIM_KINDS, RowCodec
from sparksync.transactional import pgoutput as po
from sparksync.transactional.capture import Begin, End
from sparksync.transactional.distribution import StoredCommand
from sparksync.types import Kind, SqlType

TRACER_PREFIX = "sparksync.tracer"
DDL_PREFIX = "sparksync.ddl"
MARKER_PREFIXES = {"token": TRACER_PREFIX, "ddl": DDL_PREFIX}
FETCH = 2_000
DECODING_WORK_MEM = "256MB"     # per log reader session, while it reads (a peek decodes in the reading backend)
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
        info = from_table_dict(table_schema)
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


class _Shape:
    """How one relation's tuples become one article's commands (built when the Relation message comes):
    change messages are decoded here in one pass, straight into the commands' JSON."""

    def __init__(self, art: _Article, cols: list[po.RelationColumn]):
        self.article, self.cols = art, cols
        where = {c.name: i for i, c in enumerate(cols)}
        # (position in the tuple, '"name":', fragment function, is key); position and function are None
        # for a column the relation does not have (its value is then None: the function is never called)
        self.parts: list[tuple[Any, str, Any, bool]] = []
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
            assert new is not None              # read_change refuses an insert without its tuple
            return StoredCommand(aid, "ins", xid, self.row(new), None, self.rowhash(new))
        if kind == "D":
            if old is None:
                raise NoBeforeImage("delete", str(self.article.table))
            return StoredCommand(aid, "del", xid, None, self.row(old), self.rowhash(old))
        if old is None:
            # REPLICA IDENTITY FULL sends every update's before image; without it a subscriber could
            # not find (or check) the row: never a silent guess
            raise NoBeforeImage("update", str(self.article.table))
        assert new is not None                  # read_change refuses an update without its new tuple
        return StoredCommand(aid, "upd", xid, self.row(new, old), self.changed(old, new), self.rowhash(old))


_INSERT, _UPDATE, _DELETE, _BEGIN, _COMMIT = ord("I"), ord("U"), ord("D"), ord("B"), ord("C")


class NoBeforeImage(SchemaError):
    """An update or delete in the log without its before image: made while its table's REPLICA IDENTITY
    was not FULL (changed behind sparksync's back). SCALL's changed columns and XCALL's before image
    cannot be made from it, so it is never delivered as a guess."""

    def __init__(self, what: str, table: str):
        super().__init__(f"{'an' if what == 'update' else 'a'} {what} of {table} arrived without its before image",
                         obj=table)
        self.what, self.table = what, table


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
        self.relations: dict[int, _Shape | str] = {}     # relation id -> its shape, or the name of a non-article
        self._pending_end: int | None = None
        self.needed_by = needed_by
        changed = not_full_identity(replica, [a.table for a in self.by_table.values()])
        if changed:
            raise SchemaError(f"publication {publication.name}: REPLICA IDENTITY of {', '.join(changed)} is no longer "
                              "FULL (it was changed after setup), so its updates and deletes lose their before image: "
                              f"{identity_advice(publication.name)}", obj=publication.name)

    def read_batch(self, after: int | None) -> Iterator[Any]:
        r = self.replica
        if not slot_exists(r, self.publication.slot):
            raise SchemaError(f"publication {self.publication.name}: replication slot {self.publication.slot} is "
                              f"missing at {r.label}; run 'sparksync setup' (subscriptions must be reinitialized)")
        self._pending_end = None
        self.relations = {}    # each peek is a new decoding session: relations are sent again
        raw = r.raw
        ended = False
        try:
            raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            # decoding runs in this backend: a transaction bigger than logical_decoding_work_mem (64MB by
            # default, ~500,000 narrow rows) is spilled to disk and read back; this session may use more
            raw.execute(f"SET LOCAL logical_decoding_work_mem = '{DECODING_WORK_MEM}'")
            with raw.cursor(name="sparksync_logreader") as cur:
                cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, 'proto_version', '1', "
                            "'publication_names', %s, 'messages', 'true')",
                            (self.publication.slot, self.read_batch_changes,
                             r.dialect.quote(self.publication.pg_publication)))   # an identifier list: quoted
                yield from self._events(cur, after)
            raw.execute("COMMIT")
            ended = True
        except SparksyncError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise r.dialect.translate_error(exc, f"{r.label}: read slot {self.publication.slot}") from exc
        finally:
            if not ended:
                # a failure, or a consumer that stopped early (GeneratorExit): no transaction left
                # open, and nothing to confirm (what was read may not be stored)
                self._pending_end = None
                with contextlib.suppress(Exception):
                    raw.execute("ROLLBACK")

    def _events(self, cur, after: int | None) -> Iterator[Any]:
        skip = False
        xid = None
        final_lsn = 0
        open_txn = False
        while True:
            rows = cur.fetchmany(FETCH)
            if not rows:
                break
            for (data,) in rows:
                first = data[0]
                if first in (_UPDATE, _INSERT, _DELETE):     # the common case, fast
                    if not skip:
                        shape = self.relations.get(struct.unpack_from("!I", data, 1)[0])
                        if not isinstance(shape, _Shape):
                            self._unknown(shape)
                        try:
                            yield shape.command(bytes(data), xid)
                        except NoBeforeImage as e:
                            self._without_before_image(e, final_lsn, xid)
                    continue
                if first == _BEGIN and len(data) >= po.BEGIN_LENGTH:      # a transaction each: also fast
                    final_lsn, micros, xid = po.BEGIN.unpack_from(data, 1)
                    skip = after is not None and final_lsn <= after
                    if not skip:
                        open_txn = True
                        yield Begin(final_lsn, str(xid), po.PG_EPOCH + timedelta(microseconds=micros))
                    continue
                if first == _COMMIT and len(data) >= po.COMMIT_LENGTH:
                    self._pending_end = po.COMMIT.unpack_from(data, 2)[1]
                    if not skip:
                        open_txn = False
                        yield End()
                    continue
                m = po.parse(data)
                if isinstance(m, po.Relation):
                    art = self.by_table.get((m.namespace, m.name))
                    self.relations[m.relid] = _Shape(art, m.columns) if art is not None else f"{m.namespace}.{m.name}"
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
                if not isinstance(shape, _Shape):
                    self._unknown(shape)
                yield StoredCommand(shape.article.id, "trunc", xid, None, None)
        elif isinstance(m, po.Message):
            content = json.loads(m.content.decode("utf-8")) if m.content else {}
            if content.get("publication") != self.publication.name:
                return
            if m.prefix == TRACER_PREFIX:
                yield StoredCommand(0, "token", xid, json.dumps(content), None)
            elif m.prefix == DDL_PREFIX:
                # later changes of the article carry its new columns
                art = _Article(content["article_id"], content["table_schema"])
                self.by_table[(art.table.schema, art.table.name)] = art
                for relid, shape in list(self.relations.items()):
                    if isinstance(shape, _Shape) and shape.article.id == art.id:   # (str: not an article)
                        self.relations[relid] = _Shape(art, shape.cols)
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

    def alter_table(self, replica: Replica, publication: str, article_id: int, ddl: str, new: TableInfo,
                    row_filter: RowFilter | None) -> None:
        replica.execute(ddl)        # the next Relation message carries the new columns

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
