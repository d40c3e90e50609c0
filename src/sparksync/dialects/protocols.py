"""What sparksync needs from a database, one protocol per concern, and what each database can do.

Core code asks :class:`Capabilities`, never a dialect's name. A dialect (``sqlite/dialect.py``,
``postgres/dialect.py``) satisfies every protocol here; :class:`Dialect` is all of them at once, what
``Replica.dialect`` is. Code that needs one concern types against that concern's protocol
(``merge/tracking/generations.py``: :class:`MergeHooks`; ``locks.py``: :class:`Locks`). The defaults both dialects
share are ``defaults.py``; ``base.py`` composes them into the class both dialects extend.

SQL that differs between databases lives in the dialect (small hooks) or in its ``templates/`` folder
(trigger and function SQL).

The protocols that take a connection are generic in it (``R``): the connection is ``replica.Replica``,
which holds a ``Dialect[Replica]``. So ``replica.py`` imports this module and this module never imports
it back: the arrow runs one way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from sparksync.dialects.agent_locks import AgentLock
from sparksync.dialects.model import Column, TableInfo
from sparksync.errors import SparksyncError
from sparksync.names import TableName
from sparksync.sql_flavor import SqlFlavor
from sparksync.types import Kind, SqlType

R = TypeVar("R")
"""The connection a dialect works on (``replica.Replica``), in a protocol that also makes one."""
R_contra = TypeVar("R_contra", contravariant=True)
"""The connection a dialect works on, in a protocol that only takes one."""


@dataclass(frozen=True)
class Capabilities:
    name: str                              # the URL scheme
    product: str                           # the product's name, for messages
    supports_schemas: bool
    supports_procedures: bool
    supports_logical_decoding: bool
    concurrent_writers: bool               # several write transactions at once: generations must settle
    paramstyle: str                        # the placeholder the driver expects: "?" or "%s"
    sql: SqlFlavor                         # how filters are written here (sqlglot's name of its SQL, booleans)
    text_holds_nul: bool = True            # text (and json) values may contain U+0000 (PostgreSQL: no)
    float_holds_nan: bool = True           # a float column keeps NaN (SQLite stores NULL instead)
    takes_server_text: bool = False        # COPY reads a value in the text form a PostgreSQL publisher's log
                                           # holds it in (the transactional apply stages it unparsed)
    keyed_rowguids: bool = False           # a rowguid publishing adds is kept beside the table, keyed by its
                                           # primary key, not a column of it (merge/tracking/identity.py)
    lateral_joins: bool = False            # a subquery per row of a join (LATERAL): one index probe reads a row
                                           # whole (SQLite: correlated subqueries, cheap in process)
    stable_rowids: bool = False            # a row's rowid, read in a transaction, finds it again in that transaction
                                           # (SQLite): the apply writes metadata rows it looked up by rowid


@runtime_checkable
class Driver(Protocol[R]):
    """The connection: statements, transactions, parameters, errors. One instance per kind; stateless."""

    capabilities: Capabilities
    begin_write_sql: str                   # what opens a write transaction ("BEGIN IMMEDIATE" on SQLite)

    def connect(self, url: str, label: str | None = None) -> R: ...

    def execute(self, raw: Any, sql: str, params: Sequence[Any]) -> Any: ...

    def executemany(self, raw: Any, sql: str, rows: Iterable[Sequence[Any]]) -> int | None: ...

    def query(self, raw: Any, sql: str, params: Sequence[Any]) -> list[tuple]: ...

    def commit(self, raw: Any) -> None: ...

    def rollback(self, raw: Any) -> None: ...

    def translate_error(self, exc: BaseException, context: str) -> SparksyncError:
        """The typed error (``errors.py``) of a driver's exception."""

    def relax_commit_durability(self, replica: R) -> None:
        """From now on, commits on this connection need not wait for the disk (see restore)."""

    def restore_commit_durability(self, replica: R) -> None:
        """Commits wait for the disk again; the next one makes every earlier one durable."""

    def set_lock_timeout(self, replica: R, timeout: str) -> None:
        """From now on, a statement of this connection waiting longer than ``timeout`` (e.g. "2s") for
        a row lock fails (``concurrent_writers``: one stream must not wait forever on another)."""

    def typed_param(self, t: SqlType) -> str:
        """A placeholder for a value of type ``t`` (typed where the server resolves calls by type)."""

    def uuid_param(self) -> str:
        """A placeholder for a GUID compared with a uuid column."""

    def json_param(self, value: Any) -> Any:
        """A JSON value as this driver takes it as a parameter (canonical text by default)."""


