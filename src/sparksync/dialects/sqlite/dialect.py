"""SQLite: the embedded default. One file per replica, one writer at a time, WAL journal."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import json
import os
import re
import sqlite3
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparksync.dialects.agent_locks import AgentLock
from sparksync.dialects.base import DialectBase
from sparksync.dialects.model import Column, ForeignKey, TableInfo
from sparksync.dialects.protocols import Capabilities
from sparksync.dialects.replica import Replica
from sparksync.dialects.templates import render_statements
from sparksync.errors import (
    ConnectionFailed,
    ConstraintViolation,
    DatabaseError,
    InvalidNameError,
    ReplicaDamaged,
    SchemaError,
    SparksyncError,
    ValueRejected,
)
from sparksync.filters import SqlFlavor
from sparksync.names import TableName
from sparksync.types import Kind, SqlType, canonical_real, decimal_type

# SQLite needs adapters for the Python types its driver does not know.
sqlite3.register_adapter(decimal.Decimal, str)
sqlite3.register_adapter(uuid.UUID, str)
sqlite3.register_adapter(dt.datetime, lambda v: v.isoformat(sep=" "))
sqlite3.register_adapter(dt.date, lambda v: v.isoformat())
sqlite3.register_adapter(dt.time, lambda v: v.isoformat())

# A UUIDv7-layout GUID: 48 bits of Unix milliseconds, version 7, variant 10xx, random rest.
_MS = "printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))"
NEW_ROWS = "temp.sparksync_new_rows"    # the flush's rows inserted without a rowguid, by rowid
NEW_GUID_SQL = (
    "lower(substr(" + _MS + ", 1, 8) || '-' || substr(" + _MS + ", 9, 4) || '-7' || "
    "substr(hex(randomblob(2)), 2, 3) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || "
    "substr(hex(randomblob(2)), 2, 3) || '-' || hex(randomblob(6)))"
)


def _json_float(text):
    """A JSON number (or "NaN"/"Infinity" string) -> float, parsed by Python as the row-at-a-time path does."""
    value = None if text is None else json.loads(text)
    return None if value is None else float(value)


def _json_text(text):
    """A JSON string -> str, keeping every character (U+0000 included)."""
    return None if text is None else json.loads(text)


def _lenient_text(data: bytes) -> str:
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


class SQLiteDialect(DialectBase):
    capabilities = Capabilities(
        name="sqlite",
        product="SQLite",
        supports_schemas=False,
        supports_procedures=False,
        supports_logical_decoding=False,
        concurrent_writers=False,
        paramstyle="?",
        sql=SqlFlavor("sqlite"),
        float_holds_nan=False,
    )
    begin_write_sql = "BEGIN IMMEDIATE"

    # -- connections ------------------------------------------------------------------------
    def connect(self, url: str, label: str | None = None) -> Replica:
        path = sqlite_path(url)
        if path != ":memory:":
            parent = Path(path).resolve().parent
            if not parent.is_dir():
                raise ConnectionFailed(f"cannot open SQLite database {path}: folder {parent} does not exist", obj=path)
        try:
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
        except sqlite3.Error as exc:
            raise ConnectionFailed(f"cannot open SQLite database {path}: {exc}", obj=path) from exc
        return Replica(self, raw, url, label or path)

    def damage(self, url: str) -> str | None:
        path = sqlite_path(url)
        if path == ":memory:" or not Path(path).is_file():
            return None
        try:
            raw = sqlite3.connect(path, isolation_level=None)
            try:
                found = [r[0] for r in raw.execute("PRAGMA quick_check(3)").fetchall()]
            finally:
                raw.close()
        except sqlite3.DatabaseError as exc:
            return str(exc)
        return None if found == ["ok"] else "; ".join(found)

    def set_aside(self, url: str, why: str = "damaged") -> str:
        path = sqlite_path(url)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        target = f"{path}.{why}-{stamp}"
        for suffix in ("", "-wal", "-shm"):         # the write-ahead log belongs to the same database
            if Path(path + suffix).exists():
                os.replace(path + suffix, target + suffix)
        return target

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
        if isinstance(exc, sqlite3.IntegrityError):
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
        if isinstance(exc, sqlite3.OperationalError):
            if "locked" in low or "busy" in low:
                return DatabaseError(f"{context}: {msg}", transient=True, native_code="SQLITE_BUSY")
            if "unable to open" in low or "disk i/o" in low:
                return ConnectionFailed(f"{context}: {msg}")
            if "no such table" in low or "no such column" in low:
                return SchemaError(f"{context}: {msg}")
        return DatabaseError(f"{context}: {msg}", transient=False)

    # -- names ------------------------------------------------------------------------------
    def resolve_name(self, name: TableName) -> TableName:
        if name.schema is None or name.schema.lower() == "main":
            return TableName(None, name.name)
        raise InvalidNameError(
            f"table {name}: SQLite has no schemas; name the table without '{name.schema}.'", obj=str(name)
        )

    def metadata_table_name(self, name: str) -> TableName:
        return TableName(None, name)

    def metadata_table_exists(self, replica: Replica, name: str) -> bool:
        return replica.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)) > 0

    # -- catalog ----------------------------------------------------------------------------
    def _real_name(self, replica: Replica, name: TableName) -> str | None:
        row = replica.query_one(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", (name.name,)
        )
        return None if row is None else row[0]

    def reflect_table(self, replica: Replica, name: TableName) -> TableInfo | None:
        name = self.resolve_name(name)
        real = self._real_name(replica, name)
        if real is None:
            return None
        cols, pk = [], []
        for cname, ctype, notnull, dflt, pkpos, hidden in replica.query(
            "SELECT name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?) "
            "WHERE hidden IN (0, 2, 3) ORDER BY cid", (real,)
        ):
            try:
                cols.append(Column(cname, self.parse_type(ctype or ""), not notnull, dflt, hidden in (2, 3)))
            except SchemaError as e:
                raise SchemaError(f"table {real}, column {cname}: {e.message}", obj=f"{real}.{cname}") from None
            if pkpos:
                pk.append((pkpos, cname))
        fks: dict[int, list] = {}
        for fid, ref, frm, to in replica.query(
            "SELECT id, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list(?) ORDER BY id, seq", (real,)
        ):
            fks.setdefault(fid, []).append((ref, frm, to))
        foreign_keys = []
        for parts in fks.values():
            ref = parts[0][0]
            ref_cols = [p[2] for p in parts]
            if any(c is None for c in ref_cols):
                ref_info = self.reflect_table(replica, TableName(None, ref)) if ref != real else None
                ref_pk = ref_info.primary_key if ref_info else tuple(c for _, c in sorted(pk))
                ref_cols = list(ref_pk)
            ref_real = self._real_name(replica, TableName(None, ref)) or ref
            foreign_keys.append(ForeignKey(tuple(p[1] for p in parts), TableName(None, ref_real), tuple(ref_cols)))
        unique = set()
        for idx_name, is_unique in replica.query("SELECT name, \"unique\" FROM pragma_index_list(?)", (real,)):
            if is_unique:
                idx_cols = replica.query("SELECT name FROM pragma_index_info(?)", (idx_name,))
                if len(idx_cols) == 1 and idx_cols[0][0] is not None:
                    unique.add(idx_cols[0][0])
        if len(pk) == 1:
            unique.add(pk[0][1])
        return TableInfo(TableName(None, real), tuple(cols), tuple(c for _, c in sorted(pk)),
                         tuple(foreign_keys), frozenset(unique))

    _TYPE = re.compile(r"^\s*([A-Za-z_ ]*?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$")

    def similar_tables(self, replica: Replica, name: TableName) -> list[str]:
        import difflib

        rows = replica.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        return difflib.get_close_matches(name.name, [r[0] for r in rows], n=3)

    def parse_type(self, type_text: str) -> SqlType:
        m = self._TYPE.match(type_text or "")
        base = (m.group(1) if m else type_text).upper().strip()
        a = int(m.group(2)) if m and m.group(2) else None
        b = int(m.group(3)) if m and m.group(3) else None
        if base in ("UUID", "GUID", "UNIQUEIDENTIFIER"):
            return SqlType(Kind.UUID)
        if "BOOL" in base:
            return SqlType(Kind.BOOLEAN)
        if base in ("SMALLINT", "INT2", "TINYINT"):
            return SqlType(Kind.SMALLINT)
        if base in ("INT4", "MEDIUMINT"):
            return SqlType(Kind.INTEGER)
        if "INT" in base:
            return SqlType(Kind.BIGINT)       # SQLite integers are 64-bit
        if base in ("TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "DATETIMEOFFSET"):
            return SqlType(Kind.TIMESTAMPTZ)
        if base in ("DATETIME", "TIMESTAMP", "TIMESTAMP WITHOUT TIME ZONE", "DATETIME2", "SMALLDATETIME"):
            return SqlType(Kind.TIMESTAMP)
        if base == "DATE":
            return SqlType(Kind.DATE)
        if base in ("TIME", "TIME WITHOUT TIME ZONE"):
            return SqlType(Kind.TIME)
        if base in ("JSON", "JSONB"):
            return SqlType(Kind.JSON)
        if "CHAR" in base or "CLOB" in base or "TEXT" in base:
            return SqlType(Kind.TEXT, length=a)
        if base == "" or "BLOB" in base or base in ("BYTEA", "BINARY", "VARBINARY"):
            return SqlType(Kind.BYTES)
        if base == "REAL" or "FLOA" in base or "DOUB" in base:
            return SqlType(Kind.DOUBLE)
        if base in ("MONEY",):
            return decimal_type(19, 4)
        if "DEC" in base or "NUMERIC" in base:
            return decimal_type(a, b)
        raise SchemaError(f"unsupported SQLite column type {type_text!r}")

    type_names = {
        Kind.BOOLEAN: "BOOLEAN", Kind.SMALLINT: "SMALLINT", Kind.INTEGER: "INTEGER", Kind.BIGINT: "BIGINT",
        Kind.REAL: "FLOAT", Kind.DOUBLE: "DOUBLE PRECISION", Kind.TEXT: "TEXT", Kind.BYTES: "BLOB",
        Kind.DATE: "DATE", Kind.TIME: "TIME", Kind.TIMESTAMP: "TIMESTAMP", Kind.TIMESTAMPTZ: "TIMESTAMPTZ",
        Kind.UUID: "UUID", Kind.JSON: "JSON",
    }
    varchar_format = "VARCHAR({length})"
    decimal_format = "NUMERIC({precision},{scale})"
    char_format = "CHAR({length})"
    numeric_name = "NUMERIC"

    # -- values -----------------------------------------------------------------------------
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

    def serial_primary_key(self, column: str) -> str:
        return f"{self.quote(column)} INTEGER PRIMARY KEY AUTOINCREMENT"   # never reused, even after deletes

    # -- set-based apply (merge/apply/staging.py) -------------------------------------------------
    def create_staging(self, replica: Replica, table: str, source: str, columns) -> None:
        # CREATE TABLE AS gives each c<i> the affinity of the article's column: a staged value is
        # converted as the table converts it, and again to the same value when it is copied there.
        # No key: rowguids are unique per article by construction, and every statement reads the
        # staged rows in one scan; an index costs more to build than it saves.
        typed = "".join(f", t.{self.quote(c)} AS c{i}" for i, c in enumerate(columns))
        replica.execute(f"DROP TABLE IF EXISTS temp.{table}")
        replica.execute(
            f"CREATE TEMP TABLE {table} AS SELECT CAST(NULL AS TEXT) AS rowguid, CAST(NULL AS TEXT) AS op, "
            "CAST(NULL AS TEXT) AS lineage, CAST(NULL AS TEXT) AS colv, CAST(NULL AS INTEGER) AS present, "
            f"CAST(NULL AS TEXT) AS clin, CAST(NULL AS TEXT) AS tlin, CAST(NULL AS TEXT) AS verdict{typed} "
            f"FROM {source} t WHERE 0")

    def create_staging_from(self, replica: Replica, table: str, select: str) -> None:
        replica.execute(f"DROP TABLE IF EXISTS temp.{table}")
        replica.execute(f"CREATE TEMP TABLE {table} AS {select}")

    def empty_lineage_sql(self) -> str:
        return "'{}'"

    def lineage_dominates_sql(self, a: str, b: str) -> str:
        return (f"NOT EXISTS (SELECT 1 FROM json_each({b}) e "
                f"WHERE coalesce(json_extract({a}, '$.\"' || e.key || '\"'), 0) < e.value)")

    def lineage_advance_sql(self, lineage: str, known: str, nickname: int, advance: int) -> str:
        return (f"coalesce(json_extract({lineage}, '$.\"{int(nickname)}\"'), 0) > "
                f"coalesce((SELECT max(value) FROM json_each({known})), 0) + {int(advance)}")

    def json_without_key_sql(self, expr: str, key: str) -> str:
        return f"json_remove({expr}, '$.\"{key.replace(chr(39), chr(39) * 2)}\"')"

    def staged_values(self, table: TableName, columns, alias: str, payload: str = "payload") -> tuple[str, list[str]]:
        return "", [self.json_typed(f"{alias}.{payload}", name, t) for name, t in columns]

    def json_field(self, expr: str, name: str) -> str:
        return f"json_extract({expr}, '$.\"{name}\"')"

    def json_typed(self, expr: str, name: str, t: SqlType) -> str:
        value = self.json_field(expr, name)
        if t.kind in (Kind.TIMESTAMP, Kind.TIMESTAMPTZ):
            return f"replace({value}, 'T', ' ')"        # isoformat(sep=" "), as the adapter stores it
        if t.kind in (Kind.REAL, Kind.DOUBLE):
            return f"sparksync_float({expr} -> '$.\"{name}\"')"   # Python's float(), bit for bit
        if t.kind is Kind.BYTES:
            return f"sparksync_unbase64({value})"
        if t.kind in (Kind.TEXT, Kind.JSON):
            # json_extract ends a string at U+0000; the rare payload holding one is read by Python
            return (f"CASE WHEN instr({expr}, '\\u0000') > 0 THEN sparksync_text({expr} -> '$.\"{name}\"') "
                    f"ELSE {value} END")
        return value

    def json_has(self, expr: str, name: str) -> str:
        return f"(json_type({expr}, '$.\"{name}\"') IS NOT NULL)"

    def tx_staging_table_ddl(self, table: str) -> str:
        return (f"CREATE TEMP TABLE IF NOT EXISTS {table} (ord INTEGER PRIMARY KEY, article_id INTEGER NOT NULL, "
                "op TEXT NOT NULL, wave INTEGER, after TEXT, before TEXT)")

    # -- merge change tracking --------------------------------------------------------------
    def new_rowguid_sql(self) -> str:
        return NEW_GUID_SQL

    def render_column_type(self, table: TableInfo, column) -> str:
        # A single-column integer key is declared exactly INTEGER, so it is the rowid (as it is in a
        # SQLite publisher's table): one b-tree for rows and key instead of two.
        if list(table.primary_key) == [column.name] and column.type.kind in (Kind.INTEGER, Kind.BIGINT):
            return "INTEGER"
        return super().render_column_type(table, column)

    def install_support_objects(self, replica: Replica) -> None:
        return None

    def add_rowguid_column(self, replica: Replica, table: TableName, column: str) -> None:
        # ALTER TABLE ADD COLUMN cannot take an expression default in SQLite: the insert trigger
        # fills the column for rows inserted without one, and existing rows are backfilled here.
        t = self.table_sql(table)
        replica.execute(f"ALTER TABLE {t} ADD COLUMN {self.quote(column)} UUID")
        replica.execute(f"UPDATE {t} SET {self.quote(column)} = {NEW_GUID_SQL} WHERE {self.quote(column)} IS NULL")

    def adopt_rowguid_column(self, replica: Replica, table: TableName, column: str) -> None:
        t, c = self.table_sql(table), self.quote(column)
        replica.execute(f"UPDATE {t} SET {c} = lower({c}) WHERE {c} <> lower({c})")
        replica.execute(f"UPDATE {t} SET {c} = {NEW_GUID_SQL} WHERE {c} IS NULL")

    def render_merge_triggers(self, ctx: dict) -> list[str]:
        return render_statements("sqlite/templates/merge_triggers.sql", ctx)

    def render_flush(self, ctx: dict) -> list[str]:
        return render_statements("sqlite/templates/merge_flush.sql", {**ctx, "new_rows": NEW_ROWS})

    def claim_pending(self, replica: Replica, articles: Sequence[dict], only: tuple[int, str, Sequence[Any]] | None = None,
                      wait: bool = False):
        # One writer at a time: every entry of the log is committed, or this transaction's own. So the
        # log itself is the claimed set (``only`` needs nothing narrower), emptied by release_pending.
        # Rows inserted without a rowguid are found through the rowguid index (NULLs first) and noted in
        # the connection's temporary table: the flush gives them rowguids and their first version.
        pending = self.metadata_table_sql("MSmerge_pending")
        replica.execute(f"CREATE TEMP TABLE IF NOT EXISTS {NEW_ROWS} (tablenick INTEGER NOT NULL, rid INTEGER NOT NULL, "
                        "PRIMARY KEY (tablenick, rid))")
        nicks, n = set(), 0
        for ctx in articles:
            rg = ctx["rowguid"]
            cur = replica.execute(f"INSERT INTO {NEW_ROWS} (tablenick, rid) SELECT {int(ctx['tablenick'])}, rowid "
                                  f"FROM {ctx['table']} WHERE {rg} IS NULL")
            if cur.rowcount:
                nicks.add(int(ctx["tablenick"]))
                n += cur.rowcount
        for nick, k in replica.query(f"SELECT tablenick, count(*) FROM {pending} GROUP BY tablenick"):
            nicks.add(int(nick))
            n += int(k)
        return pending, sorted(nicks), n

    def release_pending(self, replica: Replica, source: str) -> None:
        replica.execute(f"DELETE FROM {source}")
        replica.execute(f"DELETE FROM {NEW_ROWS}")

    def flush_generation(self, replica: Replica) -> int | None:
        return self.current_open_generation(replica)

    def _trigger_names(self, artid: str) -> list[str]:
        return [f"MSmerge_{op}_{artid}" for op in ("ins", "upd", "del")]

    def drop_merge_triggers(self, replica: Replica, table: TableName, artid: str) -> None:
        for name in self._trigger_names(artid):
            replica.execute(f"DROP TRIGGER IF EXISTS {self.quote(name)}")

    def list_merge_triggers(self, replica: Replica, table: TableName) -> list[str]:
        real = self._real_name(replica, self.resolve_name(table)) or table.name
        return [r[0] for r in replica.query(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? AND name LIKE 'MSmerge_%' "
            "ORDER BY name", (real,))]

    def tracking_problems(self, replica: Replica, ctx: dict) -> list[str]:
        expected = {}
        for stmt in self.render_merge_triggers(ctx):
            m = re.match(r'CREATE TRIGGER "([^"]+)"', stmt)
            if m:
                expected[m.group(1)] = stmt
        have = dict(replica.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN ("
                                  + ", ".join("?" * len(expected)) + ")", list(expected)))
        problems = []
        for name, stmt in expected.items():
            if name not in have:
                problems.append(f"tracking trigger {name} on {ctx['table']} is missing")
            elif " ".join(have[name].split()) != " ".join(stmt.split()):
                problems.append(f"tracking trigger {name} on {ctx['table']} was altered")
        return problems

    def begin_agent_writes(self, replica: Replica) -> None:
        # Only the writer can see its own uncommitted flag; SQLite has one writer at a time.
        replica.execute(f"UPDATE {self.metadata_table_sql('MSmerge_replica')} SET applying = 1")

    def end_agent_writes(self, replica: Replica) -> None:
        replica.execute(f"UPDATE {self.metadata_table_sql('MSmerge_replica')} SET applying = 0")

    def current_open_generation(self, replica: Replica) -> int | None:
        return replica.scalar(
            f"SELECT max(generation) FROM {self.metadata_table_sql('MSmerge_genhistory')} WHERE genstatus = 0")

    def set_open_generation(self, replica: Replica, generation: int) -> None:
        return None  # the genhistory row with genstatus 0 is the open generation

    def try_claim_generation(self, replica: Replica, generation: int) -> bool:
        return True  # the caller holds SQLite's write lock: no other writer exists

    def lock_generation_numbers(self, replica: Replica) -> None:
        return None  # the caller holds SQLite's write lock: no other writer exists

    def index_exists(self, replica: Replica, schema: str | None, name: str) -> bool:
        return bool(replica.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)))

    def agent_lock(self, url: str, key: str) -> AgentLock:
        from sparksync.dialects.sqlite.agent_lock import FileLock, ProcessLock

        path = sqlite_path(url)
        return ProcessLock(key) if path == ":memory:" else FileLock(path, key)

    def stream(self, replica, sql, params, batch_rows, snapshot=None, lenient_text=False):
        # SQLite stores whatever bytes a client wrote as TEXT; the driver's default decoding fails the
        # whole fetch on one invalid byte sequence.
        raw = replica.raw
        before = raw.text_factory
        if lenient_text:
            raw.text_factory = _lenient_text
        cur = None
        try:
            cur = raw.execute(sql, tuple(params))
            while True:
                rows = cur.fetchmany(batch_rows)
                if not rows:
                    return
                yield rows
        except sqlite3.Error as exc:
            raise self.translate_error(exc, f"{replica.label}: {sql[:80]}") from exc
        finally:
            raw.text_factory = before
            if cur is not None:
                # an unfinished statement holds its read snapshot (and the write-ahead log) open: a
                # consumer that stopped early ends it here, not whenever the cursor is collected
                with contextlib.suppress(sqlite3.Error):
                    cur.close()

    @contextlib.contextmanager
    def consistent_reads(self, replica: Replica, workdir: str):
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
