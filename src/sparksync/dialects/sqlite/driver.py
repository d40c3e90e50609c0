"""SQLite's driver (the standard library's ``sqlite3``, or SQLCipher's for a file whose key was given:
``cipher.py``): a database URL as a file path, the connection (foreign keys on, the functions the apply's SQL
calls, WAL journal), statements, and the driver's errors as typed errors. The adapters of the Python types
``sqlite3`` does not know are registered when this module loads (SQLCipher's when it is first used)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import sqlite3
import uuid
from pathlib import Path

from sparksync.dialects.defaults import DriverDefaults
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.dialects.sqlite import cipher
from sparksync.errors import (
    ConnectionFailed,
    ConstraintViolation,
    DatabaseError,
    ReplicaDamaged,
    SchemaError,
    SparksyncError,
    ValueRejected,
)


def _register_adapters(module) -> None:
    """The adapters of the Python types a SQLite driver (``sqlite3``, or SQLCipher's) does not know."""
    module.register_adapter(decimal.Decimal, str)
    module.register_adapter(uuid.UUID, str)
    module.register_adapter(dt.datetime, lambda v: v.isoformat(sep=" "))
    module.register_adapter(dt.date, lambda v: v.isoformat())
    module.register_adapter(dt.time, lambda v: v.isoformat())


_register_adapters(sqlite3)
_ERRORS: dict[str, tuple[type[Exception], ...]] = {
    "Error": (sqlite3.Error,), "IntegrityError": (sqlite3.IntegrityError,),
    "OperationalError": (sqlite3.OperationalError,)}


def driver_errors() -> tuple[type[Exception], ...]:
    """The base error classes of the SQLite drivers in use (``sqlite3``'s, SQLCipher's once it is)."""
    return _ERRORS["Error"]


def _encrypted_driver():
    """SQLCipher's module, its adapters registered and its errors known to ``translate_error`` (once)."""
    module = cipher.driver()
    if module.Error not in _ERRORS["Error"]:
        _register_adapters(module)
        for name in _ERRORS:
            _ERRORS[name] = (*_ERRORS[name], getattr(module, name))
    return module


def _json_float(text):
    """A JSON number (or "NaN"/"Infinity" string) -> float, parsed by Python as the row-at-a-time path does."""
    value = None if text is None else json.loads(text)
    return None if value is None else float(value)


def _json_text(text):
    """A JSON string -> str, keeping every character (U+0000 included)."""
    return None if text is None else json.loads(text)


def decode_lenient(data: bytes) -> str:
    """TEXT as str; bytes that are not UTF-8 become lone surrogates (detected, never stored elsewhere)."""
    return data.decode("utf-8", "surrogateescape")


def _unbase64(text):
    return None if text is None else base64.b64decode(text)


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` -> ``rel.db``; ``sqlite:////abs.db`` -> ``/abs.db``; ``sqlite://`` -> memory."""
    if not url.startswith("sqlite://"):
        raise ConnectionFailed(f"not a SQLite URL: {url}")
    rest = url[len("sqlite://"):]
    if rest in ("", "/", "/:memory:"):
        return ":memory:"
    if not rest.startswith("/"):
        raise ConnectionFailed(f"invalid SQLite URL {url!r}: use sqlite:///relative.db or sqlite:////absolute.db")
    return rest[1:]


class SQLiteDriver(DriverDefaults):
    """``Driver`` on SQLite: one writer at a time, so a write transaction takes the write lock at once."""

    begin_write_sql = "BEGIN IMMEDIATE"

    def connect(self: Dialect, url: str, label: str | None = None) -> Replica:
        path = sqlite_path(url)
        if path != ":memory:":
            parent = Path(path).resolve().parent
            if not parent.is_dir():
                raise ConnectionFailed(f"cannot open SQLite database {path}: folder {parent} does not exist", obj=path)
        try:
            if cipher.keyed(path):      # an encrypted file (its key given: cipher.use_key)
                _encrypted_driver()
                raw = cipher.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
            else:
                raw = sqlite3.connect(path, isolation_level=None, timeout=30.0, check_same_thread=False)
            raw.execute("PRAGMA foreign_keys = ON")
            raw.create_function("sparksync_float", 1, _json_float, deterministic=True)
            raw.create_function("sparksync_unbase64", 1, _unbase64, deterministic=True)
            raw.create_function("sparksync_text", 1, _json_text, deterministic=True)
            raw.execute("PRAGMA busy_timeout = 30000")
            raw.execute("PRAGMA cache_size = -65536")   # 64 MiB: a batch touches every page of its tables
            if path != ":memory:":
                raw.execute("PRAGMA journal_mode = WAL")
                raw.execute("PRAGMA synchronous = NORMAL")
        except _ERRORS["Error"] as exc:
            if "not a database" in str(exc).lower():        # its header is not SQLite's: encrypted, or damaged
                raise cipher.refused_without_key(path) from None
            raise ConnectionFailed(f"cannot open SQLite database {path}: {exc}", obj=path) from exc
        return Replica(self, raw, url, label or path)

    def execute(self, raw, sql, params):
        return raw.execute(sql, tuple(params))

    def executemany(self, raw, sql, rows):
        return raw.executemany(sql, rows).rowcount

    def query(self, raw, sql, params):
        return raw.execute(sql, tuple(params)).fetchall()

    def translate_error(self, exc: BaseException, context: str) -> SparksyncError:
        msg = str(exc)
        low = msg.lower()
        name = getattr(exc, "sqlite_errorname", "") or ""
        if name in ("SQLITE_MISMATCH", "SQLITE_TOOBIG", "SQLITE_CONSTRAINT_DATATYPE") or "datatype mismatch" in low:
            return ValueRejected(f"{context}: {msg}", native_code=name or None)
        if isinstance(exc, (OverflowError, UnicodeEncodeError)):   # a value the driver cannot bind
            return ValueRejected(f"{context}: {type(exc).__name__}: {msg}")
        if isinstance(exc, _ERRORS["IntegrityError"]):
            kind = {"SQLITE_CONSTRAINT_PRIMARYKEY": "primary_key", "SQLITE_CONSTRAINT_UNIQUE": "unique",
                    "SQLITE_CONSTRAINT_FOREIGNKEY": "foreign_key", "SQLITE_CONSTRAINT_NOTNULL": "not_null",
                    "SQLITE_CONSTRAINT_CHECK": "check"}.get(name)
            if kind is None:
                kind = ("foreign_key" if "foreign key" in low else "not_null" if "not null" in low
                        else "check" if "check" in low else "unique")
            return ConstraintViolation(f"{context}: {msg}", kind=kind, native_code=name or None)
        if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in low or "not a database" in low:
            return ReplicaDamaged(f"{context}: {msg}: the SQLite file is damaged; restore it from a backup "
                                  "(a subscriber's can instead be reinitialized: 'sparksync reinit')")
        if isinstance(exc, _ERRORS["OperationalError"]):
            if "locked" in low or "busy" in low:
                return DatabaseError(f"{context}: {msg}", transient=True, native_code="SQLITE_BUSY")
            if "unable to open" in low or "disk i/o" in low:
                return ConnectionFailed(f"{context}: {msg}")
            if "no such table" in low or "no such column" in low:
                return SchemaError(f"{context}: {msg}")
        return DatabaseError(f"{context}: {msg}", transient=False)