@runtime_checkable
class Naming(Protocol):
    """Names as this database writes them: quoting, default schemas, where tables live."""

    capabilities: Capabilities

    def quote(self, name: str) -> str: ...

    def fold_identifier(self, name: str) -> str:
        """An unquoted identifier as this database stores it (PostgreSQL folds to lower case)."""

    def resolve_name(self, name: TableName) -> TableName:
        """Fill in the default schema (or refuse a schema where the database has none)."""

    def destination_table(self, source: TableName) -> TableName:
        """Where a published table lives at a subscriber of this kind: the same schema and name where
        schemas exist, else the name."""

    def table_sql(self, name: TableName) -> str:
        """A table's name, resolved and quoted, for a statement."""

    def metadata_table_name(self, name: str) -> TableName:
        """Where a replication metadata table lives here (reflect it with this)."""

    def metadata_table_sql(self, name: str) -> str: ...

    def rowguid_index_name(self, table: TableName, rowguid: str) -> str: ...


@runtime_checkable
class Catalog(Protocol[R_contra]):
    """What exists in the database: tables, their columns and types, indexes."""

    def reflect_table(self, replica: R_contra, name: TableName) -> TableInfo | None: ...

    def parse_type(self, type_text: str) -> SqlType:
        """A column type as the catalog writes it -> its logical type (SchemaError if unsupported)."""

    def similar_tables(self, replica: R_contra, name: TableName) -> list[str]:
        """Existing tables whose names are close to ``name`` (for a "did you mean")."""

    def metadata_table_exists(self, replica: R_contra, name: str) -> bool: ...

    def index_exists(self, replica: R_contra, schema: str | None, name: str) -> bool:
        """Whether index ``name`` exists (in ``schema``; None: the default one). Asked before a
        ``CREATE INDEX IF NOT EXISTS``, which on PostgreSQL locks the table against writes even when the
        index is there: a setup run again must not stop (or deadlock with) application writes."""


@runtime_checkable
class Ddl(Protocol):
    """Types and CREATE statements in this database's words."""

    type_names: dict[Kind, str]      # the DDL name of each kind
    varchar_format: str              # text with a length, e.g. "varchar({length})"
    char_format: str                 # blank-padded text, e.g. "character({length})"
    decimal_format: str              # e.g. "numeric({precision},{scale})"
    numeric_name: str                # an unconstrained decimal, e.g. "numeric"

    def render_type(self, t: SqlType) -> str: ...

    def render_column_type(self, table: TableInfo, column: Column) -> str:
        """The type of one column in a subscriber's CREATE TABLE."""

    def render_create_table(self, table: TableInfo, rowguid: str | None, index: bool = True) -> list[str]:
        """CREATE TABLE for a subscriber's copy of an article (types mapped, PK, FKs), and the rowguid's unique index
        unless ``index`` is False (a snapshot's load makes it after the rows are in: one sort, not an insert into the
        index per row)."""

    def render_rowguid_index(self, table: TableName, rowguid: str) -> str: ...

    def serial_primary_key(self, column: str) -> str:
        """A column definition: an integer primary key the database numbers in insert order."""

    def json_literal(self, text: str) -> str:
        """A JSON value written in SQL, typed as the metadata's JSON columns want it (SQLite: text; a CAST
        to JSON there would take numeric affinity)."""

    def alter_column(self, replica: Any, table: TableInfo, old: Column, new: Column) -> list[str]:
        """Column ``old`` of ``table`` made ``new`` (type, nullability, default; the same name), in the caller's
        transaction; returns the statements run (none when it already was)."""

    def rename_column(self, replica: Any, table: TableName, old: str, new: str) -> list[str]:
        """Column ``old`` of ``table`` renamed ``new``, in the caller's transaction (indexes, views and triggers
        follow it)."""


