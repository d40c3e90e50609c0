"""PostgreSQL: the server dialect (psycopg 3). Metadata lives in the ``sparksync`` schema."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from sparksync.dialects.agent_locks import AgentLock
from sparksync.dialects.base import DialectBase
from sparksync.dialects.model import Column, ForeignKey, TableInfo
from sparksync.dialects.postgres.staging import copy_text_lines, load_staging
from sparksync.dialects.postgres.tracking_log import TrackingLog
from sparksync.dialects.protocols import Capabilities
from sparksync.dialects.replica import Replica, redact_url
from sparksync.dialects.templates import render_statements
from sparksync.errors import (
    ConnectionFailed,
    ConstraintViolation,
    DatabaseError,
    RowNotFound,
    SchemaError,
    SparksyncError,
    ValueRejected,
)
from sparksync.filters import SqlFlavor
from sparksync.names import TableName, quote_literal
from sparksync.redaction import url_password
from sparksync.types import Kind, SqlType, decimal_type

METADATA_SCHEMA = "sparksync"
LOCK_CLASS = 1397771083  # advisory lock class of generation locks ('SPKK')
NUMBERING_LOCK_CLASS = 1397771084   # ... of the one lock held by a transaction that numbers generations

_TRANSIENT_STATES = {"40001", "40P01", "55P03", "57014", "53300", "08000", "08003", "08006", "57P01"}
_CONSTRAINTS = {"23505": "unique", "23503": "foreign_key", "23502": "not_null", "23514": "check"}


_LENIENT: dict = {}


def _lenient_temporal(cur) -> None:
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


class PostgresDialect(DialectBase, TrackingLog):
    capabilities = Capabilities(
        name="postgresql",
        product="PostgreSQL",
        supports_schemas=True,
        supports_procedures=True,
        supports_logical_decoding=True,
        concurrent_writers=True,
        paramstyle="%s",
        sql=SqlFlavor("postgres", typed_booleans=True),
        joins_in_bulk=True,
        text_holds_nul=False,
        takes_server_text=True,
    )

    def json_literal(self, text: str) -> str:
        return "'" + text.replace("'", "''") + "'::jsonb"

    # -- connections ------------------------------------------------------------------------
    def connect(self, url: str, label: str | None = None) -> Replica:
        import psycopg

        password = url_password(url)
        if password is not None and "@" in password:
            # libpq ends the password at the first "@": the rest would be taken for the host name,
            # and printed in its error message
            raise ConnectionFailed(f"cannot connect to PostgreSQL at {redact_url(url)}: the password holds a raw '@'; "
                                   "write it as %40 in the URL, or keep it out of the URL (${VAR}, PGPASSWORD or "
                                   "~/.pgpass)", obj=redact_url(url))
        try:
            raw = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConnectionFailed(
                f"cannot connect to PostgreSQL at {redact_url(url)}: {redact_url(detail)}", obj=redact_url(url)
            ) from None
        return Replica(self, raw, url, label or redact_url(url))

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
        if state == self.ROW_NOT_FOUND_STATE:
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

    # -- names ------------------------------------------------------------------------------
    def resolve_name(self, name: TableName) -> TableName:
        return name if name.schema is not None else TableName("public", name.name)

    def metadata_table_name(self, name: str) -> TableName:
        return TableName(METADATA_SCHEMA, name.lower())

    def metadata_table_exists(self, replica: Replica, name: str) -> bool:
        return bool(replica.scalar("SELECT to_regclass(%s) IS NOT NULL", (self.metadata_table_sql(name),)))

    def json_param(self, value: Any) -> Any:
        from psycopg.types.json import Jsonb

        return Jsonb(value)

    # -- catalog ----------------------------------------------------------------------------
    def index_exists(self, replica: Replica, schema: str | None, name: str) -> bool:
        return bool(replica.scalar("SELECT count(*) FROM pg_catalog.pg_indexes WHERE schemaname = "
                                   "coalesce(%s, current_schema()) AND indexname = %s", (schema, name)))

    def _oid(self, replica: Replica, name: TableName) -> int | None:
        return replica.scalar(
            "SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')", (name.schema, name.name))

    def similar_tables(self, replica: Replica, name: TableName) -> list[str]:
        rows = replica.query(
            "SELECT n.nspname, c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE lower(c.relname) = lower(%s) AND c.relkind IN ('r', 'p')",
            (name.name,))
        return [f"{s}.{t} (names are case-sensitive)" if t != name.name else f"{s}.{t}" for s, t in rows]

    def reflect_table(self, replica: Replica, name: TableName) -> TableInfo | None:
        name = self.resolve_name(name)
        oid = self._oid(replica, name)
        if oid is None:
            return None
        cols = []
        for n, t, notnull, dflt, generated in replica.query(
                "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, "
                "pg_catalog.pg_get_expr(d.adbin, d.adrelid), a.attgenerated <> '' FROM pg_catalog.pg_attribute a "
                "LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum", (oid,)):
            try:
                cols.append(Column(n, self.parse_type(t), not notnull, dflt, bool(generated)))
            except SchemaError as e:
                raise SchemaError(f"table {name}, column {n}: {e.message}", obj=f"{name}.{n}") from None
        cons = replica.query(
            "SELECT con.contype, con.conname, "
            "  ARRAY(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY k(n, i) "
            "        JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n ORDER BY k.i), "
            "  rn.nspname, rc.relname, "
            "  ARRAY(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY k(n, i) "
            "        JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n ORDER BY k.i) "
            "FROM pg_catalog.pg_constraint con "
            "LEFT JOIN pg_catalog.pg_class rc ON rc.oid = con.confrelid "
            "LEFT JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace "
            "WHERE con.conrelid = %s AND con.contype IN ('p', 'f', 'u') ORDER BY con.conname", (oid,))
        pk: tuple[str, ...] = ()
        fks, unique = [], set()
        for contype, conname, keys, rschema, rtable, rkeys in cons:
            if contype == "p":
                pk = tuple(keys)
            elif contype == "f":
                fks.append(ForeignKey(tuple(keys), TableName(rschema, rtable), tuple(rkeys), conname))
            elif contype == "u" and len(keys) == 1:
                unique.add(keys[0])
        for (col,) in replica.query(
            "SELECT a.attname FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
            "WHERE i.indrelid = %s AND i.indisunique AND i.indnatts = 1 AND i.indpred IS NULL", (oid,)):
            unique.add(col)
        if len(pk) == 1:
            unique.add(pk[0])
        return TableInfo(name, tuple(cols), pk, tuple(fks), frozenset(unique))

    _TYPE = re.compile(r"^([a-z_ ]+?)(?:\((\d+)(?:,(\d+))?\))?(\[\])?$")
    _PRECISION = re.compile(r"\(\d+\)")

    def parse_type(self, type_text: str) -> SqlType:
        text = " ".join(type_text.strip().lower().split())
        if text.startswith(("timestamp", "time")) and not text.endswith("[]"):
            # format_type() puts a fractional-seconds precision in the middle: timestamp(3) with time zone
            bare = self._PRECISION.sub("", text).replace("  ", " ").strip()
            if bare in ("timestamptz", "timestamp with time zone"):
                return SqlType(Kind.TIMESTAMPTZ)
            if bare in ("timestamp", "timestamp without time zone"):
                return SqlType(Kind.TIMESTAMP)
            if bare in ("time", "time without time zone"):
                return SqlType(Kind.TIME)
        m = self._TYPE.match(text)
        if not m or m.group(4):
            raise SchemaError(f"unsupported PostgreSQL column type {type_text!r}")
        base, a, b = m.group(1).strip(), m.group(2), m.group(3)
        a = int(a) if a else None
        b = int(b) if b else None
        simple = {
            "boolean": Kind.BOOLEAN, "bool": Kind.BOOLEAN, "smallint": Kind.SMALLINT, "int2": Kind.SMALLINT,
            "integer": Kind.INTEGER, "int": Kind.INTEGER, "int4": Kind.INTEGER, "bigint": Kind.BIGINT,
            "int8": Kind.BIGINT, "real": Kind.REAL, "float4": Kind.REAL, "double precision": Kind.DOUBLE,
            "float8": Kind.DOUBLE, "text": Kind.TEXT, "bytea": Kind.BYTES, "date": Kind.DATE, "uuid": Kind.UUID,
            "json": Kind.JSON, "jsonb": Kind.JSON, "citext": Kind.TEXT,
        }
        if base in simple:
            return SqlType(simple[base])
        if base in ("character varying", "varchar"):
            return SqlType(Kind.TEXT, length=a)
        if base in ("character", "char", "bpchar"):
            if a is None and base == "bpchar":
                return SqlType(Kind.TEXT)       # blank-padded without a length: as text
            return SqlType(Kind.TEXT, length=a or 1, fixed=True)
        if base in ("numeric", "decimal"):
            return decimal_type(a, b)
        if base == "money":
            raise SchemaError("type money is not supported: its text form depends on lc_monetary ('$12.34'); "
                              "store amounts as numeric")
        raise SchemaError(f"unsupported PostgreSQL column type {type_text!r} (arrays, enums, composite, range and "
                          "interval types are not replicated)")

    type_names = {
        Kind.BOOLEAN: "boolean", Kind.SMALLINT: "smallint", Kind.INTEGER: "integer", Kind.BIGINT: "bigint",
        Kind.REAL: "real", Kind.DOUBLE: "double precision", Kind.TEXT: "text", Kind.BYTES: "bytea",
        Kind.DATE: "date", Kind.TIME: "time", Kind.TIMESTAMP: "timestamp", Kind.TIMESTAMPTZ: "timestamptz",
        Kind.UUID: "uuid", Kind.JSON: "jsonb",
    }
    varchar_format = "varchar({length})"
    decimal_format = "numeric({precision},{scale})"
    char_format = "character({length})"
    numeric_name = "numeric"

    # -- values -----------------------------------------------------------------------------
    def _converter(self, t: SqlType):
        if t.kind is Kind.JSON:
            import json as _json

            from psycopg.types.json import Jsonb
            return lambda v: Jsonb(_json.loads(v)) if isinstance(v, str) else Jsonb(v)
        return None

    def bulk_load(self, replica: Replica, table: TableName, columns: Sequence[str], types: Sequence[SqlType],
                  rows: Iterable[Sequence[Any]]) -> int:
        return self.load_rows(replica, self.table_sql(table), columns, rows)   # COPY adapts the values itself

    def load_rows(self, replica: Replica, table_sql: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
        n = 0
        try:
            with replica.raw.cursor() as cur:
                with cur.copy(f"COPY {table_sql} ({', '.join(self.quote(c) for c in columns)}) FROM STDIN") as copy:
                    for r in rows:
                        copy.write_row(r)
                        n += 1
        except SparksyncError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self.translate_error(exc, f"{replica.label}: load {table_sql}") from exc
        return n

    def agent_lock(self, url: str, key: str) -> AgentLock:
        from sparksync.dialects.postgres.agent_lock import AdvisoryLock

        return AdvisoryLock(url, key)

    _SNAPSHOT_ID = re.compile(r"^[0-9A-Fa-f-]+$")

    def stream(self, replica, sql, params, batch_rows, snapshot=None, lenient_text=False):
        # lenient_text: the server checks encodings on the way in; a UTF8 database holds none invalid.
        import psycopg

        raw = replica.raw
        ended = False
        try:
            raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if snapshot:
                if not self._SNAPSHOT_ID.match(snapshot):
                    raise ValueError(f"invalid snapshot id {snapshot!r}")
                raw.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
            with raw.cursor(name="sparksync_read") as cur:
                _lenient_temporal(cur)
                cur.execute(sql, tuple(params) if params else None)
                while True:
                    rows = cur.fetchmany(batch_rows)
                    if not rows:
                        break
                    yield rows
            raw.execute("COMMIT")
            ended = True
        except psycopg.Error as exc:
            raise self.translate_error(exc, f"{replica.label}: {sql[:80]}") from exc
        finally:
            if not ended:     # a failure, or a consumer that stopped early (GeneratorExit): no transaction left open
                with contextlib.suppress(Exception):
                    raw.execute("ROLLBACK")

    @contextlib.contextmanager
    def consistent_reads(self, replica: Replica, workdir: str):
        """An exported snapshot, held open by a second connection until the readers are done."""
        holder = self.connect(replica.url, replica.label)
        try:
            holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            sid = holder.scalar("SELECT pg_export_snapshot()")
            yield replica.url, sid, holder
        finally:
            with contextlib.suppress(Exception):
                holder.execute("COMMIT")
            holder.close()

    def uuid_param(self) -> str:
        return "%s::uuid"

    # -- transactional replication at a subscriber ------------------------------------------
    ROW_NOT_FOUND_STATE = "SS598"     # raised by the generated update/delete procedures: SQL Server's 20598

    def render_procedure(self, shape, types: dict[str, SqlType]) -> list[str]:
        """CREATE PROCEDURE for a generated procedure (``shape``: transactional.calls.ProcedureShape)."""
        rendered = {c: self.render_type(t) for c, t in types.items()}
        proc = (shape.procedure if shape.procedure.schema is not None
                else TableName(self.resolve_name(shape.table).schema, shape.procedure.name))
        ctx = {
            "procedure": self.table_sql(proc), "table": self.table_sql(shape.table), "op": shape.op,
            "syntax": shape.syntax, "defaults": shape.defaults,
            "params": [{"name": n, "type": "bytea" if c is None else rendered[c]} for n, c in shape.params],
            "key": [{"column": c, "index": i} for c, i in shape.key],
            "columns": [{"name": c, "byte": byte, "bit": bit} for c, byte, bit in shape.columns],
            "not_found": self.ROW_NOT_FOUND_STATE,
        }
        # a different parameter list would be an overload, not a replacement: drop the old one first
        return [f"DROP PROCEDURE IF EXISTS {self.table_sql(proc)}",
                *render_statements("postgres/templates/transactional_procs.sql", ctx)]

    def typed_param(self, t: SqlType) -> str:
        return f"%s::{self.render_type(t)}"

    def procedure_exists(self, replica: Replica, schema: str | None, name: str) -> bool:
        if schema is None:      # as CALL resolves an unqualified name: through search_path
            return bool(replica.scalar(
                "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = ANY(current_schemas(false)) AND p.proname = %s AND p.prokind = 'p'", (name,)))
        return bool(replica.scalar("SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                                   "WHERE n.nspname = %s AND p.proname = %s AND p.prokind = 'p'", (schema, name)))

    def procedure_schema(self, replica: Replica, name: str, fallback: str | None) -> str | None:
        """Where an unqualified custom procedure is: the first schema of the search_path that has it,
        else ``fallback`` (the article's schema) if it is there, else None."""
        return replica.scalar(
            "SELECT n.nspname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE p.proname = %s AND p.prokind = 'p' AND (n.nspname = ANY(current_schemas(false)) OR n.nspname = %s) "
            "ORDER BY coalesce(array_position(current_schemas(false), n.nspname), 1000000) LIMIT 1", (name, fallback))

    def fold_identifier(self, name: str) -> str:
        return name.lower()

    def set_lock_timeout(self, replica: Replica, timeout: str) -> None:
        replica.execute(f"SET lock_timeout = {quote_literal(timeout)}")

    def relax_commit_durability(self, replica: Replica) -> None:
        # As PostgreSQL's own logical replication apply does: a crash loses the last commits together
        # with the watermark they moved, so they are delivered again; nothing is applied twice.
        replica.execute("SET synchronous_commit = off")

    def restore_commit_durability(self, replica: Replica) -> None:
        replica.execute("SET synchronous_commit = on")

    def serial_primary_key(self, column: str) -> str:
        return f"{self.quote(column)} bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"

    # -- set-based apply (merge/apply/staging.py) -------------------------------------------------
    def create_staging(self, replica: Replica, table: str, source: str, columns) -> None:
        # CREATE TABLE AS ... WITH NO DATA: each c<i> of the article column's own type (and modifier),
        # none of its constraints; dropped with the batch's transaction.
        typed = "".join(f", t.{self.quote(c)} AS c{i}" for i, c in enumerate(columns))
        # The batch's statements are planned without statistics of the staging tables (a set-returning
        # function counts 100 rows a call): their estimated costs pass jit_above_cost by far, and JIT
        # compiling them costs a second where running them costs a tenth.
        replica.execute("SET LOCAL jit = off")
        replica.execute(f"DROP TABLE IF EXISTS pg_temp.{table}")
        replica.execute(
            f"CREATE TEMP TABLE {table} ON COMMIT DROP AS SELECT NULL::uuid AS rowguid, NULL::text AS op, "
            "NULL::jsonb AS lineage, NULL::jsonb AS colv, NULL::integer AS present, NULL::jsonb AS clin, "
            f"NULL::jsonb AS tlin, NULL::text AS verdict{typed} FROM {source} t WITH NO DATA")

    def create_staging_from(self, replica: Replica, table: str, select: str) -> None:
        replica.execute(f"DROP TABLE IF EXISTS pg_temp.{table}")
        replica.execute(f"CREATE TEMP TABLE {table} ON COMMIT DROP AS {select}")

    def load_staging(self, replica: Replica, table: str, columns, rows) -> None:
        load_staging(replica, table, columns, rows, 4,
                     lambda exc: self.translate_error(exc, f"{replica.label}: stage changes"))

    def empty_lineage_sql(self) -> str:
        return "'{}'::jsonb"

    def lineage_dominates_sql(self, a: str, b: str) -> str:
        return (f"NOT EXISTS (SELECT 1 FROM jsonb_each_text({b}) e "
                f"WHERE coalesce(({a} ->> e.key)::bigint, 0) < e.value::bigint)")

    def lineage_advance_sql(self, lineage: str, known: str, nickname: int, advance: int) -> str:
        return (f"coalesce(({lineage} ->> '{int(nickname)}')::bigint, 0) > "
                f"coalesce((SELECT max(value::bigint) FROM jsonb_each_text({known})), 0) + {int(advance)}")

    def json_without_key_sql(self, expr: str, key: str) -> str:
        return f"({expr} - '{key.replace(chr(39), chr(39) * 2)}')"

    def delete_some_sql(self, table_sql: str, where: str, limit: int) -> str:
        return (f"DELETE FROM {table_sql} WHERE ctid = ANY(ARRAY("
                f"SELECT ctid FROM {table_sql} WHERE {where} LIMIT {int(limit)}))")

    def row_lock_clause(self) -> str:
        return " FOR UPDATE"

    def staged_values(self, table: TableName, columns, alias: str, payload: str = "payload") -> tuple[str, list[str]]:
        # jsonb_populate_record reads each value with its column's own input function, as a bound
        # parameter of unknown type would be; bytea (base64 in the JSON) and json columns are read apart.
        record = "sparksync_r"
        join = (f" CROSS JOIN LATERAL jsonb_populate_record(NULL::{self.table_sql(table)}, {alias}.{payload}) "
                f"AS {record}")
        exprs = []
        for name, t in columns:
            key = quote_literal(name)
            if t.kind is Kind.BYTES:
                exprs.append(f"decode({alias}.{payload} ->> {key}, 'base64')")
            elif t.kind is Kind.JSON:
                exprs.append(f"({alias}.{payload} ->> {key})::jsonb")
            else:
                exprs.append(f"{record}.{self.quote(name)}")
        return join, exprs

    def json_field(self, expr: str, name: str) -> str:
        return f"({expr} ->> {quote_literal(name)})"

    def json_typed(self, expr: str, name: str, t: SqlType) -> str:
        if t.kind is Kind.BYTES:
            return f"decode({expr} ->> {quote_literal(name)}, 'base64')"
        return f"{self.json_field(expr, name)}::{self.render_type(t)}"

    def json_has(self, expr: str, name: str) -> str:
        return f"({expr} ? {quote_literal(name)})"

    def tx_staging_table_ddl(self, table: str) -> str:
        return (f"CREATE TEMP TABLE IF NOT EXISTS {table} (ord integer PRIMARY KEY, article_id integer NOT NULL, "
                "op text NOT NULL, wave integer, after jsonb, before jsonb) ON COMMIT DELETE ROWS")

    def copy_text_lines(self, replica: Replica, table: str, columns, lines) -> None:
        copy_text_lines(replica, table, columns, lines)

    # -- merge change tracking --------------------------------------------------------------
    def new_rowguid_sql(self) -> str:
        return f"{self.quote(METADATA_SCHEMA)}.uuid7()"

    def install_support_objects(self, replica: Replica) -> None:
        for stmt in render_statements("postgres/templates/support.sql",
                                      {"schema": METADATA_SCHEMA, "lock_class": LOCK_CLASS}):
            replica.execute(stmt)

    def add_rowguid_column(self, replica: Replica, table: TableName, column: str) -> None:
        replica.execute(
            f"ALTER TABLE {self.table_sql(table)} ADD COLUMN {self.quote(column)} uuid NOT NULL "
            f"DEFAULT {self.new_rowguid_sql()}")

    def adopt_rowguid_column(self, replica: Replica, table: TableName, column: str) -> None:
        t, c = self.table_sql(table), self.quote(column)
        replica.execute(f"UPDATE {t} SET {c} = {self.new_rowguid_sql()} WHERE {c} IS NULL")
        replica.execute(f"ALTER TABLE {t} ALTER COLUMN {c} SET DEFAULT {self.new_rowguid_sql()}")
        replica.execute(f"ALTER TABLE {t} ALTER COLUMN {c} SET NOT NULL")

    def render_merge_triggers(self, ctx: dict) -> list[str]:
        # json has no '=' operator: its columns compare as text
        columns = [{**c, "cmp": "::text" if c["type"].kind is Kind.JSON else ""} for c in ctx["columns"]]
        return render_statements("postgres/templates/merge_triggers.sql",
                                 {**ctx, "columns": columns, "schema": METADATA_SCHEMA})

    def drop_merge_triggers(self, replica: Replica, table: TableName, artid: str) -> None:
        for op in ("ins", "upd", "del"):
            replica.execute(f"DROP TRIGGER IF EXISTS {self.quote(f'MSmerge_{op}_{artid}')} ON {self.table_sql(table)}")
            replica.execute(f"DROP FUNCTION IF EXISTS {self.quote(METADATA_SCHEMA)}.{self.quote(f'msmerge_{op}_{artid}')}()")

    def list_merge_triggers(self, replica: Replica, table: TableName) -> list[str]:
        name = self.resolve_name(table)
        oid = self._oid(replica, name)
        if oid is None:
            return []
        return [r[0] for r in replica.query(
            "SELECT tgname FROM pg_catalog.pg_trigger WHERE tgrelid = %s AND NOT tgisinternal "
            "AND tgname LIKE 'MSmerge\\_%%' ORDER BY tgname", (oid,))]

    def tracking_problems(self, replica: Replica, ctx: dict) -> list[str]:
        functions, triggers = {}, []
        for stmt in self.render_merge_triggers(ctx):
            m = re.match(r'CREATE OR REPLACE FUNCTION "[^"]+"\."([^"]+)"\(\)', stmt)
            if m:
                functions[m.group(1)] = stmt.split("$fn$")[1]
            m = re.match(r'CREATE TRIGGER "([^"]+)" .*? EXECUTE FUNCTION "[^"]+"\."([^"]+)"\(\)', stmt, re.S)
            if m:
                triggers.append((m.group(1), m.group(2)))
        bodies = dict(replica.query(
            "SELECT p.proname, p.prosrc FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n "
            "ON n.oid = p.pronamespace WHERE n.nspname = %s AND p.proname = ANY(%s)", (METADATA_SCHEMA, list(functions))))
        oid = self._oid(replica, self.resolve_name(ctx["table_name"]))
        have = {name: (enabled, fn) for name, enabled, fn in replica.query(
            "SELECT t.tgname, t.tgenabled, p.proname FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p "
            "ON p.oid = t.tgfoid WHERE t.tgrelid = %s AND NOT t.tgisinternal", (oid,))} if oid else {}
        problems = []
        for name, fn in triggers:
            if name not in have:
                problems.append(f"tracking trigger {name} on {ctx['table']} is missing")
            elif have[name][0] == "D":
                problems.append(f"tracking trigger {name} on {ctx['table']} is disabled")
            elif have[name][1] != fn:
                problems.append(f"tracking trigger {name} on {ctx['table']} calls {have[name][1]}, not {fn}")
        for fn, body in functions.items():
            if fn not in bodies:
                problems.append(f"tracking function {METADATA_SCHEMA}.{fn} is missing")
            elif " ".join(bodies[fn].split()) != " ".join(body.split()):
                problems.append(f"tracking function {METADATA_SCHEMA}.{fn} was altered")
        return problems

    def begin_agent_writes(self, replica: Replica) -> None:
        replica.execute("SELECT set_config('sparksync.applying', 'on', true)")

    def end_agent_writes(self, replica: Replica) -> None:
        replica.execute("SELECT set_config('sparksync.applying', 'off', true)")

    def current_open_generation(self, replica: Replica) -> int | None:
        return replica.scalar(f"SELECT last_value FROM {self.quote(METADATA_SCHEMA)}.open_generation")

    def set_open_generation(self, replica: Replica, generation: int) -> None:
        replica.execute(f"SELECT setval('{METADATA_SCHEMA}.open_generation', %s, true)", (generation,))

    def generation_writers(self, replica: Replica, generation: int) -> list[dict]:
        rows = replica.query(
            "SELECT l.pid, extract(epoch FROM now() - a.xact_start), a.state, a.application_name "
            "FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.classid = %s::oid AND l.objid = %s::oid AND l.objsubid = 2 "
            "AND l.granted AND l.pid <> pg_backend_pid() "
            "AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()) "
            "ORDER BY l.pid",
            (LOCK_CLASS, generation % 2147483647))
        return [{"pid": pid, "seconds": float(age or 0), "state": state or "unknown", "application": app or ""}
                for pid, age, state, app in rows]

    def lock_generation_numbers(self, replica: Replica) -> None:
        replica.scalar("SELECT pg_advisory_xact_lock(%s, %s)", (NUMBERING_LOCK_CLASS, 0))

    def try_claim_generation(self, replica: Replica, generation: int) -> bool:
        """Inside a transaction: take the generation's lock exclusively if no writer holds it."""
        return bool(replica.scalar("SELECT pg_try_advisory_xact_lock(%s, %s)",
                                   (LOCK_CLASS, generation % 2147483647)))
