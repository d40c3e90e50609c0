"""A logical replication slot read through the streaming replication protocol (the walsender), the way
PostgreSQL's own subscriptions read it.

The server decodes its log in its walsender process and sends each message as soon as it is decoded,
so decoding and the reader's work overlap (``pg_logical_slot_peek_binary_changes`` decodes a whole read
before it returns its first row). psycopg has no replication API; its libpq layer (``psycopg.pq``)
speaks the protocol: a connection with ``replication=database``, ``START_REPLICATION SLOT ... LOGICAL``,
then CopyData messages both ways (XLogData and keepalives from the server, standby status updates
from the reader). Messages are read without blocking libpq (``get_copy_data(1)``): a wait is a
``select`` on the socket, which other threads of the process never wait behind.

The slot's confirmed position moves only by :meth:`ReplicationStream.confirm` (a standby status
update); :meth:`ReplicationStream.close` sends the last one and waits until the server has ended the
stream, so the slot is released and shows what was confirmed when ``close`` returns.
"""

from __future__ import annotations

import contextlib
import select
import struct
import time
from collections.abc import Iterator
from typing import Any

from sparksync.dialects.postgres.driver import open_connection
from sparksync.errors import SparksyncError

PG_EPOCH_OFFSET = 946_684_800            # seconds from the Unix epoch to PostgreSQL's (2000-01-01)
XLOG_DATA = struct.Struct("!QQq")         # after 'w': the message's start, the server's end of log, send time
KEEPALIVE = struct.Struct("!QqB")         # after 'k': the server's end of log, send time, reply requested
STATUS = struct.Struct("!cQQQqB")         # 'r', written, flushed, applied, time, reply requested
_W, _K = ord("w"), ord("k")
SLOT_BUSY_STATE = "55006"                 # object_in_use: the slot is still held by an ending walsender
SLOT_BUSY_WAIT = 15.0                     # seconds a start waits for a slot released by a reader that died
CLOSE_WAIT = 10.0                         # seconds ending a stream waits for the server before cutting it
STATUS_INTERVAL = 10.0                    # seconds of waiting for the server before telling it we are here


def _now_micros() -> int:
    return int((time.time() - PG_EPOCH_OFFSET) * 1_000_000)