@runtime_checkable
class DataMovement(Protocol[R]):
    """Rows in and out in bulk, consistent reads, bounded deletes, row locks."""

    def db_converters(self, types: Sequence[SqlType]) -> list:
        """Per type: a function turning a logical value into what the driver stores, or None (as is)."""

    def bulk_load(self, replica: R, table: TableName, columns: Sequence[str], types: Sequence[SqlType],
                  rows: Iterable[Sequence[Any]]) -> int:
        """Load rows of logical values into ``table``; returns how many."""

    def load_rows(self, replica: R, table_sql: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
        """Insert many rows of driver-ready values into ``table_sql`` (an already quoted name) at once;
        returns how many."""

    def stream(self, replica: R, sql: str, params: Sequence[Any], batch_rows: int,
               snapshot: str | None = None, lenient_text: bool = False) -> Iterator[list[tuple]]:
        """Run a query and yield its rows in lists of at most ``batch_rows`` (inside ``snapshot`` if given).
        ``lenient_text``: text that is not valid UTF-8 is read with its bad bytes as lone surrogates
        (so the caller can name the row) instead of failing the whole read."""

    def consistent_reads(self, replica: R, workdir: str) -> AbstractContextManager[tuple[str, str | None, R]]:
        """Context manager yielding ``(url, snapshot_id, frozen)``: a source whose reads, from any number of
        connections, all see the database as of one moment (SQLite: a backup copy; PostgreSQL: an
        exported snapshot), and a Replica open on that moment."""

    def delete_some_sql(self, table_sql: str, where: str, limit: int) -> str:
        """A DELETE of at most ``limit`` rows of ``table_sql`` matching ``where``: one bounded step of
        a large cleanup, so that each transaction holds its locks briefly."""

    def row_lock_clause(self) -> str:
        """Appended to a SELECT to lock the rows it reads until the transaction ends, where other
        transactions may write at the same time (``concurrent_writers``); empty where the write
        transaction already excludes every other writer."""


@runtime_checkable
class StagedRows(Protocol):
    """SQL reading the rows of a staged batch, held as JSON, for the transactional set-based apply
    (``transactional/delivery/bulk.py``; the merge apply stages typed columns: ``MergeStaging``)."""

    def staged_values(self, table: TableName, columns: Sequence[tuple[str, SqlType]], alias: str,
                      payload: str = "payload") -> tuple[str, list[str]]:
        """Read column values from a staging table's JSON column (``alias``.``payload``) exactly as the
        row-at-a-time apply would bind the decoded values. Returns (extra FROM text, one expression per
        column)."""

    def json_field(self, expr: str, name: str) -> str:
        """SQL: the field ``name`` of the JSON object ``expr``, for comparing (None when absent)."""

    def json_typed(self, expr: str, name: str, t: SqlType) -> str:
        """SQL: the field ``name`` of the JSON object ``expr`` (a row as the change JSON holds it) as a
        value of type ``t``, read as :meth:`staged_values` reads it."""

    def json_has(self, expr: str, name: str) -> str:
        """SQL (boolean): the JSON object ``expr`` has a field ``name``."""


@runtime_checkable
class MergeStaging(Protocol[R_contra]):
    """The merge apply's typed staging tables and the lineage SQL its verdicts are computed with."""

    def create_staging(self, replica: R_contra, table: str, source: str, columns: Sequence[str]) -> None:
        """(Re)create the connection's temporary staging table ``table`` of one article: rowguid, op,
        lineage, colv, present, clin, tlin, verdict, then ``c0``, ``c1``, ... typed as the article's columns
        ``columns`` of the table ``source`` (SQL) are, so a staged value is stored as the table stores it."""

    def load_staging(self, replica: R_contra, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]) -> None:
        """Insert typed rows, given column by column (``values[i]`` the values of ``columns[i]``, every list as
        long), into the staging table (rowguid, op, lineage, colv as the changes carry them, then ``c0``,
        ``c1``, ... as the row-at-a-time apply binds the values); a value the staging table refuses raises
        ConstraintViolation / ValueRejected."""

    def create_staging_from(self, replica: R_contra, table: str, select: str) -> None:
        """(Re)create the temporary table ``table`` holding the rows of ``select``, for the batch's transaction."""

    def distinct_sql(self, a: str, b: str) -> str:
        """A boolean SQL expression: the values ``a`` and ``b`` differ (NULL equal to NULL)."""

    def empty_lineage_sql(self) -> str:
        """An empty lineage, as the metadata tables store one."""

    def lineage_dominates_sql(self, a: str, b: str) -> str:
        """A boolean SQL expression: lineage ``a`` has seen every change lineage ``b`` has
        (``lineage.dominates``: a >= b entry by entry, a missing entry counting as 0)."""

    def json_without_key_sql(self, expr: str, key: str) -> str:
        """A JSON object SQL expression without its member ``key`` (a checked identifier)."""

    def json_rename_key_sql(self, expr: str, old: str, new: str) -> str:
        """A JSON object SQL expression with its member ``old`` (if any) named ``new`` (checked identifiers)."""

    def lineage_without_sql(self, lineage: str, nickname: int) -> str:
        """A lineage SQL expression without the entry of ``nickname``."""

    def lineage_entry_sql(self, lineage: str, nickname: int) -> str:
        """An integer SQL expression: the entry of ``nickname`` in lineage ``lineage`` (0 when it has none)."""

    def lineage_advance_sql(self, lineage: str, known: str, nickname: int, advance: int) -> str:
        """A boolean SQL expression: the entry of ``nickname`` in lineage ``lineage`` is more than
        ``advance`` above the highest version of lineage ``known`` (0 when it has none)."""


