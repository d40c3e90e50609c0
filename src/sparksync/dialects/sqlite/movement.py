"""Rows in and out of SQLite: values as the driver stores them, streamed reads (text that is not UTF-8
read leniently when asked), and consistent reads from a page-level copy (SQLite's backup API)."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import os
import sqlite3
import uuid
from pathlib import Path

from sparksync.dialects.defaults import DataMovementDefaults
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.dialects.sqlite.driver import decode_lenient, driver_errors
from sparksync.types import Kind, SqlType, canonical_real


class SQLiteDataMovement(DataMovementDefaults):
    """``DataMovement`` on SQLite (bulk loads, bounded deletes and row locks are the defaults)."""

    def _converter(self, t: SqlType):
        k = t.kind
        if k is Kind.BOOLEAN:
            return int
        if k is Kind.TIMESTAMPTZ:
            return lambda v: v.astimezone(dt.UTC).isoformat(sep=" ") if isinstance(v, dt.datetime) else v
        if k is Kind.DECIMAL:
            return lambda v: str(v) if isinstance(v, decimal.Decimal) else v
        if k is Kind.REAL:
            return canonical_real    # a float4 widened by Arrow or a driver: stored as the shortest decimal
        return None

    def stream(self, replica, sql, params, batch_rows, snapshot=None, lenient_text=False):
        # SQLite stores whatever bytes a client wrote as TEXT; the driver's default decoding fails the
        # whole fetch on one invalid byte sequence.
        raw = replica.raw
        before = raw.text_factory
        if lenient_text:
            raw.text_factory = decode_lenient
        cur = None
        try:
            cur = raw.execute(sql, tuple(params))
            while True:
                rows = cur.fetchmany(batch_rows)
                if not rows:
                    return
                yield rows
        except driver_errors() as exc:
            raise self.translate_error(exc, f"{replica.label}: {sql[:80]}") from exc
        finally:
            raw.text_factory = before
            if cur is not None:
                # an unfinished statement holds its read snapshot (and the write-ahead log) open: a
                # consumer that stopped early ends it here, not whenever the cursor is collected
                with contextlib.suppress(*driver_errors()):
                    cur.close()

    @contextlib.contextmanager
    def consistent_reads(self: Dialect, replica: Replica, workdir: str):
        """A page-level copy of the database (SQLite's backup API): every reader sees one moment."""
        copy_path = Path(workdir) / f"consistent-{uuid.uuid4().hex}.db"
        copy_path.parent.mkdir(parents=True, exist_ok=True)
        dest = sqlite3.connect(str(copy_path))
        try:
            replica.raw.backup(dest)
        finally:
            dest.close()
        url = "sqlite:///" + str(copy_path.resolve())
        frozen = self.connect(url, f"{replica.label} (snapshot copy)")
        try:
            yield url, None, frozen
        finally:
            frozen.close()
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(str(copy_path) + suffix)
