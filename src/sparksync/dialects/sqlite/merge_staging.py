"""The merge apply's typed staging tables on SQLite (temporary, each column with the affinity of the
article's, loaded many rows per INSERT) and the lineage SQL its verdicts are computed with (SQLite's JSON
functions)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from sparksync.dialects.defaults import MergeStagingDefaults
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica

ROWS_PER_INSERT = 200         # staged rows per INSERT statement (fewer for a wide table: ``_parameters``)
_KNOWN_PARAMETERS = 999       # a statement's parameters on any SQLite, where the driver cannot say its limit


class SQLiteMergeStaging(MergeStagingDefaults):
    """``MergeStaging`` on SQLite."""

    def create_staging(self: Dialect, replica: Replica, table: str, source: str, columns) -> None:
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

    def load_staging(self, replica: Replica, table: str, columns: Sequence[str], values: Sequence[Sequence[Any]]) -> None:
        """``ROWS_PER_INSERT`` rows per statement (a multi-row VALUES): a statement per row costs its own
        step and reset, more than binding the row's values does; a third of the load's time. Each
        statement's parameters are laid out from the columns by slice assignment, no tuple per row."""
        k = len(columns)
        n = len(values[0]) if values else 0
        per = max(1, min(ROWS_PER_INSERT, _parameters(replica) // max(1, k)))
        head = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
        one = "(" + ", ".join(["?"] * k) + ")"

        def parameters(lo: int, hi: int) -> list[Any]:
            flat: list[Any] = [None] * ((hi - lo) * k)
            for j, column in enumerate(values):
                flat[j::k] = column[lo:hi]
            return flat

        whole = n - n % per
        if whole:
            replica.executemany(head + ", ".join([one] * per), [parameters(i, i + per) for i in range(0, whole, per)])
        if whole < n:
            replica.execute(head + ", ".join([one] * (n - whole)), parameters(whole, n))

    def create_staging_from(self, replica: Replica, table: str, select: str) -> None:
        replica.execute(f"DROP TABLE IF EXISTS temp.{table}")
        replica.execute(f"CREATE TEMP TABLE {table} AS {select}")

    def empty_lineage_sql(self) -> str:
        return "'{}'"

    def lineage_dominates_sql(self, a: str, b: str) -> str:
        return (f"NOT EXISTS (SELECT 1 FROM json_each({b}) e "
                f"WHERE coalesce(json_extract({a}, '$.\"' || e.key || '\"'), 0) < e.value)")

    def lineage_entry_sql(self, lineage: str, nickname: int) -> str:
        return f"coalesce(json_extract({lineage}, '$.\"{int(nickname)}\"'), 0)"

    def lineage_advance_sql(self, lineage: str, known: str, nickname: int, advance: int) -> str:
        return (f"{self.lineage_entry_sql(lineage, nickname)} > "
                f"coalesce((SELECT max(value) FROM json_each({known})), 0) + {int(advance)}")

    def json_without_key_sql(self, expr: str, key: str) -> str:
        return f"json_remove({expr}, '$.\"{key.replace(chr(39), chr(39) * 2)}\"')"

    def json_rename_key_sql(self, expr: str, old: str, new: str) -> str:
        o, n = (f"'$.\"{k.replace(chr(39), chr(39) * 2)}\"'" for k in (old, new))
        return f"(CASE WHEN json_type({expr}, {o}) IS NOT NULL THEN json_set(json_remove({expr}, {o}), {n}, " \
               f"json_extract({expr}, {o})) ELSE {expr} END)"


def _parameters(replica: Replica) -> int:
    """The most parameters one statement of this connection takes (SQLite's ``SQLITE_LIMIT_VARIABLE_NUMBER``)."""
    getlimit = getattr(replica.raw, "getlimit", None)
    return int(getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)) if getlimit is not None else _KNOWN_PARAMETERS