@runtime_checkable
class MergeHooks(Protocol[R_contra]):
    """Merge change tracking at a replica: rowguids, tracking triggers, the agent's own writes, open
    generations."""

    def new_rowguid_sql(self) -> str:
        """A SQL expression producing a new time-ordered GUID (UUIDv7 layout)."""

    def column_users(self, replica: R_contra, table: TableName, column: str) -> list[str]:
        """The application's objects (views, triggers, indexes) that use ``column`` of ``table``, named."""

    def ordered_rowguids_sql(self, order_by: str) -> tuple[str, str]:
        """New rowguids for the rows of one statement, ascending in the order of ``order_by`` where the database
        can: (a CTE named ``g``, the expression), for ``WITH {cte} SELECT ..., {expression} FROM ..., g``."""

    def install_support_objects(self, replica: R_contra) -> None:
        """Functions, sequences or schemas the metadata and triggers need (idempotent)."""

    def add_rowguid_column(self, replica: R_contra, table: TableName, column: str) -> None:
        """Add and backfill the rowguid column of a newly published table."""

    def adopt_rowguid_column(self, replica: R_contra, table: TableName, column: str) -> None:
        """Use an existing GUID column as the rowguid: fill missing values, give it a default."""

    def render_merge_triggers(self, ctx: dict) -> list[str]:
        """The statements that (re)create the insert/update/delete tracking triggers of one article."""

    def render_flush(self, ctx: dict) -> list[str]:
        """The statements that flush one article's claimed tracking log entries into its metadata
        (``ctx``: ``trigger_context`` with ``source``, the claimed entries; ``__GEN__``: the generation)."""

    def claim_pending(self, replica: R_contra, articles: Sequence[dict],
                      only: tuple[int, str, Sequence[Any]] | None = None,
                      wait: bool = False) -> tuple[str, list[int], int]:
        """Inside a transaction: claim the committed entries of the tracking log (``only``: those of one
        article whose rowguids the SQL given selects, with its parameters; ``wait``: for entries another
        flush holds, rather than leaving them to it). Returns the relation holding them, the
        tablenicks it has and how many changed rows it claimed. ``articles``: every tracked article's
        ``trigger_context``."""

    def release_pending(self, replica: R_contra, source: str) -> None:
        """The claimed entries are flushed: forget them."""

    def flush_generation(self, replica: R_contra) -> int | None:
        """Inside a transaction: the open generation flushed changes go to, held as a writer's where
        writers run at once (commit safety: it is not enumerated before this transaction ends)."""

    def drop_merge_triggers(self, replica: R_contra, table: TableName, artid: str) -> None: ...

    def list_merge_triggers(self, replica: R_contra, table: TableName) -> list[str]: ...

    def tracking_problems(self, replica: R_contra, ctx: dict) -> list[str]:
        """What is wrong with the tracking triggers of one article (``ctx``: ``trigger_context``): each
        missing, disabled or altered trigger (compared with what ``render_merge_triggers`` installs)."""

    def captures_from_log(self, replica: R_contra) -> bool:
        """This database's merge changes are read from the server's log, not logged by triggers (PostgreSQL,
        ``change_capture = "log"``: ``dialects/postgres/log_capture.py``)."""

    def peek_log(self, replica: R_contra, articles: Sequence[dict]) -> list[tuple]:
        """Read-only: the entries (tablenick, rowguid, op, cols) the next flush will read from the server's log."""

    def skip_log(self, replica: R_contra) -> None:
        """Inside the transaction that throws the tracking metadata away: nothing the log holds now is recorded."""

    def capture_state(self, replica: R_contra) -> dict:
        """How changes are captured here (``merge.tracking.capture.state``)."""

    def capture_problems(self, replica: R_contra) -> list[str]:
        """What keeps the change capture of this database from working (a lost slot), as messages; empty: none."""

    def log_mark(self, replica: R_contra) -> int:
        """Outside any transaction: 0 when the server's log holds no change left to read, else a value that
        differs from one call to the next while changes wait (a web door's mark)."""

    def log_capture_possible(self, replica: R_contra) -> bool:
        """The server lets this database's changes be read from its log (``change_capture = "auto"``)."""

    def prepare_log_capture(self, replica: R_contra) -> None:
        """Outside any transaction: what reading the log needs (a ConfigurationError where it cannot)."""

    def drop_log_capture(self, replica: R_contra) -> None:
        """Inside a transaction: the log no longer read (its slot dropped); nothing where there is none."""

    def capture_from_log(self, replica: R_contra, ctx: dict) -> None:
        """Inside setup's transaction: one article's changes read from the log (and no trigger of it left)."""

    def stop_capture_from_log(self, replica: R_contra, ctx: dict) -> None:
        """Inside a transaction: the article's changes no longer read from the log (``ctx``: its ``table_name``)."""

    def begin_agent_writes(self, replica: R_contra) -> None:
        """Inside a transaction: make change tracking ignore this transaction's DML until ``end_agent_writes``."""

    def end_agent_writes(self, replica: R_contra) -> None: ...

    def current_open_generation(self, replica: R_contra) -> int | None: ...

    def set_open_generation(self, replica: R_contra, generation: int) -> None:
        """Point new changes at ``generation`` (its genhistory row already exists, open)."""

    def try_claim_generation(self, replica: R_contra, generation: int) -> bool:
        """Inside a transaction: True (and hold it until commit) when no writer of ``generation`` is running."""

    def lock_generation_numbers(self, replica: R_contra) -> None:
        """Inside a transaction: until it ends, no other transaction numbers a generation. A generation is
        numbered above every committed one; two transactions numbering at once (the web door applying
        several devices' uploads, a merge agent's apply, closing the open generation) would take the same
        number, or one would commit below a bound a download has already passed."""

    def generation_writers(self, replica: R_contra, generation: int) -> list[dict]:
        """The transactions that wrote into ``generation`` and are still open (``concurrent_writers``):
        {"pid", "seconds", "state", "application"} each."""


