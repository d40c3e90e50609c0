"""PostgreSQL's driver (psycopg 3): the connection, statements, placeholders, session settings, and the
server's errors as typed errors. psycopg is imported where it is used: ``dialects/__init__.py`` loads a
driver only when its dialect is used.

The loaders of a lenient read (``lenient_temporal``) are driver code too: the streamed reads of
``movement.py`` install them on their cursor.
"""

from __future__ import annotations

from typing import Any

from sparksync.dialects.defaults import DriverDefaults
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica, redact_url
from sparksync.errors import (
    ConnectionFailed,
    ConstraintViolation,
    DatabaseError,
    RowNotFound,
    SchemaError,
    SparksyncError,
    ValueRejected,
)
from sparksync.names import quote_literal
from sparksync.redaction import url_password
from sparksync.types import SqlType

ROW_NOT_FOUND_STATE = "SS598"     # raised by the generated update/delete procedures: SQL Server's 20598

_TRANSIENT_STATES = {"40001", "40P01", "55P03", "57014", "53300", "08000", "08003", "08006", "57P01"}
_CONSTRAINTS = {"23505": "unique", "23503": "foreign_key", "23502": "not_null", "23514": "check"}


def open_connection(url: str, **params: Any) -> Any:
    """A psycopg connection to ``url`` (with libpq ``params`` over the URL's) in autocommit mode;
    ConnectionFailed (the password out of its message) when the server cannot be reached or refuses it."""
    import psycopg

    password = url_password(url)
    if password is not None and "@" in password:
        # libpq ends the password at the first "@": the rest would be taken for the host name,
        # and printed in its error message
        raise ConnectionFailed(f"cannot connect to PostgreSQL at {redact_url(url)}: the password holds a raw '@'; "
                               "write it as %40 in the URL, or keep it out of the URL (${VAR}, PGPASSWORD or "
                               "~/.pgpass)", obj=redact_url(url))
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=10, **params)
    except psycopg.Error as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConnectionFailed(
            f"cannot connect to PostgreSQL at {redact_url(url)}: {redact_url(detail)}", obj=redact_url(url)
        ) from None


_LENIENT: dict = {}


def lenient_temporal(cur) -> None:
    """Dates, times and timestamps Python cannot hold ('infinity', BC, after year 9999, 24:00) are read
    as PostgreSQL's text instead of failing the whole read: the row they are in is then named (a
    failed change, or a snapshot error) rather than the read."""
    from psycopg.pq import Format

    for name in ("date", "time", "timestamp", "timestamptz"):
        oid = cur.adapters.types[name].oid
        base = cur.adapters.get_loader(oid, Format.TEXT)
        lenient = _LENIENT.get(base)
        if lenient is None:
            lenient = _LENIENT[base] = _lenient_loader(base)
        cur.adapters.register_loader(oid, lenient)


def _lenient_loader(base):
    import psycopg
    from psycopg.adapt import Loader

    class Lenient(Loader):
        def __init__(self, oid, context=None):
            super().__init__(oid, context)
            self._inner = base(oid, context)

        def load(self, data):
            if bytes(data[-3:]) == b" BC":          # psycopg would read it as the same date AD
                return bytes(data).decode("utf-8")
            try:
                return self._inner.load(data)
            except (psycopg.DataError, ValueError, OverflowError):
                return bytes(data).decode("utf-8")

    return Lenient


class PostgresDriver(DriverDefaults):
    """``Driver`` on PostgreSQL."""

    def connect(self: Dialect, url: str, label: str | None = None) -> Replica:
        return Replica(self, open_connection(url), url, label or redact_url(url))

    def execute(self, raw, sql, params):
        return raw.execute(sql, tuple(params) if params else None)

    def executemany(self, raw, sql, rows):
        with raw.cursor() as cur:
            cur.executemany(sql, list(rows))
            return cur.rowcount

    def query(self, raw, sql, params):
        return raw.execute(sql, tuple(params) if params else None).fetchall()

    def translate_error(self, exc: BaseException, context: str) -> SparksyncError:
        import psycopg

        state = getattr(exc, "sqlstate", None)
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if state in _CONSTRAINTS:
            kind = _CONSTRAINTS[state]
            diag = getattr(exc, "diag", None)
            if kind == "unique" and diag is not None and (diag.constraint_name or "").endswith("_pkey"):
                kind = "primary_key"
            return ConstraintViolation(f"{context}: {msg}", kind=kind, native_code=state)
        if state == ROW_NOT_FOUND_STATE:
            return RowNotFound(f"{context}: {msg}")
        if state is not None and state.startswith("22"):     # data exception: this value, not the batch
            diag = getattr(exc, "diag", None)
            return ValueRejected(f"{context}: {msg}", native_code=state,
                                 column=getattr(diag, "column_name", None) if diag is not None else None)
        if state in ("42P01", "42703", "3F000"):
            return SchemaError(f"{context}: {msg}")
        if isinstance(exc, psycopg.OperationalError) and state is None:
            return ConnectionFailed(f"{context}: {redact_url(msg)}")
        return DatabaseError(f"{context}: {msg}", transient=state in _TRANSIENT_STATES, native_code=state)

    def set_lock_timeout(self, replica: Replica, timeout: str) -> None:
        replica.execute(f"SET lock_timeout = {quote_literal(timeout)}")

    def relax_commit_durability(self, replica: Replica) -> None:
        # As PostgreSQL's own logical replication apply does: a crash loses the last commits together
        # with the watermark they moved, so they are delivered again; nothing is applied twice.
        replica.execute("SET synchronous_commit = off")

    def restore_commit_durability(self, replica: Replica) -> None:
        replica.execute("SET synchronous_commit = on")

    def typed_param(self: Dialect, t: SqlType) -> str:
        return f"%s::{self.render_type(t)}"

    def uuid_param(self) -> str:
        return "%s::uuid"

    def json_param(self, value: Any) -> Any:
        from psycopg.types.json import Jsonb

        return Jsonb(value)