class ReplicationStream:
    """One slot streamed to this process (``messages()``), confirmed as the caller stores what it read."""

    def __init__(self, url: str, label: str, slot: str, options: dict[str, str], settings: dict[str, str]):
        """``options``: the output plugin's (``proto_version``, ``publication_names``, ...);
        ``settings``: session settings of the walsender (the text forms values are sent in)."""
        self.url, self.label, self.slot = url, label, slot
        self.options, self.settings = options, settings
        self.confirmed = 0             # the position sent as written and flushed (0: none yet)
        self._conn: Any = None

    # -- life ------------------------------------------------------------------------------------
    def open(self) -> None:
        from psycopg import pq

        conn = self._connect()
        opts = ", ".join(f'"{k}" {_literal(v)}' for k, v in self.options.items())
        command = f'START_REPLICATION SLOT "{self.slot}" LOGICAL 0/0 ({opts})'.encode()
        deadline = time.monotonic() + SLOT_BUSY_WAIT
        while True:
            res = conn.pgconn.exec_(command)
            if res.status == pq.ExecStatus.COPY_BOTH:
                break
            state = (res.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
            message = (res.error_message or b"").decode(errors="replace").strip()
            if state == SLOT_BUSY_STATE and time.monotonic() < deadline:
                time.sleep(0.1)            # the walsender of a reader that died is still letting it go
                continue
            conn.close()
            raise SparksyncError(f"{self.label}: cannot stream replication slot {self.slot}: {message}",
                                 obj=self.slot)
        self._conn = conn

    def _connect(self) -> Any:
        from psycopg.conninfo import conninfo_to_dict

        given = conninfo_to_dict(self.url).get("options") or ""
        settings = " ".join(f"-c {k}={v}" for k, v in self.settings.items())
        return open_connection(self.url, replication="database", options=f"{given} {settings}".strip())

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    def close(self) -> None:
        """Confirm what was confirmed once more, end the stream and wait for the server to end it
        (the slot is then released, at the confirmed position), and close the connection."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        pg = conn.pgconn
        deadline = time.monotonic() + CLOSE_WAIT
        try:
            self._status(pg, reply=False)
            while pg.put_copy_end() == 0:
                _flush(pg)
            _flush(pg)
            # the rest of the stream, then the end of START_REPLICATION: read without blocking, for CLOSE_WAIT at
            # most (a server that does not answer is cut off; the slot is released with the connection)
            while time.monotonic() < deadline:
                n, _ = pg.get_copy_data(1)
                if n > 0:
                    continue
                if n == 0:
                    if select.select([pg.socket], [], [], max(0.0, deadline - time.monotonic()))[0]:
                        pg.consume_input()
                    continue
                while time.monotonic() < deadline:
                    pg.consume_input()
                    if pg.is_busy():
                        select.select([pg.socket], [], [], max(0.0, deadline - time.monotonic()))
                        continue
                    if pg.get_result() is None:
                        break
                break
        except Exception:  # noqa: BLE001 - a stream that cannot end cleanly is cut: the slot is released anyway
            pass
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def abort(self) -> None:
        """Cut the stream without confirming anything more (a read that failed or was abandoned)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    # -- reading ---------------------------------------------------------------------------------
    def messages(self) -> Iterator[bytes]:
        """The output plugin's messages, in the order the server sends them; endless (the caller stops
        reading). Keepalives are answered here."""
        conn = self._conn
        assert conn is not None, "open() the stream first"
        pg = conn.pgconn
        get = pg.get_copy_data
        while True:
            n, data = get(1)
            if n > 0:
                kind = data[0]
                if kind == _W:
                    yield bytes(data[25:])
                elif kind == _K and data[17]:
                    self._status(pg, reply=False)       # the server asks: it ends the stream otherwise
                continue
            if n == 0:                                  # nothing buffered: wait for the socket
                self._wait(pg)
                continue
            raise SparksyncError(f"{self.label}: the stream of replication slot {self.slot} ended: {_why(pg)}",
                                 obj=self.slot)

    def _wait(self, pg: Any) -> None:
        _flush(pg)
        while True:
            ready, _, _ = select.select([pg.socket], [], [], STATUS_INTERVAL)
            if ready:
                pg.consume_input()
                return
            self._status(pg, reply=False)      # idle: tell the server we are here

    def confirm(self, lsn: int) -> None:
        """The server may forget everything before ``lsn`` (a commit's end): it is stored."""
        if lsn > self.confirmed:
            self.confirmed = lsn
        conn = self._conn
        if conn is not None:
            self._status(conn.pgconn, reply=False)

    def _status(self, pg: Any, reply: bool) -> None:
        at = self.confirmed
        message = STATUS.pack(b"r", at, at, at, _now_micros(), 1 if reply else 0)
        while pg.put_copy_data(message) == 0:      # (the connection is non-blocking: its buffer may be full)
            _flush(pg)
        _flush(pg)


def _flush(pg: Any) -> None:
    """Send what libpq holds for the server, waiting for the socket as long as it takes; what the server sends
    meanwhile is taken into libpq's buffer (the server reads our messages even while it waits to write)."""
    while pg.flush() == 1:
        readable, _, _ = select.select([pg.socket], [pg.socket], [], STATUS_INTERVAL)
        if readable:
            pg.consume_input()


def _why(pg: Any) -> str:
    """The server's reason for ending the stream (its error), or the connection's."""
    reasons = []
    with contextlib.suppress(Exception):
        while (res := pg.get_result()) is not None:
            reasons.append((res.error_message or b"").decode(errors="replace").strip())
    reasons.append((pg.error_message or b"").decode(errors="replace").strip())
    return next((r for r in reasons if r), "the connection was closed")


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
