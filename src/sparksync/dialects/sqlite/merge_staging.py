"""The merge apply's typed staging tables on SQLite (temporary, each column with the affinity of the
article's) and the lineage SQL its verdicts are computed with (SQLite's JSON functions)."""

from __future__ import annotations

from sparksync.dialects.defaults import MergeStagingDefaults
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica


class SQLiteMergeStaging(MergeStagingDefaults):
    """``MergeStaging`` on SQLite (rows are loaded by the default ``executemany``)."""

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