@runtime_checkable
class TransactionalHooks(Protocol[R_contra]):
    """Transactional replication at a subscriber: the command staging table and stored procedures
    (``supports_procedures``)."""

    def tx_staging_table_ddl(self, table: str) -> str:
        """The connection's temporary table for staging commands: ord, article_id, op, wave, after, before."""

    def copy_text_lines(self, replica: R_contra, table: str, columns: Sequence[str], lines: Iterable[bytes]) -> None:
        """Load lines of ``COPY``'s text format (fields already escaped) into ``table`` (``takes_server_text``)."""

    def render_procedure(self, shape: Any, types: dict[str, SqlType]) -> list[str]:
        """CREATE PROCEDURE for a generated procedure of a transactional article (``shape``: a
        ``transactional.delivery.calls.ProcedureShape``; ``types``: the article's column types)."""

    def procedure_schema(self, replica: R_contra, name: str, fallback: str | None) -> str | None:
        """The schema an unqualified procedure name resolves to: the first schema of the search path
        that has it, else ``fallback`` (the article's schema) if it is there, else None."""

    def procedure_exists(self, replica: R_contra, schema: str | None, name: str) -> bool:
        """Is there a stored procedure ``schema.name``?"""


@runtime_checkable
class Files(Protocol):
    """A database as a file: damaged ones recognized and set aside."""

    def damage(self, url: str) -> str | None:
        """Why the database at ``url`` cannot be used at all (a file whose pages are corrupt), or None.
        A server database is never damaged in this sense: its server answers or it does not."""

    def set_aside(self, url: str, why: str = "damaged") -> str:
        """Move a damaged (or replaced: ``why``) database out of the way, keeping it as ``<file>.<why>-<UTC
        time>`` (a new one is created at ``url``); returns where it went."""


