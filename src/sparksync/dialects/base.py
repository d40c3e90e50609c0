"""The dialect protocol: what sparksync needs from a database, and what each database can do.

The table model lives in ``model.py``, the connection in ``replica.py``.

Core code asks :class:`Capabilities`, never a dialect's name. SQL that differs between databases
lives in the dialect (small hooks) or in its ``templates/`` folder (trigger and function SQL).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SchemaError, SparksyncError
from ..names import TableName, quote_ident
from ..types import Kind, SqlType
from .agent_locks import AgentLock
from .model import TableInfo
from .replica import Replica


@dataclass(frozen=True)
class Capabilities:
    name: str                              # the URL scheme
    product: str                           # the product's name, for messages
    supports_schemas: bool
    supports_procedures: bool
    supports_logical_decoding: bool
    concurrent_writers: bool               # several write transactions at once: generations must settle
    paramstyle: str                        # the placeholder the driver expects: "?" or "%s"
    joins_in_bulk: bool = False            # joining a staged batch to a table beats a lookup per row
                                           # (hash joins); SQLite's nested loops prefer correlated lookups
    text_holds_nul: bool = True            # text (and json) values may contain U+0000 (PostgreSQL: no)
    float_holds_nan: bool = True           # a float column keeps NaN (SQLite stores NULL instead)


def table_not_found(replica: Replica, name: TableName, publication: str) -> SchemaError:
    """The error for an article whose table does not exist, with the names it may have meant."""
    cands = replica.dialect.similar_tables(replica, replica.dialect.resolve_name(name))
    hint = f" (did you mean {', '.join(cands)}?)" if cands else ""
    return SchemaError(f"publication {publication}: table {name} does not exist in {replica.label}{hint}",
                       obj=str(name))


class Dialect(ABC):
    """What sparksync needs from one kind of database. One instance per kind; stateless."""

    capabilities: Capabilities
    begin_write_sql: str = "BEGIN"

    # -- connections and statements ---------------------------------------------------------
    @abstractmethod
    def connect(self, url: str, label: str | None = None) -> Replica: ...

    @abstractmethod
    def execute(self, raw: Any, sql: str, params: Sequence[Any]) -> Any: ...

    @abstractmethod
    def executemany(self, raw: Any, sql: str, rows: Iterable[Sequence[Any]]) -> int | None: ...

    @abstractmethod
    def query(self, raw: Any, sql: str, params: Sequence[Any]) -> list[tuple]: ...

    def commit(self, raw: Any) -> None:
        raw.execute("COMMIT")

    def rollback(self, raw: Any) -> None:
        raw.execute("ROLLBACK")

    @abstractmethod
    def translate_error(self, exc: BaseException, context: str) -> SparksyncError: ...

    # -- names ------------------------------------------------------------------------------
    def quote(self, name: str) -> str:
        return quote_ident(name)

    def resolve_name(self, name: TableName) -> TableName:
        """Fill in the default schema (or refuse a schema where the database has none)."""
        return name

    def destination_table(self, source: TableName) -> TableName:
        """Where a published table lives at a subscriber of this kind: the same schema and name where
        schemas exist, else the name."""
        if self.capabilities.supports_schemas:
            return self.resolve_name(source)
        return TableName(None, source.name)

    def table_sql(self, name: TableName) -> str:
        name = self.resolve_name(name)
        if name.schema is None:
            return self.quote(name.name)
        return f"{self.quote(name.schema)}.{self.quote(name.name)}"

    @abstractmethod
    def metadata_table_name(self, name: str) -> TableName:
        """Where a replication metadata table lives here (reflect it with this)."""

    def metadata_table_sql(self, name: str) -> str:
        return self.table_sql(self.metadata_table_name(name))

    @abstractmethod
    def metadata_table_exists(self, replica: Replica, name: str) -> bool: ...

    def json_param(self, value: Any) -> Any:
        """A JSON value as this driver takes it as a parameter (canonical text by default)."""
        return json.dumps(value, separators=(",", ":"), sort_keys=True)

    # -- catalog ----------------------------------------------------------------------------
    @abstractmethod
    def reflect_table(self, replica: Replica, name: TableName) -> TableInfo | None: ...

    @abstractmethod
    def parse_type(self, type_text: str) -> SqlType: ...

    @abstractmethod
    def similar_tables(self, replica: Replica, name: TableName) -> list[str]:
        """Existing tables whose names are close to ``name`` (for a "did you mean")."""

    type_names: dict[Kind, str]      # the DDL name of each kind
    varchar_format: str              # text with a length, e.g. "varchar({length})"
    char_format: str                 # blank-padded text, e.g. "character({length})"
    decimal_format: str              # e.g. "numeric({precision},{scale})"
    numeric_name: str                # an unconstrained decimal, e.g. "numeric"

    def json_literal(self, text: str) -> str:
        """A JSON value written in SQL, typed as the metadata's JSON columns want it (SQLite: text; a CAST
        to JSON there would take numeric affinity)."""
        return "'" + text.replace("'", "''") + "'"

    def render_type(self, t: SqlType) -> str:
        if t.kind is Kind.TEXT and t.fixed:
            return self.char_format.format(length=t.length or 1)
        if t.kind is Kind.TEXT and t.length:
            return self.varchar_format.format(length=t.length)
        if t.kind is Kind.DECIMAL:
            if t.precision is None:
                return self.numeric_name
            return self.decimal_format.format(precision=t.precision, scale=t.scale)
        return self.type_names[t.kind]

    def render_column_type(self, table: TableInfo, column) -> str:
        """The type of one column in a subscriber's CREATE TABLE."""
        return self.render_type(column.type)

    def render_create_table(self, table: TableInfo, rowguid: str | None) -> list[str]:
        """CREATE TABLE for a subscriber's copy of an article (types mapped, PK, FKs)."""
        cols = []
        for c in table.columns:
            spec = f"{self.quote(c.name)} {self.render_column_type(table, c)}"
            if not c.nullable or c.name in table.primary_key:
                spec += " NOT NULL"
            if rowguid is not None and c.name == rowguid:
                spec += f" DEFAULT ({self.new_rowguid_sql()})"
            cols.append(spec)
        cols.append("PRIMARY KEY (" + ", ".join(self.quote(c) for c in table.primary_key) + ")")
        for fk in table.foreign_keys:
            cols.append(
                "FOREIGN KEY (" + ", ".join(self.quote(c) for c in fk.columns) + ") REFERENCES "
                + self.table_sql(fk.ref_table) + " (" + ", ".join(self.quote(c) for c in fk.ref_columns) + ")"
            )
        stmts = []
        name = self.resolve_name(table.name)
        if name.schema is not None and self.capabilities.supports_schemas:
            stmts.append(f"CREATE SCHEMA IF NOT EXISTS {self.quote(name.schema)}")
        stmts.append(f"CREATE TABLE {self.table_sql(table.name)} (\n  " + ",\n  ".join(cols) + "\n)")
        if rowguid is not None:
            stmts.append(self.render_rowguid_index(table.name, rowguid))
        return stmts

    def relax_commit_durability(self, replica: Replica) -> None:
        """From now on, commits on this connection need not wait for the disk (see restore)."""
        return None

    def restore_commit_durability(self, replica: Replica) -> None:
        """Commits wait for the disk again; the next one makes every earlier one durable."""
        return None

    def typed_param(self, t: SqlType) -> str:
        """A placeholder for a value of type ``t`` (typed where the server resolves calls by type)."""
        return self.capabilities.paramstyle

    def render_procedure(self, shape, types: dict[str, SqlType]) -> list[str]:
        """CREATE PROCEDURE for a generated procedure of a transactional article (``shape``: a
        ``transactional.calls.ProcedureShape``; ``types``: the article's column types)."""
        raise NotImplementedError(f"{self.capabilities.name} has no stored procedures")

    def fold_identifier(self, name: str) -> str:
        """An unquoted identifier as this database stores it (PostgreSQL folds to lower case)."""
        return name

    def procedure_schema(self, replica: Replica, name: str, fallback: str | None) -> str | None:
        """The schema an unqualified procedure name resolves to (``supports_procedures``)."""
        raise NotImplementedError(f"{self.capabilities.name} has no stored procedures")

    def procedure_exists(self, replica: Replica, schema: str | None, name: str) -> bool:
        """Is there a stored procedure ``schema.name`` (``supports_procedures``)?"""
        raise NotImplementedError(f"{self.capabilities.name} has no stored procedures")

    def set_lock_timeout(self, replica: Replica, timeout: str) -> None:
        """From now on, a statement of this connection waiting longer than ``timeout`` (e.g. "2s") for
        a row lock fails (``concurrent_writers``: one stream must not wait forever on another)."""
        raise NotImplementedError(f"{self.capabilities.name} has one writer at a time")

    @abstractmethod
    def serial_primary_key(self, column: str) -> str:
        """A column definition: an integer primary key the database numbers in insert order."""

    def rowguid_index_name(self, table: TableName, rowguid: str) -> str:
        return f"MSmerge_idx_{table.slug}_{rowguid}"[:63]

    def render_rowguid_index(self, table: TableName, rowguid: str) -> str:
        idx = self.quote(self.rowguid_index_name(table, rowguid))
        return f"CREATE UNIQUE INDEX IF NOT EXISTS {idx} ON {self.table_sql(table)} ({self.quote(rowguid)})"

    @abstractmethod
    def index_exists(self, replica: Replica, schema: str | None, name: str) -> bool:
        """Whether index ``name`` exists (in ``schema``; None: the default one). Asked before a
        ``CREATE INDEX IF NOT EXISTS``, which on PostgreSQL locks the table against writes even when the
        index is there: a setup run again must not stop (or deadlock with) application writes."""

    # -- values -----------------------------------------------------------------------------
    def db_converters(self, types: Sequence[SqlType]):
        convs = [self._converter(t) for t in types]
        return convs

    def _converter(self, t: SqlType):
        return None

    # -- data movement ----------------------------------------------------------------------
    def bulk_load(self, replica: Replica, table: TableName, columns: Sequence[str], types: Sequence[SqlType],
                  rows: Iterable[Sequence[Any]]) -> int:
        """Load rows of logical values into ``table``; returns how many."""
        convs = self.db_converters(types)
        return self.load_rows(replica, self.table_sql(table), columns,
                              (tuple(v if (v is None or c is None) else c(v) for v, c in zip(r, convs)) for r in rows))

    def load_rows(self, replica: Replica, table_sql: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
        """Insert many rows of driver-ready values into ``table_sql`` (an already quoted name) at once;
        returns how many."""
        n = 0

        def counted():
            nonlocal n
            for r in rows:
                n += 1
                yield r

        ph = ", ".join([self.capabilities.paramstyle] * len(columns))
        replica.executemany(f"INSERT INTO {table_sql} ({', '.join(self.quote(c) for c in columns)}) VALUES ({ph})",
                            counted())
        return n

    def render_upsert(self, table: TableName, columns: Sequence[str], key: Sequence[str]) -> str:
        cols = ", ".join(self.quote(c) for c in columns)
        ph = ", ".join([self.capabilities.paramstyle] * len(columns))
        updates = [c for c in columns if c not in key]
        conflict = ", ".join(self.quote(c) for c in key)
        if updates:
            action = "DO UPDATE SET " + ", ".join(f"{self.quote(c)} = excluded.{self.quote(c)}" for c in updates)
        else:
            action = "DO NOTHING"
        return f"INSERT INTO {self.table_sql(table)} ({cols}) VALUES ({ph}) ON CONFLICT ({conflict}) {action}"

    @abstractmethod
    def stream(self, replica: Replica, sql: str, params: Sequence[Any], batch_rows: int,
               snapshot: str | None = None, lenient_text: bool = False) -> Iterator[list[tuple]]:
        """Run a query and yield its rows in lists of at most ``batch_rows`` (inside ``snapshot`` if given).
        ``lenient_text``: text that is not valid UTF-8 is read with its bad bytes as lone surrogates
        (so the caller can name the row) instead of failing the whole read."""

    @abstractmethod
    def consistent_reads(self, replica: Replica, workdir: str):
        """Context manager yielding ``(url, snapshot_id)``: a source whose reads, from any number of
        connections, all see the database as of one moment (SQLite: a backup copy; PostgreSQL: an
        exported snapshot). Also yields a Replica open on that moment as the third item."""

    def uuid_param(self) -> str:
        return self.capabilities.paramstyle

    # -- damaged databases --------------------------------------------------------------------
    def damage(self, url: str) -> str | None:
        """Why the database at ``url`` cannot be used at all (a file whose pages are corrupt), or None.
        A server database is never damaged in this sense: its server answers or it does not."""
        return None

    def set_aside(self, url: str) -> str:
        """Move a damaged database out of the way, keeping it (a new one is created at ``url``); returns
        where it went."""
        raise NotImplementedError(f"{self.capabilities.product} databases are not set aside")

    # -- set-based apply (merge/staging.py) -------------------------------------------------
    @abstractmethod
    def staging_table_ddl(self, table: str) -> str:
        """Create (if missing) the connection's temporary staging table: tablenick, rowguid, op,
        lineage, colv, payload (the change's row as JSON), present, clin, ccolv, tlin, verdict."""

    def load_staging(self, replica: Replica, table: str, rows: Sequence[Sequence[Any]]) -> None:
        """Insert (tablenick, rowguid, op, lineage, colv, payload) rows into the staging table."""
        p = self.capabilities.paramstyle
        replica.executemany(f"INSERT INTO {table} (tablenick, rowguid, op, lineage, colv, payload) "
                            f"VALUES ({', '.join([p] * 6)})", rows)

    @abstractmethod
    def empty_lineage_sql(self) -> str:
        """An empty lineage, as the metadata tables store one."""

    @abstractmethod
    def lineage_dominates_sql(self, a: str, b: str) -> str:
        """A boolean SQL expression: lineage ``a`` has seen every change lineage ``b`` has
        (``lineage.dominates``: a >= b entry by entry, a missing entry counting as 0)."""

    @abstractmethod
    def json_without_key_sql(self, expr: str, key: str) -> str:
        """A JSON object SQL expression without its member ``key`` (a checked identifier)."""

    def lineage_without_sql(self, lineage: str, nickname: int) -> str:
        """A lineage SQL expression without the entry of ``nickname``."""
        return self.json_without_key_sql(lineage, str(int(nickname)))

    def delete_some_sql(self, table_sql: str, where: str, limit: int) -> str:
        """A DELETE of at most ``limit`` rows of ``table_sql`` matching ``where``: one bounded step of
        a large cleanup, so that each transaction holds its locks briefly."""
        return (f"DELETE FROM {table_sql} WHERE rowid IN "
                f"(SELECT rowid FROM {table_sql} WHERE {where} LIMIT {int(limit)})")

    def row_lock_clause(self) -> str:
        """Appended to a SELECT to lock the rows it reads until the transaction ends, where other
        transactions may write at the same time (``concurrent_writers``); empty where the write
        transaction already excludes every other writer."""
        return ""

    @abstractmethod
    def staged_values(self, table: TableName, columns: Sequence[tuple[str, SqlType]], alias: str,
                      payload: str = "payload") -> tuple[str, list[str]]:
        """Read column values from a staging table's JSON column (``alias``.``payload``) exactly as the
        row-at-a-time apply would bind the decoded values. Returns (extra FROM text, one expression per
        column)."""

    @abstractmethod
    def json_field(self, expr: str, name: str) -> str:
        """SQL: the field ``name`` of the JSON object ``expr``, for comparing (None when absent)."""

    @abstractmethod
    def json_typed(self, expr: str, name: str, t: SqlType) -> str:
        """SQL: the field ``name`` of the JSON object ``expr`` (a row as the change JSON holds it) as a
        value of type ``t``, read as :meth:`staged_values` reads it."""

    @abstractmethod
    def json_has(self, expr: str, name: str) -> str:
        """SQL (boolean): the JSON object ``expr`` has a field ``name``."""

    @abstractmethod
    def tx_staging_table_ddl(self, table: str) -> str:
        """The connection's temporary table for staging commands: ord, article_id, op, wave, after, before."""

    def staged_key_moved_sql(self, columns: Sequence[tuple[str, SqlType]], staged: str, target: str) -> str:
        """A boolean SQL expression: the staged row (``staged``.payload) may carry other primary key
        values than the user's row ``target``. It may say true for equal values (that only costs an
        update of the key), never false for different ones."""
        return " OR ".join(f"{target}.{self.quote(n)} IS DISTINCT FROM {self.json_typed(f'{staged}.payload', n, t)}"
                           for n, t in columns)

    # -- merge change tracking --------------------------------------------------------------
    @abstractmethod
    def new_rowguid_sql(self) -> str:
        """A SQL expression producing a new time-ordered GUID (UUIDv7 layout)."""

    @abstractmethod
    def install_support_objects(self, replica: Replica) -> None:
        """Functions, sequences or schemas the metadata and triggers need (idempotent)."""

    @abstractmethod
    def add_rowguid_column(self, replica: Replica, table: TableName, column: str) -> None:
        """Add and backfill the rowguid column of a newly published table."""

    @abstractmethod
    def adopt_rowguid_column(self, replica: Replica, table: TableName, column: str) -> None:
        """Use an existing GUID column as the rowguid: fill missing values, give it a default."""

    @abstractmethod
    def render_merge_triggers(self, ctx: dict) -> list[str]:
        """The statements that (re)create the insert/update/delete tracking triggers of one article."""

    @abstractmethod
    def drop_merge_triggers(self, replica: Replica, table: TableName, artid: str) -> None: ...

    @abstractmethod
    def list_merge_triggers(self, replica: Replica, table: TableName) -> list[str]: ...

    @abstractmethod
    def tracking_problems(self, replica: Replica, ctx: dict) -> list[str]:
        """What is wrong with the tracking triggers of one article (``ctx``: ``trigger_context``): each
        missing, disabled or altered trigger (compared with what ``render_merge_triggers`` installs)."""

    @abstractmethod
    def begin_agent_writes(self, replica: Replica) -> None:
        """Inside a transaction: make the tracking triggers ignore this transaction's DML."""

    @abstractmethod
    def end_agent_writes(self, replica: Replica) -> None: ...

    @abstractmethod
    def current_open_generation(self, replica: Replica) -> int | None: ...

    @abstractmethod
    def set_open_generation(self, replica: Replica, generation: int) -> None:
        """Point new changes at ``generation`` (its genhistory row already exists, open)."""

    @abstractmethod
    def try_claim_generation(self, replica: Replica, generation: int) -> bool:
        """Inside a transaction: True (and hold it until commit) when no writer of ``generation`` is running."""

    def generation_writers(self, replica: Replica, generation: int) -> list[dict]:
        """The transactions that wrote into ``generation`` and are still open (``concurrent_writers``):
        {"pid", "seconds", "state", "application"} each."""
        return []

    @abstractmethod
    def agent_lock(self, url: str, key: str) -> AgentLock:
        """The lock named ``key`` in the database at ``url``, which one process at a time holds
        (``agent_locks.py``; who takes which: ``sparksync/locks.py``)."""

    def unstorable(self, t: SqlType, value: Any) -> str | None:
        """Why this database cannot hold ``value`` (a logical value of type ``t``) exactly, or None.
        Such a value makes its change a failed change here instead of arriving altered."""
        if value is None:
            return None
        if not self.capabilities.text_holds_nul and t.kind in (Kind.TEXT, Kind.JSON) and isinstance(value, str) \
                and ("\x00" in value or (t.kind is Kind.JSON and "\\u0000" in value)):
            return f"{self.capabilities.name} cannot store the NUL character (U+0000) in text"
        if not self.capabilities.float_holds_nan and t.kind in (Kind.REAL, Kind.DOUBLE) and isinstance(value, float) \
                and value != value:
            return f"{self.capabilities.name} cannot store NaN in a float column (it would become NULL)"
        return None

    def unstorable_markers(self) -> tuple[str, ...]:
        """Substrings of a change's row JSON that may signal an ``unstorable`` value (a quick scan
        before decoding): NUL is written as \\u0000, NaN as the string "NaN"."""
        out = []
        if not self.capabilities.text_holds_nul:
            out.append("\\u0000")
        if not self.capabilities.float_holds_nan:
            out.append('"NaN"')
        return tuple(out)
