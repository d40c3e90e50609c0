"""Transactional replication at a PostgreSQL subscriber: the staged commands (their temporary table,
loaded by COPY of the publisher's log text; their JSON rows read in SQL for the set-based apply) and the
generated stored procedures (``templates/transactional_procs.sql``)."""

from __future__ import annotations

from sparksync.dialects.defaults import TransactionalDefaults
from sparksync.dialects.postgres.driver import ROW_NOT_FOUND_STATE
from sparksync.dialects.postgres.staging import copy_text_lines
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.dialects.templates import render_statements
from sparksync.names import TableName, quote_literal
from sparksync.types import Kind, SqlType


class PostgresStagedRows:
    """``StagedRows`` on PostgreSQL: jsonb operators, and a row read by ``jsonb_populate_record``."""

    def staged_values(self: Dialect, table: TableName, columns, alias: str,
                      payload: str = "payload") -> tuple[str, list[str]]:
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

    def json_typed(self: Dialect, expr: str, name: str, t: SqlType) -> str:
        if t.kind is Kind.BYTES:
            return f"decode({expr} ->> {quote_literal(name)}, 'base64')"
        return f"{self.json_field(expr, name)}::{self.render_type(t)}"

    def json_has(self, expr: str, name: str) -> str:
        return f"({expr} ? {quote_literal(name)})"


class PostgresTransactionalHooks(TransactionalDefaults):
    """``TransactionalHooks`` on PostgreSQL."""

    def tx_staging_table_ddl(self, table: str) -> str:
        return (f"CREATE TEMP TABLE IF NOT EXISTS {table} (ord integer PRIMARY KEY, article_id integer NOT NULL, "
                "op text NOT NULL, wave integer, after jsonb, before jsonb) ON COMMIT DELETE ROWS")

    def copy_text_lines(self, replica: Replica, table: str, columns, lines) -> None:
        copy_text_lines(replica, table, columns, lines)

    def render_procedure(self: Dialect, shape, types: dict[str, SqlType]) -> list[str]:
        """CREATE PROCEDURE for a generated procedure (``shape``: transactional.delivery.calls.ProcedureShape)."""
        rendered = {c: self.render_type(t) for c, t in types.items()}
        proc = (shape.procedure if shape.procedure.schema is not None
                else TableName(self.resolve_name(shape.table).schema, shape.procedure.name))
        ctx = {
            "procedure": self.table_sql(proc), "table": self.table_sql(shape.table), "op": shape.op,
            "syntax": shape.syntax, "defaults": shape.defaults,
            "params": [{"name": n, "type": "bytea" if c is None else rendered[c]} for n, c in shape.params],
            "key": [{"column": c, "index": i} for c, i in shape.key],
            "columns": [{"name": c, "byte": byte, "bit": bit} for c, byte, bit in shape.columns],
            "not_found": ROW_NOT_FOUND_STATE,
        }
        # a different parameter list would be an overload, not a replacement: drop the old one first
        return [f"DROP PROCEDURE IF EXISTS {self.table_sql(proc)}",
                *render_statements("postgres/templates/transactional_procs.sql", ctx)]

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
