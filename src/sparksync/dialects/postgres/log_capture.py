"""Merge change tracking on PostgreSQL read from the write-ahead log (``change_capture = "log"``).

No trigger runs on an application's write: the server's log already holds every committed change. Setup
makes, per database, a logical replication slot (``pgoutput``) and a PostgreSQL publication of the
database's merge articles, with ``REPLICA IDENTITY FULL`` (an update carries the row before it, so an
update that changes nothing is not a change and a column-tracked update knows its columns; a delete
carries the rowguid of the row that is gone). The slot is made *before* setup's transaction publishes a
table (making one waits for every running transaction, the caller's included), so no change committed
after that transaction is missed.

The flush (``merge/tracking/pending.py``) claims its entries here instead of from ``MSmerge_pending``: the
slot is peeked from the position recorded in ``MSmerge_capture``, each committed transaction's changes of
articles become the entries the triggers would have logged (tablenick, rowguid, operation, changed
columns), and the new position is written in the same transaction as the metadata made from them (exactly
once across kills: a transaction the position covers is skipped). The slot itself is advanced to the
recorded position at the next read: advancing is not transactional, so it only ever follows a committed
position. One reader at a time holds the slot (the flush lock, ``tracking_log.FLUSH_LOCK_CLASS``).

The agent's own writes are framed by transactional messages (``AGENT_PREFIX``: "on" where
``agent_writes`` begins, "off" where it ends), which the reader sees in their place inside the
transaction: what lies between is not a local change. (A replication origin would tag whole transactions
only, set per session and restricted to superusers by default; the messages mark exactly the part the
triggers' transaction-local setting marked.)
"""

from __future__ import annotations

import hashlib
import random
import struct
import time
from collections.abc import Sequence

import sparksync.dialects.postgres.pgoutput as po
from sparksync.dialects.postgres.naming import METADATA_SCHEMA
from sparksync.dialects.replica import Replica
from sparksync.errors import CaptureBusy, ConfigurationError, ReplicaDamaged
from sparksync.names import TableName

CAPTURE = "MSmerge_capture"               # the slot, its PostgreSQL publication and the position read up to
PUBLICATION = "sparksync_merge"           # the PostgreSQL publication of the database's merge articles
AGENT_PREFIX = "sparksync.merge.agent"    # the messages framing the agent's own writes
FETCH = 5_000
QUIET_BYTES = 1 << 20                     # log a door's mark lets pass without an article's change before recording it
BUSY_WAIT = 10.0                          # seconds a read-only peek (status, a validation) asks again for a busy slot
FLUSH_BUSY_WAIT = 120.0                   # the same for a flush: the writer, which must not fail for readers
_I, _U, _D, _B, _C, _M, _R, _OLD, _NEW = (ord(c) for c in "IUDBCMRON")
_U32 = struct.Struct("!I")


def slot_name(database: str) -> str:
    return "sparksync_merge_" + hashlib.sha1(database.encode()).hexdigest()[:12]


def capture_of(replica: Replica) -> dict | None:
    """This database's log capture (slot, position), or None: its merge articles are tracked by triggers.
    Known once asked on a connection (setup changes it only through :func:`prepare`)."""
    known = replica.log_capture
    if known is not False:
        return known
    d = replica.dialect
    found = None
    if d.metadata_table_exists(replica, CAPTURE):
        row = replica.query_one(f"SELECT slot, confirmed FROM {d.metadata_table_sql(CAPTURE)}")
        if row is not None:
            found = {"slot": row[0], "confirmed": int(row[1])}
    replica.log_capture = found
    return found


def possible(replica: Replica) -> bool:
    """``wal_level = logical``, and the slot exists or one is free."""
    if replica.scalar("SHOW wal_level") != "logical":
        return False
    slot = slot_name(replica.scalar("SELECT current_database()"))
    return bool(replica.scalar(
        "SELECT count(*) FILTER (WHERE slot_name = %s) > 0 OR current_setting('max_replication_slots')::int > count(*) "
        "FROM pg_replication_slots", (slot,)))


