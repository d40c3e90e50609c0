"""The merge apply's typed staging tables on PostgreSQL (temporary, dropped at commit, loaded by COPY:
``staging.py``) and the lineage SQL its verdicts are computed with (jsonb)."""

from __future__ import annotations

from sparksync.dialects.defaults import MergeStagingDefaults
from sparksync.dialects.postgres.staging import load_staging
from sparksync.dialects.protocols import Dialect
from sparksync.dialects.replica import Replica


class PostgresMergeStaging(MergeStagingDefaults):
    """``MergeStaging`` on PostgreSQL."""

    def create_staging(self: Dialect, replica: Replica, table: str, source: str, columns) -> None:
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

    def load_staging(self: Dialect, replica: Replica, table: str, columns, values) -> None:
        load_staging(replica, table, columns, list(zip(*values)), 4,
                     lambda exc: self.translate_error(exc, f"{replica.label}: stage changes"))

    def empty_lineage_sql(self) -> str:
        return "'{}'::jsonb"

    def lineage_dominates_sql(self, a: str, b: str) -> str:
        return (f"NOT EXISTS (SELECT 1 FROM jsonb_each_text({b}) e "
                f"WHERE coalesce(({a} ->> e.key)::bigint, 0) < e.value::bigint)")

    def lineage_entry_sql(self, lineage: str, nickname: int) -> str:
        return f"coalesce(({lineage} ->> '{int(nickname)}')::bigint, 0)"

    def lineage_advance_sql(self, lineage: str, known: str, nickname: int, advance: int) -> str:
        return (f"{self.lineage_entry_sql(lineage, nickname)} > "
                f"coalesce((SELECT max(value::bigint) FROM jsonb_each_text({known})), 0) + {int(advance)}")

    def json_without_key_sql(self, expr: str, key: str) -> str:
        return f"({expr} - '{key.replace(chr(39), chr(39) * 2)}')"

    def json_rename_key_sql(self, expr: str, old: str, new: str) -> str:
        o, n = (k.replace(chr(39), chr(39) * 2) for k in (old, new))
        return f"(CASE WHEN {expr} ? '{o}' THEN ({expr} - '{o}') || jsonb_build_object('{n}', {expr} -> '{o}') " \
               f"ELSE {expr} END)"