@runtime_checkable
class Locks(Protocol):
    def agent_lock(self, url: str, key: str) -> AgentLock:
        """The lock named ``key`` in the database at ``url``, which one process at a time holds
        (``agent_locks.py``; who takes which: ``sparksync/locks.py``)."""


@runtime_checkable
class ValueChecks(Protocol):
    """Values this database cannot hold exactly (``text_holds_nul``, ``float_holds_nan``)."""

    def unstorable(self, t: SqlType, value: Any) -> str | None:
        """Why this database cannot hold ``value`` (a logical value of type ``t``) exactly, or None.
        Such a value makes its change a failed change here instead of arriving altered."""

    def unstorable_markers(self) -> tuple[str, ...]:
        """Substrings of a change's row JSON that may signal an ``unstorable`` value (a quick scan
        before decoding): NUL is written as \\u0000, NaN as the string "NaN"."""


@runtime_checkable
class Dialect(Driver[R], Naming, Catalog[R], Ddl, DataMovement[R], StagedRows, MergeStaging[R], MergeHooks[R],
              TransactionalHooks[R], Files, Locks, ValueChecks, Protocol[R]):
    """Everything sparksync needs from one kind of database: what ``Replica.dialect`` is (a
    ``Dialect[Replica]``)."""


CONCERNS: tuple[type, ...] = (Driver, Naming, Catalog, Ddl, DataMovement, StagedRows, MergeStaging, MergeHooks,
                              TransactionalHooks, Files, Locks, ValueChecks)
"""The protocols :class:`Dialect` combines, one per concern."""
