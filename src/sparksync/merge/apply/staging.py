"""Set-based apply: the changes of one generation batch, staged in a temporary table at the destination.

Most changes of a sync are plain: the incoming lineage dominates what the destination has (or the
row is new there), so the change is simply applied. Deciding and applying those one row at a time in
Python costs far more than the database's own work, so a batch is handled in SQL:

1. ``stage``: the batch's changes of one article go into ``sparksync_staged`` (executemany on
   SQLite, COPY on PostgreSQL), with the change's row as JSON.
2. ``classify``: one statement looks up each staged row's local metadata (present in the table,
   ``MSmerge_contents`` lineage and colv, ``MSmerge_tombstone`` lineage) and gives it a verdict by
   the same rules as ``decide.decide``: ``apply`` (the incoming version dominates: a plain insert,
   update or delete), ``skip`` (the destination already has it or something newer), or ``slow``
   (a conflict, or a delete meeting a delete): those go through ``decide`` in Python.
3. ``apply``: per article and operation, in article processing order, a few statements move the
   ``apply`` rows into the user table and the metadata; values are read from the JSON by the
   dialect (``StagedRows.staged_values``) exactly as the row-at-a-time path would bind them.

The caller runs each ``apply`` in a savepoint: when a constraint rejects the statement, it takes
the rows back (``rows``) and applies them one at a time, so the failing change is found, retried
after the other articles and logged, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sparksync.dialects.replica import Replica
from sparksync.merge.tracking.articles import TrackedArticle

STAGED = "sparksync_staged"


@dataclass
class LocalMeta:
    """What the destination holds for one staged row (for the rows ``decide`` must see)."""

    present: bool
    lineage: object
    colv: object
    tombstone: object


@dataclass
class StagedArticle:
    inserts: int = 0                      # verdict apply, op upsert, not present
    updates: int = 0                      # verdict apply, op upsert, present
    deletes: int = 0                      # verdict apply, op delete
    skipped: int = 0
    slow: dict[str, LocalMeta] = field(default_factory=dict)   # rowguid -> local metadata


class Staging:
    """The staging table of one destination connection, inside the batch's transaction."""

    def __init__(self, replica: Replica):
        self.replica = replica
        self.d = replica.dialect
        self.table = self.d.quote(STAGED)
        replica.execute(self.d.staging_table_ddl(self.table))
        replica.execute(f"DELETE FROM {self.table}")

    # -- 1. stage ---------------------------------------------------------------------------------
    def stage(self, nick: int, changes: Sequence[tuple[str, str, str, str | None, str | None]]) -> None:
        """``changes``: (rowguid, op, lineage JSON, colv JSON, row JSON), rowguids unique per article."""
        self.d.load_staging(self.replica, self.table, [(nick, *c) for c in changes])

    def rowguids_sql(self, nick: int) -> str:
        """A SELECT of the rowguids staged for article ``nick``."""
        return f"SELECT rowguid FROM {self.table} WHERE tablenick = {int(nick)}"

    def lock_rows(self, art: TrackedArticle) -> None:
        """Where other transactions write at the same time (PostgreSQL), lock the user rows of the
        staged changes before their metadata is read: a write committed while this batch waits is
        then seen by the classification (a conflict, not an overwrite). SQLite needs nothing: the
        batch's transaction already holds the database's one write lock."""
        clause = self.d.row_lock_clause()
        if not clause:
            return
        rg = self.d.quote(art.rowguid_column)
        self.replica.execute(
            f"SELECT 1 FROM {self.d.table_sql(art.table)} WHERE {rg} IN (SELECT rowguid FROM {self.table} "
            f"WHERE tablenick = {int(art.nickname)}) ORDER BY {rg}{clause}")

    # -- 2. classify ------------------------------------------------------------------------------
    def classify(self, art: TrackedArticle, forged_from: int | None = None) -> StagedArticle:
        """``forged_from``: at the publisher, the source's nickname: a change whose lineage claims a
        version of another replica that the publisher never had goes to Python (refused there)."""
        d, r, s = self.d, self.replica, self.table
        p = r.p
        nick = int(art.nickname)
        contents, tomb = r.meta("MSmerge_contents"), r.meta("MSmerge_tombstone")
        key = [(c.name, c.type) for c in art.info.columns if c.name in art.info.primary_key]
        t, rg = d.table_sql(art.table), d.quote(art.rowguid_column)
        if d.capabilities.joins_in_bulk:      # one join of the whole batch
            r.execute(
                f"UPDATE {s} SET present = q.present, moved = q.moved, clin = q.clin, ccolv = q.ccolv, tlin = q.tlin "
                f"FROM (SELECT s.rowguid, t.{rg} IS NOT NULL AS present, "
                f"t.{rg} IS NOT NULL AND ({d.staged_key_moved_sql(key, 's', 't')}) AS moved, "
                f"c.lineage AS clin, c.colv AS ccolv, x.lineage AS tlin FROM {s} s "
                f"LEFT JOIN {t} t ON t.{rg} = s.rowguid "
                f"LEFT JOIN {contents} c ON c.tablenick = {nick} AND c.rowguid = s.rowguid "
                f"LEFT JOIN {tomb} x ON x.tablenick = {nick} AND x.rowguid = s.rowguid WHERE s.tablenick = {p}) q "
                f"WHERE {s}.tablenick = {p} AND {s}.rowguid = q.rowguid", [nick, nick])
        else:                                 # indexed lookups per staged row: one per table
            # Row values: one lookup fills two columns; no row in the table leaves both NULL, so the
            # verdict statement below turns ``present`` and ``moved`` into booleans as it goes.
            r.execute(
                f"UPDATE {s} SET (present, moved) = (SELECT 1, {d.staged_key_moved_sql(key, s, 't')} "
                f"FROM {t} t WHERE t.{rg} = {s}.rowguid), "
                f"(clin, ccolv) = (SELECT c.lineage, c.colv FROM {contents} c "
                f"WHERE c.tablenick = {nick} AND c.rowguid = {s}.rowguid), "
                f"tlin = (SELECT x.lineage FROM {tomb} x WHERE x.tablenick = {nick} AND x.rowguid = {s}.rowguid) "
                f"WHERE tablenick = {p}", [nick])
        present = "present" if d.capabilities.joins_in_bulk else "(present IS NOT NULL)"
        normalize = "" if d.capabilities.joins_in_bulk else f"present = {present}, moved = coalesce(moved, 0), "
        deleted_here = f"(tlin IS NOT NULL AND NOT {present})"
        local = f"(CASE WHEN {deleted_here} THEN tlin ELSE coalesce(clin, {d.empty_lineage_sql()}) END)"
        up = d.lineage_dominates_sql("lineage", local)       # incoming has seen all the local version has
        down = d.lineage_dominates_sql(local, "lineage")     # local has seen all the incoming version has
        forged = ""
        if forged_from is not None:
            known = f"coalesce(clin, tlin, {d.empty_lineage_sql()})"
            forged = (f"WHEN NOT {d.lineage_dominates_sql(known, d.lineage_without_sql('lineage', forged_from))} "
                      "THEN 'slow' ")
        r.execute(
            f"UPDATE {s} SET {normalize}verdict = CASE {forged}WHEN op = 'upsert' THEN CASE "
            f"  WHEN NOT {present} AND tlin IS NULL THEN 'apply' "
            f"  WHEN {up} AND NOT {down} THEN 'apply' WHEN {down} THEN 'skip' ELSE 'slow' END "
            f"ELSE CASE WHEN {deleted_here} OR (NOT {present} AND clin IS NULL) THEN 'slow' "
            f"  WHEN {up} THEN 'apply' WHEN {down} THEN 'skip' ELSE 'slow' END END "
            f"WHERE tablenick = {p}", [nick])
        out = StagedArticle()
        for op, present, verdict, n in r.query(
                f"SELECT op, present, verdict, count(*) FROM {s} WHERE tablenick = {p} GROUP BY op, present, verdict",
                [nick]):
            if verdict == "skip":
                out.skipped += n
            elif verdict == "apply":
                if op == "delete":
                    out.deletes += n
                elif present:
                    out.updates += n
                else:
                    out.inserts += n
        for g, present, clin, ccolv, tlin in r.query(
                f"SELECT rowguid, present, clin, ccolv, tlin FROM {s} WHERE tablenick = {p} AND verdict = 'slow'",
                [nick]):
            out.slow[str(g)] = LocalMeta(bool(present), clin, ccolv, tlin)
        return out

    # -- 3. apply ---------------------------------------------------------------------------------
    def apply(self, art: TrackedArticle, op: str, generation: int, clear_failed: bool) -> None:
        """Apply the ``apply`` rows of one article and operation ("upsert" | "delete")."""
        d, r, s = self.d, self.replica, self.table
        p = r.p
        nick = int(art.nickname)
        t = d.table_sql(art.table)
        rg = d.quote(art.rowguid_column)
        contents, tomb = r.meta("MSmerge_contents"), r.meta("MSmerge_tombstone")
        def mine(a: str = "") -> str:
            return f"{a}tablenick = {nick} AND {a}verdict = 'apply' AND {a}op = '{op}'"

        guids = f"SELECT rowguid FROM {s} WHERE {mine()}"
        if op == "delete":
            r.execute(f"DELETE FROM {t} WHERE {rg} IN ({guids})")
            r.execute(f"DELETE FROM {contents} WHERE tablenick = {nick} AND rowguid IN ({guids})")
            r.execute(
                f"INSERT INTO {tomb} (tablenick, rowguid, type, lineage, generation) "
                f"SELECT tablenick, rowguid, 1, lineage, {p} FROM {s} WHERE {mine()} "
                f"ON CONFLICT (tablenick, rowguid) DO UPDATE SET type = excluded.type, lineage = excluded.lineage, "
                f"generation = excluded.generation", [generation])
        else:
            cols = [c for c in art.info.columns if c.name != art.rowguid_column]
            joins, exprs = d.staged_values(art.table, [(c.name, c.type) for c in cols], "s")
            # Primary key columns are set only where they change (``moved``): setting a key to its own
            # value still rewrites the key's index entry (on SQLite, the whole row of a rowid table).
            pk = set(art.info.primary_key)
            update = f" FROM {s} s{joins} WHERE {t}.{rg} = s.rowguid AND {mine('s.')} AND s.present"
            rest = [(c, e) for c, e in zip(cols, exprs) if c.name not in pk]
            keys = [(c, e) for c, e in zip(cols, exprs) if c.name in pk]
            if rest:
                r.execute(f"UPDATE {t} SET " + ", ".join(f"{d.quote(c.name)} = {e}" for c, e in rest) + update)
            if keys:
                r.execute(f"UPDATE {t} SET " + ", ".join(f"{d.quote(c.name)} = {e}" for c, e in keys) + update
                          + " AND s.moved")
            names = ", ".join([rg] + [d.quote(c.name) for c in cols])
            r.execute(
                f"INSERT INTO {t} ({names}) SELECT " + ", ".join(["s.rowguid"] + exprs)
                + f" FROM {s} s{joins} WHERE {mine('s.')} AND NOT s.present")
            r.execute(
                f"INSERT INTO {contents} (tablenick, rowguid, generation, lineage, colv) "
                f"SELECT tablenick, rowguid, {p}, lineage, colv FROM {s} WHERE {mine()} "
                f"ON CONFLICT (tablenick, rowguid) DO UPDATE SET generation = excluded.generation, "
                f"lineage = excluded.lineage, colv = excluded.colv", [generation])
            r.execute(f"DELETE FROM {tomb} WHERE tablenick = {nick} AND rowguid IN ({guids} AND tlin IS NOT NULL)")
        if clear_failed:
            r.execute(f"DELETE FROM {r.meta('MSmerge_failed_changes')} WHERE tablenick = {nick} "
                      f"AND rowguid IN ({guids})")

    def rows(self, art: TrackedArticle, op: str) -> list[tuple[str, bool]]:
        """(rowguid, present) of the ``apply`` rows of one article and operation, to go one at a time."""
        return [(str(g), bool(pr)) for g, pr in self.replica.query(
            f"SELECT rowguid, present FROM {self.table} WHERE tablenick = {int(art.nickname)} "
            f"AND verdict = 'apply' AND op = '{op}'")]
