"""Merge change tracking at a SQLite replica: rowguids (a UUIDv7-layout GUID made in SQL), the row-level
tracking triggers (``templates/merge_triggers.sql``) and what checks them, the tracking log's claim and
flush (``templates/merge_flush.sql``: one writer at a time, so the whole log is the claimed set), the
agent's own writes (a flag in ``MSmerge_replica``) and the open generation (its genhistory row)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sparksync.dialects.defaults import MergeHooksDefaults
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica
from sparksync.dialects.sqlite.catalog import real_name
from sparksync.dialects.templates import render_statements
from sparksync.names import TableName

# A UUIDv7-layout GUID: 48 bits of Unix milliseconds, version 7, variant 10xx, random rest.
_MS = "printf('%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER))"
NEW_ROWS = "temp.sparksync_new_rows"    # the flush's rows inserted without a rowguid, by rowid
# The random head of the rowguids one statement makes in order (a keyed flush, publishing a table): the first
# four groups, time and random as NEW_GUID_SQL's; the last group is a random base plus a count, so they ascend.
GUID_PREFIX_SQL = (
    "lower(substr(" + _MS + ", 1, 8) || '-' || substr(" + _MS + ", 9, 4) || '-7' || "
    "substr(hex(randomblob(2)), 2, 3) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || "
    "substr(hex(randomblob(2)), 2, 3) || '-')"
)
NEW_GUID_SQL = (
    "lower(substr(" + _MS + ", 1, 8) || '-' || substr(" + _MS + ", 9, 4) || '-7' || "
    "substr(hex(randomblob(2)), 2, 3) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || "
    "substr(hex(randomblob(2)), 2, 3) || '-' || hex(randomblob(6)))"
)


def _trigger_names(artid: str) -> list[str]:
    return [f"MSmerge_{op}_{artid}" for op in ("ins", "upd", "del", "key")]





class SQLiteMergeHooks(MergeHooksDefaults):
    """``MergeHooks`` on SQLite."""

    def new_rowguid_sql(self) -> str:
        return NEW_GUID_SQL

    def ordered_rowguids_sql(self, order_by: str) -> tuple[str, str]:
        # one random head and base per statement (the CTE is evaluated once), then a count in ``order_by``
        return (f"g AS MATERIALIZED (SELECT {GUID_PREFIX_SQL} AS pre, abs(random()) % 140737488355328 AS b)",
                f"g.pre || printf('%012x', g.b + row_number() OVER (ORDER BY {order_by}))")

    def install_support_objects(self, replica: Replica) -> None:
        return None

    def add_rowguid_column(self: Dialect, replica: Replica, table: TableName, column: str) -> None:
        # ALTER TABLE ADD COLUMN cannot take an expression default in SQLite: the insert trigger
        # fills the column for rows inserted without one, and existing rows are backfilled here.
        t = self.table_sql(table)
        replica.execute(f"ALTER TABLE {t} ADD COLUMN {self.quote(column)} UUID")
        replica.execute(f"UPDATE {t} SET {self.quote(column)} = {NEW_GUID_SQL} WHERE {self.quote(column)} IS NULL")

    def adopt_rowguid_column(self: Dialect, replica: Replica, table: TableName, column: str) -> None:
        t, c = self.table_sql(table), self.quote(column)
        replica.execute(f"UPDATE {t} SET {c} = lower({c}) WHERE {c} <> lower({c})")
        replica.execute(f"UPDATE {t} SET {c} = {NEW_GUID_SQL} WHERE {c} IS NULL")

    def render_merge_triggers(self, ctx: dict) -> list[str]:
        if ctx["keyed"]:
            return render_statements("sqlite/templates/merge_triggers_keyed.sql", ctx)
        return render_statements("sqlite/templates/merge_triggers.sql", ctx)

    def render_flush(self, ctx: dict) -> list[str]:
        if ctx["keyed"]:
            return render_statements("sqlite/templates/merge_flush_keyed.sql",
                                     {"inserts": None, **ctx, "guid_prefix": GUID_PREFIX_SQL})
        return render_statements("sqlite/templates/merge_flush.sql", {"inserts": None, **ctx, "new_rows": NEW_ROWS})

    def claim_pending(self: Dialect, replica: Replica, articles: Sequence[dict],
                      only: tuple[int, str, Sequence[Any]] | None = None, wait: bool = False):
        # One writer at a time: every entry of the log is committed, or this transaction's own. So the
        # log itself is the claimed set (``only`` needs nothing narrower), emptied by release_pending.
        # Rows inserted without a rowguid are found through the rowguid index (NULLs first) and noted in
        # the connection's temporary table: the flush gives them rowguids and their first version.
        pending = self.metadata_table_sql("MSmerge_pending")
        replica.execute(f"CREATE TEMP TABLE IF NOT EXISTS {NEW_ROWS} (tablenick INTEGER NOT NULL, rid INTEGER NOT NULL, "
                        "PRIMARY KEY (tablenick, rid))")
        nicks, n = set(), 0
        for ctx in articles:
            if ctx["keyed"]:                # its own log, by key (emptied by its flush)
                k = int(replica.scalar(f"SELECT count(*) FROM {ctx['log']}") or 0)
                if k:
                    nicks.add(int(ctx["tablenick"]))
                    n += k
                continue
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

    def flush_generation(self: Dialect, replica: Replica) -> int | None:
        return self.current_open_generation(replica)

    def column_users(self: Dialect, replica: Replica, table: TableName, column: str) -> list[str]:
        # a view anywhere, or a trigger or an index of the table, whose SQL names the column (a mention is taken
        # for a use); sparksync's own objects are not the application's
        real = (real_name(replica, self.resolve_name(table)) or table.name).lower()
        return [f"{kind} {name}" for kind, name, owner in replica.query(
            "SELECT type, name, lower(tbl_name) FROM sqlite_master WHERE type IN ('view', 'trigger', 'index') "
            "AND sql IS NOT NULL AND name NOT LIKE 'MSmerge%' AND instr(lower(sql), lower(?)) > 0 ORDER BY name",
            (column,)) if kind == "view" or owner == real]

    def drop_merge_triggers(self: Dialect, replica: Replica, table: TableName, artid: str) -> None:
        for name in _trigger_names(artid):
            replica.execute(f"DROP TRIGGER IF EXISTS {self.quote(name)}")

    def list_merge_triggers(self: Dialect, replica: Replica, table: TableName) -> list[str]:
        real = real_name(replica, self.resolve_name(table)) or table.name
        return [r[0] for r in replica.query(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? AND name LIKE 'MSmerge_%' "
            "ORDER BY name", (real,))]

    def tracking_problems(self: Dialect, replica: Replica, ctx: dict) -> list[str]:
        expected = {}
        for stmt in self.render_merge_triggers(ctx):
            m = re.match(r'CREATE TRIGGER "([^"]+)"', stmt)
            if m:
                expected[m.group(1)] = stmt
        have = dict(replica.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN ("
                                  + ", ".join("?" * len(expected)) + ")", list(expected)))
        problems = []
        if ctx["keyed"]:
            for table, what in ((ctx["ids_name"], "rowguids"), (ctx["log_name"], "tracking log")):
                if not self.metadata_table_exists(replica, table):
                    problems.append(f"the {what} of {ctx['table']} ({table}) is missing")
        for name, stmt in expected.items():
            if name not in have:
                problems.append(f"tracking trigger {name} on {ctx['table']} is missing")
            elif " ".join(have[name].split()) != " ".join(stmt.split()):
                problems.append(f"tracking trigger {name} on {ctx['table']} was altered")
        return problems

    def begin_agent_writes(self: Dialect, replica: Replica) -> None:
        # Only the writer can see its own uncommitted flag; SQLite has one writer at a time.
        replica.execute(f"UPDATE {self.metadata_table_sql('MSmerge_replica')} SET applying = 1")

    def end_agent_writes(self: Dialect, replica: Replica) -> None:
        replica.execute(f"UPDATE {self.metadata_table_sql('MSmerge_replica')} SET applying = 0")

    def current_open_generation(self: Dialect, replica: Replica) -> int | None:
        return replica.scalar(
            f"SELECT max(generation) FROM {self.metadata_table_sql('MSmerge_genhistory')} WHERE genstatus = 0")

    def set_open_generation(self, replica: Replica, generation: int) -> None:
        return None  # the genhistory row with genstatus 0 is the open generation

    def try_claim_generation(self, replica: Replica, generation: int) -> bool:
        return True  # the caller holds SQLite's write lock: no other writer exists

    def lock_generation_numbers(self, replica: Replica) -> None:
        return None  # the caller holds SQLite's write lock: no other writer exists