def prepare(replica: Replica) -> dict:
    """Outside any transaction, before setup's: the slot (made if missing; it waits for the transactions
    running now) and the record of it. Idempotent."""
    if replica.in_transaction:
        raise RuntimeError("log_capture.prepare() runs outside any transaction")
    d = replica.dialect
    level = replica.scalar("SHOW wal_level")
    if level != "logical":
        raise ConfigurationError(
            f"{replica.label}: change_capture = 'log' reads the server's log by logical decoding, which needs "
            f"wal_level = logical (it is '{level}'): set it and restart PostgreSQL, or use change_capture = "
            "'triggers'", obj=replica.label)
    slot = slot_name(replica.scalar("SELECT current_database()"))
    # the publication first: pgoutput looks it up as of each change it decodes, so it must exist before the
    # slot's first change (its tables are added by setup's transaction)
    if not replica.scalar("SELECT count(*) FROM pg_publication WHERE pubname = %s", (PUBLICATION,)):
        replica.execute(f"CREATE PUBLICATION {d.quote(PUBLICATION)} WITH (publish = 'insert, update, delete')")
    if not replica.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)):
        free = replica.scalar("SELECT current_setting('max_replication_slots')::int - count(*) FROM pg_replication_slots")
        if int(free) < 1:
            raise ConfigurationError(f"{replica.label}: no free replication slot for its change capture (raise "
                                     "max_replication_slots and restart PostgreSQL, or use change_capture = "
                                     "'triggers')", obj=replica.label)
        replica.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    table = d.metadata_table_sql(CAPTURE)
    replica.execute(f"CREATE SCHEMA IF NOT EXISTS {d.quote(METADATA_SCHEMA)}")
    replica.execute(f"CREATE TABLE IF NOT EXISTS {table} (slot text PRIMARY KEY, confirmed bigint NOT NULL)")
    replica.execute(f"INSERT INTO {table} (slot, confirmed) VALUES (%s, 0) ON CONFLICT (slot) DO NOTHING", (slot,))
    replica.log_capture = False          # asked again
    found = capture_of(replica)
    assert found is not None
    return found


def publish_table(replica: Replica, table: TableName) -> None:
    """Inside setup's transaction: the table's changes published to the slot, with their before image."""
    d = replica.dialect
    t = d.table_sql(table)
    if replica.scalar("SELECT relreplident FROM pg_class WHERE oid = %s::regclass", (t,)) != "f":
        replica.execute(f"ALTER TABLE {t} REPLICA IDENTITY FULL")
    if not replica.scalar("SELECT count(*) FROM pg_publication WHERE pubname = %s", (PUBLICATION,)):
        raise ReplicaDamaged(f"{replica.label}: the PostgreSQL publication {PUBLICATION} of its change capture is gone; "
                             "run 'sparksync setup'", obj=replica.label)
    if not _in_publication(replica, t):
        replica.execute(f"ALTER PUBLICATION {d.quote(PUBLICATION)} ADD TABLE {t}")


def unpublish_table(replica: Replica, table: TableName) -> None:
    d = replica.dialect
    t = d.table_sql(table)
    if replica.scalar("SELECT to_regclass(%s) IS NOT NULL", (t,)) and _in_publication(replica, t):
        replica.execute(f"ALTER PUBLICATION {d.quote(PUBLICATION)} DROP TABLE {t}")


def _in_publication(replica: Replica, table_sql: str) -> bool:
    return bool(replica.scalar("SELECT count(*) FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid "
                               "WHERE p.pubname = %s AND r.prrelid = %s::regclass", (PUBLICATION, table_sql)))


def published(replica: Replica, table: TableName) -> list[str]:
    """What keeps the table's changes from reaching the slot whole (for ``tracking_problems``)."""
    t = replica.dialect.table_sql(table)
    problems = []
    if replica.scalar("SELECT relreplident FROM pg_class WHERE oid = %s::regclass", (t,)) != "f":
        problems.append(f"REPLICA IDENTITY of {t} is not FULL")
    if not _in_publication(replica, t):
        problems.append(f"{t} is not in the PostgreSQL publication {PUBLICATION}")
    return problems


def drop(replica: Replica) -> None:
    """The capture removed (the replica's merge metadata dropped): its slot, publication and record."""
    found = capture_of(replica)
    if found is None:
        return
    replica.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                    (found["slot"],))
    replica.execute(f"DROP PUBLICATION IF EXISTS {replica.dialect.quote(PUBLICATION)}")
    replica.execute(f"DROP TABLE IF EXISTS {replica.dialect.metadata_table_sql(CAPTURE)}")
    replica.log_capture = None


