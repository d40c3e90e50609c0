"""Merge change tracking at a PostgreSQL replica: rowguids (``uuid7()``), the support objects
(``templates/support.sql``), the statement-level tracking triggers (``templates/merge_triggers.sql``) and
what checks them, the agent's own writes (a transaction-local setting), the open generation (a sequence)
and its writers (advisory locks). Claiming and flushing the tracking log is ``tracking_log.py``."""

from __future__ import annotations

import re

from sparksync.dialects.defaults import MergeHooksDefaults
from sparksync.dialects.postgres import log_capture
from sparksync.dialects.postgres.catalog import table_oid
from sparksync.dialects.postgres.naming import METADATA_SCHEMA
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.dialects.templates import render_statements
from sparksync.names import TableName
from sparksync.types import Kind

LOCK_CLASS = 1397771083  # advisory lock class of generation locks ('SPKK')
NUMBERING_LOCK_CLASS = 1397771084   # ... of the one lock held by a transaction that numbers generations


class PostgresMergeHooks(MergeHooksDefaults):
    """``MergeHooks`` on PostgreSQL, but for the tracking log (``tracking_log.TrackingLog``)."""

    def new_rowguid_sql(self: Dialect) -> str:
        return f"{self.quote(METADATA_SCHEMA)}.uuid7()"

    def column_users(self: Dialect, replica: Replica, table: TableName, column: str) -> list[str]:
        return []       # a rowguid column is never moved out of a PostgreSQL table

    def ordered_rowguids_sql(self: Dialect, order_by: str) -> tuple[str, str]:
        return "g AS (SELECT 1 AS one)", self.new_rowguid_sql()      # uuid7() ascends as it is called

    def install_support_objects(self, replica: Replica) -> None:
        for stmt in render_statements("postgres/templates/support.sql",
                                      {"schema": METADATA_SCHEMA, "lock_class": LOCK_CLASS}):
            replica.execute(stmt)

    def add_rowguid_column(self: Dialect, replica: Replica, table: TableName, column: str) -> None:
        replica.execute(
            f"ALTER TABLE {self.table_sql(table)} ADD COLUMN {self.quote(column)} uuid NOT NULL "
            f"DEFAULT {self.new_rowguid_sql()}")

    def adopt_rowguid_column(self: Dialect, replica: Replica, table: TableName, column: str) -> None:
        t, c = self.table_sql(table), self.quote(column)
        replica.execute(f"UPDATE {t} SET {c} = {self.new_rowguid_sql()} WHERE {c} IS NULL")
        replica.execute(f"ALTER TABLE {t} ALTER COLUMN {c} SET DEFAULT {self.new_rowguid_sql()}")
        replica.execute(f"ALTER TABLE {t} ALTER COLUMN {c} SET NOT NULL")

    def render_merge_triggers(self, ctx: dict) -> list[str]:
        # json has no '=' operator: its columns compare as text
        columns = [{**c, "cmp": "::text" if c["type"].kind is Kind.JSON else ""} for c in ctx["columns"]]
        return render_statements("postgres/templates/merge_triggers.sql",
                                 {**ctx, "columns": columns, "schema": METADATA_SCHEMA})

    def drop_merge_triggers(self: Dialect, replica: Replica, table: TableName, artid: str) -> None:
        for op in ("ins", "upd", "del"):
            replica.execute(f"DROP TRIGGER IF EXISTS {self.quote(f'MSmerge_{op}_{artid}')} ON {self.table_sql(table)}")
            replica.execute(f"DROP FUNCTION IF EXISTS {self.quote(METADATA_SCHEMA)}.{self.quote(f'msmerge_{op}_{artid}')}()")

    def list_merge_triggers(self: Dialect, replica: Replica, table: TableName) -> list[str]:
        name = self.resolve_name(table)
        oid = table_oid(replica, name)
        if oid is None:
            return []
        return [r[0] for r in replica.query(
            "SELECT tgname FROM pg_catalog.pg_trigger WHERE tgrelid = %s AND NOT tgisinternal "
            "AND tgname LIKE 'MSmerge\\_%%' ORDER BY tgname", (oid,))]

    def captures_from_log(self, replica: Replica) -> bool:
        return log_capture.capture_of(replica) is not None

    def capture_problems(self, replica: Replica) -> list[str]:
        return log_capture.problems(replica)

    def skip_log(self, replica: Replica) -> None:
        log_capture.record_now(replica)

    def capture_state(self, replica: Replica) -> dict:
        found = log_capture.capture_of(replica)
        if found is None:
            return {"mode": "triggers"}
        return {"mode": "log", "slot": found["slot"], "retained_wal_bytes": log_capture.retained_bytes(replica)}

    def log_capture_possible(self, replica: Replica) -> bool:
        return log_capture.possible(replica)

    def prepare_log_capture(self, replica: Replica) -> None:
        log_capture.prepare(replica)

    def drop_log_capture(self, replica: Replica) -> None:
        log_capture.drop(replica)

    def capture_from_log(self: Dialect, replica: Replica, ctx: dict) -> None:
        """The article's changes read from the log: published to the slot, its triggers (if any) gone."""
        self.drop_merge_triggers(replica, ctx["table_name"], ctx["artid"])
        log_capture.publish_table(replica, ctx["table_name"])

    def stop_capture_from_log(self, replica: Replica, ctx: dict) -> None:
        log_capture.unpublish_table(replica, ctx["table_name"])

    def begin_agent_writes(self, replica: Replica) -> None:
        replica.execute("SELECT set_config('sparksync.applying', 'on', true)")
        if log_capture.capture_of(replica) is not None:
            log_capture.begin_agent_writes(replica)

    def end_agent_writes(self, replica: Replica) -> None:
        replica.execute("SELECT set_config('sparksync.applying', 'off', true)")
        if log_capture.capture_of(replica) is not None:
            log_capture.end_agent_writes(replica)

    def tracking_problems(self: Dialect, replica: Replica, ctx: dict) -> list[str]:
        if log_capture.capture_of(replica) is not None:
            stray = self.list_merge_triggers(replica, ctx["table_name"])
            return log_capture.published(replica, ctx["table_name"]) + [
                f"tracking trigger {t} on {ctx['table']} is left from trigger tracking" for t in stray]
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
        oid = table_oid(replica, self.resolve_name(ctx["table_name"]))
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

    def current_open_generation(self: Dialect, replica: Replica) -> int | None:
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
