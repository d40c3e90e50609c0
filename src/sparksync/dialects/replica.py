"""One open connection to a replica database, with its dialect: statements, transactions, and
driver errors translated into sparksync's typed errors (with the password out of every message)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sparksync.dialects.model import TableInfo
from sparksync.dialects.protocols import Dialect
from sparksync.errors import ConnectionFailed, SparksyncError, TrackingNotFlushed
from sparksync.names import TableName
from sparksync.redaction import redact

IN_LIST = 500     # values bound in one IN (...) list: far below every driver's parameter limit

TRACKING_TABLES = frozenset({"MSmerge_contents", "MSmerge_tombstone"})
"""The merge metadata the tracking triggers' log (MSmerge_pending) is flushed into: read or written only
through a connection that has flushed it (``merge.tracking.pending``), else a change an application
made a moment ago would be missing from what is read."""


def in_chunks(items: Sequence[Any], n: int = IN_LIST) -> Iterator[list]:
    """``items`` in lists of at most ``n``: one statement each (``... IN ({placeholders})``)."""
    for i in range(0, len(items), n):
        yield list(items[i:i + n])


def redact_url(url: str) -> str:
    """The URL (or text holding URLs) with every password replaced by ``***`` (``redaction.redact``)."""
    return redact(url)


class Replica:
    """One open connection to a replica database (publisher or subscriber), with its dialect.

    The connection is in autocommit mode; :meth:`transaction` opens an explicit transaction.
    Driver errors are translated by the dialect into :class:`SparksyncError` subclasses.
    """

    def __init__(self, dialect: Dialect[Replica], raw: Any, url: str, label: str | None = None):
        self.dialect = dialect
        self.raw = raw
        self.url = url
        self.label = label or redact_url(url)
        self._in_tx = False
        self.tracking_flushed = False    # set by merge.tracking.pending.flush (see TRACKING_TABLES)
        self.has_tracking_log: bool | None = None     # known once asked (merge.tracking.pending.has_log)
        self.notes_inserts: bool | None = None        # a web device's file (merge.tracking.pending.INSERTS)
        self.metadata_current: bool = False           # every metadata set here is this release's (metadata.store)
        self.flushed_in: int | None = None            # the transaction (serial) that last flushed
        self.log_capture: Any = False                 # PostgreSQL: its log capture, once asked (log_capture.capture_of)
        self._tx_serial = 0

    # -- statements -------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        try:
            return self.dialect.execute(self.raw, sql, params)
        except SparksyncError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated, cause kept
            raise self._error(exc, f"{self.label}: {_first_line(sql)}") from exc

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int | None:
        """Run ``sql`` once per row; returns the rows affected in all (None where the driver cannot say)."""
        try:
            return self.dialect.executemany(self.raw, sql, rows)
        except SparksyncError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc, f"{self.label}: {_first_line(sql)}") from exc

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        try:
            return self.dialect.query(self.raw, sql, params)
        except SparksyncError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc, f"{self.label}: {_first_line(sql)}") from exc

    def query_one(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    def aggregate(self, sql: str, params: Sequence[Any] = ()) -> tuple:
        """The one row of an aggregate query (``SELECT count(*), max(x) ...``: always one row)."""
        row = self.query_one(sql, params)
        assert row is not None, "an aggregate query without a row"
        return row

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.query_one(sql, params)
        return None if row is None else row[0]

    # -- transactions -----------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Replica]:
        """One write transaction. Nested use joins the outer transaction."""
        if self._in_tx:
            yield self
            return
        self.begin()
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        else:
            self.commit()

    def begin(self) -> None:
        """Open a write transaction that the caller ends with :meth:`commit` or :meth:`rollback`:
        for a transaction no one ``with`` block can hold (a subscription's streams, each on its own
        connection, commit together once all of them have succeeded). Prefer :meth:`transaction`."""
        self.execute(self.dialect.begin_write_sql)
        self._in_tx = True
        self._tx_serial += 1

    def commit(self) -> None:
        """Commit the open transaction; a failure is a typed error (transient when the connection was lost)."""
        self._in_tx = False
        try:
            self.dialect.commit(self.raw)
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc, f"{self.label}: commit") from exc

    def rollback(self) -> None:
        """Roll the open transaction back (nothing to do on a lost connection: the server did)."""
        self._in_tx = False
        with contextlib.suppress(Exception):
            self.dialect.rollback(self.raw)

    @property
    def in_transaction(self) -> bool:
        return self._in_tx

    @property
    def transaction_serial(self) -> int | None:
        """Which transaction of this connection is open (a number that changes with each), or None."""
        return self._tx_serial if self._in_tx else None

    # -- helpers ----------------------------------------------------------------------------
    @property
    def p(self) -> str:
        """The parameter placeholder of this driver."""
        return self.dialect.capabilities.paramstyle

    def table_sql(self, name: TableName) -> str:
        return self.dialect.table_sql(name)

    def meta(self, name: str) -> str:
        """The quoted, qualified name of a replication metadata table. The tracking tables
        (``TRACKING_TABLES``) only on a connection that flushed the tracking log: every reader and writer
        of them goes through here, so none can read them stale."""
        if name in TRACKING_TABLES and not self.tracking_flushed:
            raise TrackingNotFlushed(
                f"{self.label}: {name} used before the tracking log was flushed on this connection "
                "(call merge.tracking.pending.flush first)", obj=name)
        return self.dialect.metadata_table_sql(name)

    def reflect(self, name: TableName) -> TableInfo | None:
        return self.dialect.reflect_table(self, name)

    # -- the connection ---------------------------------------------------------------------
    @property
    def lost(self) -> bool:
        """The connection is gone (the server ended it, the network dropped it, or it was closed):
        every statement on it fails the same way until :meth:`reconnect`."""
        return bool(getattr(self.raw, "closed", False) or getattr(self.raw, "broken", False))

    def reconnect(self) -> None:
        """A new connection to the same database in place of this one (same URL and label). What the
        old one held is gone: its open transaction (rolled back by the server, unless its commit got
        through before the connection was lost), session settings, temporary tables."""
        fresh = self.dialect.connect(self.url, self.label)
        self.close()
        self.raw, self._in_tx = fresh.raw, False

    def revive(self) -> bool:
        """:meth:`reconnect` if the connection was lost; True when it was (raises ``ConnectionFailed``,
        a transient error, while the database cannot be reached)."""
        if not self.lost:
            return False
        self.reconnect()
        return True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.raw.close()

    def _error(self, exc: Exception, context: str) -> SparksyncError:
        """The driver's error, translated by the dialect. On a connection that is lost it is transient,
        whatever the server said last (an administrator's command, a crash of another backend): a
        reconnection may well succeed."""
        error = self.dialect.translate_error(exc, context)
        if not error.transient and self.lost:
            return ConnectionFailed(error.message, obj=error.obj)
        return error

    def __enter__(self) -> Replica:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Replica({self.dialect.capabilities.name}, {self.label})"


def _first_line(sql: str) -> str:
    s = " ".join(sql.split())
    return s if len(s) <= 120 else s[:117] + "..."