def retained_bytes(replica: Replica) -> int | None:
    """The log the slot keeps the server from recycling (bytes), or None: no slot."""
    found = capture_of(replica)
    if found is None:
        return None
    return replica.scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots "
                          "WHERE slot_name = %s", (found["slot"],))


def begin_agent_writes(replica: Replica) -> None:
    replica.execute("SELECT pg_logical_emit_message(true, %s, 'on')", (AGENT_PREFIX,))


def end_agent_writes(replica: Replica) -> None:
    replica.execute("SELECT pg_logical_emit_message(true, %s, 'off')", (AGENT_PREFIX,))


class _Article:
    """A relation of the log that is an article: where its rowguid is in a tuple, where its columns are, and
    whether a whole-tuple comparison decides an update (``whole``: every column of the relation is the
    article's, and no column mask is wanted)."""

    __slots__ = ("nick", "guid", "cols", "mask_width", "whole", "last")

    def __init__(self, nick: int, guid: int, cols: list[int], mask_width: int, whole: bool, last: bool):
        self.nick, self.guid, self.cols, self.mask_width, self.whole = nick, guid, cols, mask_width, whole
        self.last = last                 # the rowguid is the relation's last column (as setup adds it)


def problems(replica: Replica) -> list[str]:
    """The slot lost (``status``, ``validate``): the same words as the flush's error."""
    found = capture_of(replica)
    if found is None or replica.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                                       (found["slot"],)):
        return []
    return [_lost(found["slot"])]


def _lost(slot: str) -> str:
    return (f"the replication slot {slot} of its change capture is gone (dropped, or invalidated by "
            "max_slot_wal_keep_size): the changes made since it was lost are not known; reinitialize this "
            "replica's subscriptions ('sparksync reinit'), then run 'sparksync setup' to make the slot again")


def read(replica: Replica, articles: Sequence[dict], advance: bool = True) -> tuple[list[tuple], int]:
    """Inside the caller's transaction, holding the flush lock: the entries of every transaction committed
    since the recorded position (tablenick, rowguid, op 1/2/3, changed columns of a column-tracked update),
    and the position after the last of them (the recorded one when there is none). ``advance``: move the
    slot to the recorded position first (a writer; ``status`` only peeks)."""
    found = capture_of(replica)
    assert found is not None
    slot = found["slot"]
    confirmed = int(replica.scalar(f"SELECT confirmed FROM {replica.dialect.metadata_table_sql(CAPTURE)} "
                                   "WHERE slot = %s", (slot,)))
    row = replica.query_one("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    if row is None:
        raise ReplicaDamaged(f"{replica.label}: {_lost(slot)}", obj=replica.label)
    behind = advance and confirmed > po.lsn_int(row[0])
    # Up to the end of the flushed log as it is now: the peek processes every record that starts before it, so
    # every transaction whose commit does is returned, and the position can be recorded there even when none of
    # them changed an article (the next read starts past the log that held nothing, the application's other
    # tables or the agent's history).
    upto = po.lsn_int(replica.scalar("SELECT pg_current_wal_flush_lsn()::text"))
    by_table = {(a["table_name"].schema or "public", a["table_name"].name): a for a in articles}
    # The slot is busy only while one backend decodes it: flushes take turns (the flush lock), status does not
    # (it never waits for a flush left open), so a reader that finds it busy asks again, under a savepoint. Many
    # read-only peeks at once (status, the validations of many devices' syncs) must not starve the flush (a
    # door's round, a merge): a flush asks again every 20 ms for up to FLUSH_BUSY_WAIT, a peek every 50-150 ms.
    deadline = time.monotonic() + (FLUSH_BUSY_WAIT if advance else BUSY_WAIT)
    while True:
        replica.execute("SAVEPOINT sparksync_peek")
        try:
            if behind:
                replica.raw.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, po.lsn_text(confirmed)))
            out = _decode(replica, slot, confirmed, upto, by_table)
        except Exception as exc:  # noqa: BLE001 - the driver's error, translated (a busy or broken slot, a lost server)
            busy = "is active for PID" in str(exc)
            if not busy:
                raise replica.dialect.translate_error(exc, f"{replica.label}: read replication slot {slot}") from exc
            if time.monotonic() > deadline:
                raise CaptureBusy(f"{replica.label}: the replication slot {slot} of its change capture was being read "
                                  f"by other backends for {FLUSH_BUSY_WAIT if advance else BUSY_WAIT:g} s; nothing "
                                  "was done, try again", obj=replica.label) from None
            replica.execute("ROLLBACK TO SAVEPOINT sparksync_peek")
            time.sleep(0.02 if advance else random.uniform(0.05, 0.15))
            continue
        replica.execute("RELEASE SAVEPOINT sparksync_peek")
        return out


def _decode(replica: Replica, slot: str, confirmed: int, upto: int, by_table: dict) -> tuple[list[tuple], int]:
    relations: dict[int, _Article | None] = {}
    entries: list[tuple] = []
    last = max(confirmed, upto)
    with replica.raw.cursor(name="sparksync_merge_capture") as cur:
        cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, 'proto_version', '1', "
                    "'publication_names', %s, 'messages', 'true')", (slot, po.lsn_text(upto), PUBLICATION))
        skip_txn = agent = False
        txn: list[tuple] = []
        while True:
            rows = cur.fetchmany(FETCH)
            if not rows:
                break
            for (data,) in rows:
                kind = data[0]
                if kind in (_I, _U, _D):
                    if skip_txn or agent:
                        continue
                    art = relations.get(_U32.unpack_from(data, 1)[0])
                    if art is not None:
                        _change(data, art, txn)
                elif kind == _B:
                    final_lsn = po.BEGIN.unpack_from(data, 1)[0]
                    skip_txn, agent, txn = final_lsn < confirmed, False, []
                elif kind == _C:
                    end = po.COMMIT.unpack_from(data, 2)[1]
                    if not skip_txn:
                        entries += txn
                        last = max(last, end)
                    txn = []
                elif kind == _R:
                    m = po.parse(bytes(data))
                    relations[m.relid] = _article(m, by_table.get((m.namespace, m.name)))
                elif kind == _M:
                    m = po.parse(bytes(data))
                    if m.prefix == AGENT_PREFIX:
                        agent = m.content == b"on"
    return entries, last


def unread(replica: Replica, lock_class: int) -> int:
    """A web door's mark (``merge/tracking/activity.py``): 0 when no change of an article committed before now is
    left to read, else the end of the log now (so two marks differ while changes wait). Outside any transaction.
    Where nothing waits and the log moved on by ``QUIET_BYTES`` (the door's own writes), the position is recorded
    there and the slot moved to it, so that the next peek decodes little; a flush in flight (the flush lock
    ``lock_class`` held) is a change to read."""
    found = capture_of(replica)
    assert found is not None
    slot = found["slot"]
    with replica.transaction():
        upto = po.lsn_int(replica.scalar("SELECT pg_current_wal_flush_lsn()::text"))
        if not replica.scalar("SELECT pg_try_advisory_xact_lock(%s, %s)", (lock_class, 0)):
            return upto
        confirmed = int(replica.scalar(f"SELECT confirmed FROM {replica.dialect.metadata_table_sql(CAPTURE)} "
                                       "WHERE slot = %s", (slot,)))
        if upto <= confirmed:
            return 0
        row = replica.query_one("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                (slot,))
        if row is None:
            return upto                  # the flush says what is wrong
        try:
            replica.execute("SAVEPOINT sparksync_mark")
            if confirmed > po.lsn_int(row[0]):
                replica.raw.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, po.lsn_text(confirmed)))
            waiting = replica.raw.execute(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, 1, 'proto_version', '1', "
                "'publication_names', %s)", (slot, po.lsn_text(upto), PUBLICATION)).fetchone()[0]
            replica.execute("RELEASE SAVEPOINT sparksync_mark")
        except Exception as exc:  # noqa: BLE001 - a slot another reader decodes now (status): changes to read
            if "is active for PID" not in str(exc):
                raise replica.dialect.translate_error(exc, f"{replica.label}: read replication slot {slot}") from exc
            replica.execute("ROLLBACK TO SAVEPOINT sparksync_mark")
            return upto
        if waiting:
            return upto
        if upto - confirmed >= QUIET_BYTES:
            record(replica, upto)
    return 0


def record(replica: Replica, position: int) -> None:
    """In the flush's transaction: the position its metadata covers."""
    found = capture_of(replica)
    assert found is not None
    replica.execute(f"UPDATE {replica.dialect.metadata_table_sql(CAPTURE)} SET confirmed = %s WHERE slot = %s "
                    "AND confirmed < %s", (position, found["slot"], position))


def record_now(replica: Replica) -> None:
    """The metadata is thrown away (a replica dropped or reinitialized): what the log holds now is not recorded."""
    found = capture_of(replica)
    assert found is not None
    replica.execute(f"UPDATE {replica.dialect.metadata_table_sql(CAPTURE)} SET confirmed = greatest(confirmed, "
                    "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint) WHERE slot = %s", (found["slot"],))


def _article(rel: po.Relation, ctx: dict | None) -> _Article | None:
    if ctx is None:
        return None
    names = [c.name for c in rel.columns]
    try:
        guid = names.index(ctx["rowguid_name"])
    except ValueError:
        return None             # a relation described before its rowguid column was added: no row of it is tracked
    # the article's columns (mask order) where this relation has them; -1: a column it has not (yet)
    cols = [names.index(c["name"]) if c["name"] in names else -1 for c in ctx["columns"]]
    whole = not ctx["column_tracking"] and sorted(cols + [guid]) == list(range(len(names)))
    return _Article(int(ctx["tablenick"]), guid, cols, len(ctx["columns"]) if ctx["column_tracking"] else 0, whole,
                    guid == len(names) - 1)


_GUID_TAIL = b"t" + struct.pack("!I", 36)     # a text value of 36 bytes: a uuid, as pgoutput sends it


def _guid_at(data: bytes, pos: int, art: _Article) -> str | None:
    """The rowguid in the tuple at ``pos`` (read up to its column only); the message's last 36 bytes when the
    rowguid is the relation's last column and that tuple ends the message (pos 6 of an insert or a delete)."""
    if art.last and (pos != 6 or data[0] != _U) and data[-41:-36] == _GUID_TAIL:
        return data[-36:].decode()
    values = po.read_tuple(data, pos, limit=art.guid + 1)[0]
    g = values[art.guid] if len(values) > art.guid else None
    return None if g is None or g is po.UNCHANGED else g.decode()


def _change(data: bytes, art: _Article, out: list) -> None:
    # The common cases without decoding every value: an insert's or a delete's rowguid (the first tuple, at
    # byte 6), and an update of an article with all of its table's columns and no mask, which is no change
    # exactly when its before and after tuples are the same bytes (two halves of the message around 'N').
    kind, tag = data[0], data[5]
    if kind == _I or (kind == _D and tag == _OLD):
        g = _guid_at(data, 6, art)
        if g is not None:
            out.append((art.nick, g, 1 if kind == _I else 3, None))
        return
    if kind == _U and tag == _OLD and art.whole:
        half, odd = divmod(len(data) - 7, 2)
        if not odd and data[6 + half] == _NEW and data[6:6 + half] == data[7 + half:]:
            return                       # an update that changes nothing is not a change
        # the rowguid: the after image's last value (it ends the message), or the before image's (an update keeps it)
        g = data[-36:].decode() if art.last and data[-41:-36] == _GUID_TAIL else _guid_at(data, 6, art)
        if g is not None:
            out.append((art.nick, g, 2, None))
        return
    _, _, old, key, new = po.read_change(data)       # an update needing its columns, or a delete by key only
    if kind == _D:
        row = old or key
        g = row[art.guid] if row and art.guid < len(row) else None
        if g is not None:
            out.append((art.nick, g.decode(), 3, None))
        return
    assert new is not None
    g = new[art.guid]
    if g is None:
        return
    if old is None:                      # no before image (REPLICA IDENTITY changed by hand): every column
        changed = [True] * len(art.cols)
    else:
        changed = [i >= 0 and new[i] is not po.UNCHANGED and (i >= len(old) or old[i] != new[i]) for i in art.cols]
        if not any(changed):
            return                       # an update that changes nothing is not a change
    mask = "".join("1" if c else "0" for c in changed) if art.mask_width else None
    out.append((art.nick, g.decode(), 2, mask))


def copy_entries(replica: Replica, table: str, entries: list[tuple]) -> None:
    """The entries into the connection's temporary table of claimed entries."""
    with replica.raw.cursor() as cur, cur.copy(f"COPY {table} (tablenick, rowguid, op, cols) FROM STDIN") as cp:
        for e in entries:
            cp.write_row(e)

