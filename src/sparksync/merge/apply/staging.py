"""Set-based apply: the changes of one generation batch, staged in typed temporary tables at the destination.

Most changes of a sync are plain: the incoming lineage dominates what the destination has (or the
row is new there), so the change is simply applied. Deciding and applying those one row at a time in
Python costs far more than the database's own work, so a batch is handled in SQL:

1. ``stage``: an article's changes go into its own staging table, shaped like the article (a column
   ``c<i>`` of each article column's own type, beside rowguid, op, lineage and colv): the change's
   row is decoded once, column by column, into the very values the row-at-a-time path binds, and
   loaded by ``executemany`` (SQLite) or COPY (PostgreSQL: binary where every column's type allows).
2. ``classify``: each staged row's local metadata (present in the table, ``MSmerge_contents`` and
   ``MSmerge_tombstone`` lineage) is looked up and given a verdict by the same rules as
   ``decide.decide``: ``apply`` (the incoming version dominates: a plain insert, update or delete),
   ``skip`` (the destination already has it or something newer), or ``slow`` (a conflict, or a
   delete meeting a delete): those go through ``decide`` in Python. One statement looks up and judges
   every row and writes the judged rows to a table of their own (updating every staged row in place,
   twice, costs more than writing it once): the common change (the local lineage with the source's entry
   moved up) is known by comparing the two lineages without that entry, the others entry by entry.
3. ``apply``: per article and operation, in article processing order, a few statements move the
   ``apply`` rows into the user table and the metadata: plain joins of typed columns. A primary key
   is set only where it differs.

The caller runs each ``apply`` in a savepoint: when a constraint rejects the statement, it takes
the rows back (``rows``) and applies them one at a time, so the failing change is found, retried
after the other articles and logged, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sparksync.dialects.model import Column
from sparksync.dialects.replica import Replica, in_chunks
from sparksync.merge.tracking import identity
from sparksync.merge.tracking import lineage as lin
from sparksync.merge.tracking.tracked import TrackedArticle
from sparksync.rows import RowCodec
from sparksync.types import ValueError_, bounded, misfit, misfits

STAGED = "sparksync_staged"     # + "_<article nickname>"
META = ("rowguid", "op", "lineage", "colv")


@dataclass
class LocalMeta:
    """What the destination holds for one staged row (for the rows ``decide`` must see)."""

    present: bool
    lineage: object
    colv: object
    tombstone: object


MISFIT = "value does not fit column"     # how a refusal of ``refusal`` begins (said to a device as it is)


def refusal(c: Column, v: Any) -> str | None:
    """Why a change's value ``v`` cannot go into column ``c`` as declared (``types.misfit``; NULL in a NOT NULL
    column), in the same words at every database (SQLite's affinity would store a misfit as it comes), or None.
    Only the value's own words: said to the device that sent it as it is."""
    if v is None:
        return None if c.nullable or c.generated else f"{MISFIT} {c.name} ({c.type} NOT NULL): NULL"
    why = misfit(c.type, v) if bounded(c.type) else None
    return None if why is None else f"{MISFIT} {c.name} ({c.type}): {why}"


class Misfits(ValueError_):
    """Staged changes holding a value that does not fit its column's declared type (an integer outside its
    width, a text longer than its length), found before anything is loaded: {position among the staged
    changes: (column, why, value)}. Each becomes a failed change naming the column, on every database alike."""

    def __init__(self, found: dict[int, tuple[str, str, Any]]):
        super().__init__(f"{len(found)} change(s) hold a value that does not fit its column")
        self.found = found


class StagedColumns(NamedTuple):
    """An article's changes to stage, column by column: rowguids (unique), ops, lineage, colv and row JSON."""

    rowguid: Sequence[str]
    op: Sequence[str]
    lineage: Sequence[str]
    colv: Sequence[str | None]
    row: Sequence[str | None]


@dataclass
class StagedArticle:
    rows: int = 0                         # every staged row, whatever its verdict
    inserts: int = 0                      # verdict apply, op upsert, not present
    updates: int = 0                      # verdict apply, op upsert, present
    deletes: int = 0                      # verdict apply, op delete
    moved: int = 0                        # of the updates, those whose primary key changes (present 2)
    revived: int = 0                      # verdict apply, op upsert, deleted here before (a tombstone)
    contented: int = 0                    # verdict apply, op upsert, with a contents row here (found by rowid)
    skipped: int = 0
    slow: dict[str, LocalMeta] = field(default_factory=dict)   # rowguid -> local metadata


class Staging:
    """The staging tables of one destination connection, inside the batch's transaction."""

    def __init__(self, replica: Replica):
        self.replica = replica
        self.d = replica.dialect
        self.judged: dict[int, str] = {}      # article nickname -> the table its judged rows are in

    def table(self, nick: int) -> str:
        """The staging table of article ``nick``."""
        return self.d.quote(f"{STAGED}_{int(nick)}")

    def rows_table(self, nick: int) -> str:
        """Where the classified rows of article ``nick`` are: the table the classification wrote them to
        (writing a new table beats updating every staged row), the staging table before it ran."""
        return self.judged.get(int(nick)) or self.table(nick)

    @staticmethod
    def columns(art: TrackedArticle) -> list:
        """The article's staged columns (``c0``, ``c1``, ... in this order): all but the rowguid."""
        return [c for c in art.info.columns if c.name != art.rowguid_column]

    # -- 1. stage ---------------------------------------------------------------------------------
    def stage(self, art: TrackedArticle, changes: Iterable[tuple[str, str, str, str | None, str | None]],
              codec: RowCodec | None = None) -> None:
        """``changes``: (rowguid, op, lineage JSON, colv JSON, row JSON), rowguids unique per article."""
        changes = list(changes)
        guids, ops, lineages, colvs, texts = (list(x) for x in zip(*changes)) if changes else ([], [], [], [], [])
        self.stage_columns(art, StagedColumns(guids, ops, lineages, colvs, texts), codec)

    def stage_columns(self, art: TrackedArticle, changes: StagedColumns, codec: RowCodec | None = None) -> None:
        """``stage`` of changes given column by column (as a batch's changes arrive): no tuple per change but
        the one each staged row is loaded from."""
        d, r = self.d, self.replica
        cols = self.columns(art)
        table = self.table(art.nickname)
        d.create_staging(r, table, d.table_sql(art.table), [c.name for c in cols])
        guids, ops, lineages, colvs, texts = changes
        codec = codec or RowCodec([(c.name, c.type) for c in art.info.columns])
        values = codec.decode_columns(texts, [c.name for c in cols])
        found: dict[int, tuple[str, str, Any]] = {}
        for c, column in zip(cols, values):
            bad = misfits(c.type, column) if bounded(c.type) else []
            if not c.nullable and not c.generated and None in column:
                bad += [i for i, v in enumerate(column) if v is None and ops[i] != "delete"]
            for i in bad:
                found.setdefault(i, (c.name, refusal(c, column[i]) or "", column[i]))
        if found:
            raise Misfits(found)
        for i, conv in enumerate(d.db_converters([c.type for c in cols])):
            if conv is not None:
                values[i] = [v if v is None else conv(v) for v in values[i]]
        d.load_staging(r, table, [*META, *(f"c{i}" for i in range(len(cols)))], [guids, ops, lineages, colvs, *values])

    def rowguids_sql(self, nick: int) -> str:
        """A SELECT of the rowguids staged for article ``nick``."""
        return f"SELECT rowguid FROM {self.table(nick)}"

    def lock_rows(self, art: TrackedArticle, rowguids_sql: str | None = None, params: Sequence[Any] = ()) -> None:
        """Where other transactions write at the same time (PostgreSQL), lock the user rows of the
        staged changes (or of ``rowguids_sql``: a SELECT or a list of placeholders for ``params``) before
        their metadata is read: a write committed while this batch waits is then seen by the
        classification (a conflict, not an overwrite). SQLite needs nothing: the batch's transaction
        already holds the database's one write lock."""
        clause = self.d.row_lock_clause()
        if not clause:
            return
        rg = self.d.quote(art.rowguid_column)
        self.replica.execute(
            f"SELECT 1 FROM {self.d.table_sql(art.table)} WHERE {rg} IN "
            f"({rowguids_sql or self.rowguids_sql(art.nickname)}) ORDER BY {rg}{clause}", list(params))

    # -- 2. classify ------------------------------------------------------------------------------
    def classify(self, art: TrackedArticle, forged_from: int | None = None, source: int | None = None) -> StagedArticle:
        """``forged_from``: at the publisher, the source's nickname: a change whose lineage claims a
        version of another replica that the publisher never had, or an entry of its own more than
        ``lineage.MAX_ADVANCE`` above the row's newest version, goes to Python (refused there).
        ``source``: the nickname of the replica the changes come from (``forged_from`` when it is given),
        whose entry most changes advance: a change whose lineage is the local one with that entry moved up
        is judged without comparing the lineages entry by entry.

        ``present``: 0 the row is not in the table, 1 it is, 2 it is with other primary key values."""
        d, r = self.d, self.replica
        nick = int(art.nickname)
        keys = [(i, c.name) for i, c in enumerate(self.columns(art)) if c.name in art.info.primary_key]
        moved = " OR ".join(d.distinct_sql(f"t.{d.quote(c)}", f"s.c{i}") for i, c in keys) or "1 = 0"
        # one statement that writes the judged rows once (updating every staged row in place costs more)
        judged = d.quote(f"{STAGED}_{nick}_judged")
        source = forged_from if forged_from is not None else source     # the shortcut cannot pass a forgery
        d.create_staging_from(r, judged, self._judged_sql(art, forged_from, source, moved))
        self.judged[nick] = s = judged
        out = StagedArticle()
        for op, present, verdict_, revived, has_contents, n in r.query(     # (a contents row's lineage is NOT NULL)
                f"SELECT op, present, verdict, tlin IS NOT NULL, clin IS NOT NULL, count(*) FROM {s} "
                "GROUP BY 1, 2, 3, 4, 5"):
            out.rows += n
            if verdict_ == "skip":
                out.skipped += n
            elif verdict_ == "apply":
                if op == "delete":
                    out.deletes += n
                    continue
                if present:
                    out.updates += n
                    out.moved += n if present == 2 else 0
                else:
                    out.inserts += n
                out.revived += n if revived else 0
                out.contented += n if has_contents else 0
        if out.rows == out.inserts + out.updates + out.deletes + out.skipped:
            return out                        # no row has another verdict: none is slow
        for g, present, clin, ccolv, tlin in r.query(
                f"SELECT s.rowguid, s.present, s.clin, c.colv, s.tlin FROM {s} s LEFT JOIN {r.meta('MSmerge_contents')} c "
                f"ON c.tablenick = {nick} AND c.rowguid = s.rowguid WHERE s.verdict = 'slow'"):
            out.slow[str(g)] = LocalMeta(bool(present), clin, ccolv, tlin)
        return out

    def _judged_sql(self, art: TrackedArticle, forged_from: int | None, source: int | None, moved: str) -> str:
        """One SELECT of the staged rows with their present, clin, tlin and verdict. Each row's state here is
        looked up by its rowguid (the table's rowguid is unique, the metadata's keys are (tablenick, rowguid):
        one match at most; SQLite's nested loops take the staged table as the outer loop, PostgreSQL hashes),
        and its lineage compared with the local one by ``_verdict_sql``'s rules: first the common case
        (``_advanced_sql``: the local lineage with the source's entry moved up, a plain apply), then entry by
        entry. A row-by-row comparison measured 3-4 times faster on PostgreSQL than the lineages' entries
        joined as sets (docs/performance.md)."""
        d, r, s = self.d, self.replica, self.table(art.nickname)
        values = "".join(f", s.c{i}" for i in range(len(self.columns(art))))
        nick = int(art.nickname)
        # the row with this rowguid here, if any (its key's first column is never NULL)
        row, absent = identity.join_rows(d, art, "t", "s.rowguid", left=True), f"t.{d.quote(art.info.primary_key[0])}"
        local = _local_sql(d)
        forged = None
        if forged_from is not None:
            known = f"coalesce(clin, tlin, {d.empty_lineage_sql()})"
            forged = (f"(NOT {d.lineage_dominates_sql(known, d.lineage_without_sql('lineage', forged_from))} "
                      f"OR {d.lineage_advance_sql('lineage', known, forged_from, lin.MAX_ADVANCE)})")
        verdict = _verdict_sql(d.lineage_dominates_sql("lineage", local), d.lineage_dominates_sql(local, "lineage"),
                               forged, None if source is None else _advanced_sql(d, source))
        return (
            f"SELECT z.*, {verdict} AS verdict FROM (SELECT s.rowguid, s.op, s.lineage, s.colv{values}, "
            f"CASE WHEN {absent} IS NULL THEN 0 WHEN {moved} THEN 2 ELSE 1 END AS present, "
            f"c.lineage AS clin, x.lineage AS tlin{', c.rowid AS crow' if d.capabilities.stable_rowids else ''} FROM {s} s "
            f"{row} "
            f"LEFT JOIN {r.meta('MSmerge_contents')} c ON c.tablenick = {nick} AND c.rowguid = s.rowguid "
            f"LEFT JOIN {r.meta('MSmerge_tombstone')} x ON x.tablenick = {nick} AND x.rowguid = s.rowguid) z")

    def verdicts(self, art: TrackedArticle) -> dict[str, str]:
        """rowguid -> verdict of every staged row of ``art`` (after ``classify``)."""
        return {str(g): v for g, v in self.replica.query(f"SELECT rowguid, verdict FROM {self.rows_table(art.nickname)}")}

    # -- 3. apply ---------------------------------------------------------------------------------
    def apply(self, art: TrackedArticle, op: str, generation: int, clear_failed: bool,
              staged: StagedArticle | None = None) -> None:
        """Apply the ``apply`` rows of one article and operation ("upsert" | "delete"). ``staged``: what the
        classification counted of them; a statement it says matches no row is not run (each scans the batch)."""
        d, r, s = self.d, self.replica, self.rows_table(art.nickname)
        p = r.p
        nick = int(art.nickname)
        t = d.table_sql(art.table)
        rg = d.quote(art.rowguid_column)
        contents, tomb = r.meta("MSmerge_contents"), r.meta("MSmerge_tombstone")
        def mine(a: str = "") -> str:
            return f"{a}verdict = 'apply' AND {a}op = '{op}'"

        guids = f"SELECT rowguid FROM {s} WHERE {mine()}"
        if op == "delete":
            identity.delete_rows(r, art, guids)
            r.execute(f"DELETE FROM {contents} WHERE tablenick = {nick} AND rowguid IN ({guids})")
            r.execute(
                f"INSERT INTO {tomb} (tablenick, rowguid, type, lineage, generation) "
                f"SELECT {nick}, rowguid, 1, lineage, {p} FROM {s} WHERE {mine()} "
                f"ON CONFLICT (tablenick, rowguid) DO UPDATE SET type = excluded.type, lineage = excluded.lineage, "
                f"generation = excluded.generation", [generation])
        else:
            cols = [(c.name, f"s.c{i}") for i, c in enumerate(self.columns(art))]
            # Primary key columns are set only where they change: setting a key to its own value still
            # rewrites the key's index entry (on SQLite, the whole row of a rowid table).
            pk = set(art.info.primary_key)
            if art.keyed:       # the row found by its key, through the identity table
                ids = r.meta(art.ids_table)
                update = (f" FROM {s} s JOIN {ids} i ON i.{rg} = s.rowguid WHERE {identity.key_match(d, art, t, 'i')} "
                          f"AND {mine('s.')} AND s.present > 0")
            else:
                update = f" FROM {s} s WHERE {t}.{rg} = s.rowguid AND {mine('s.')} AND s.present > 0"
            rest = [(c, e) for c, e in cols if c not in pk]
            keys = [(c, e) for c, e in cols if c in pk]
            if rest and (staged is None or staged.updates):
                r.execute(f"UPDATE {t} SET " + ", ".join(f"{d.quote(c)} = {e}" for c, e in rest) + update)
            if keys and (staged is None or staged.moved):      # where the classification found the key moved
                r.execute(f"UPDATE {t} SET " + ", ".join(f"{d.quote(c)} = {e}" for c, e in keys) + update
                          + " AND s.present = 2")
                if art.keyed:   # and its rowguid follows it
                    r.execute(f"UPDATE {ids} SET " + ", ".join(f"{d.quote(c)} = {e}" for c, e in keys)
                              + f" FROM {s} s WHERE {ids}.{rg} = s.rowguid AND {mine('s.')} AND s.present = 2")
            if staged is None or staged.inserts:
                new = f" FROM {s} s WHERE {mine('s.')} AND s.present = 0"
                if art.keyed:
                    r.execute(f"INSERT INTO {t} ({', '.join(d.quote(c) for c, _ in cols)}) SELECT "
                              + ", ".join(e for _, e in cols) + new)
                    by_name = dict(cols)
                    identity.insert_ids(r, art, "SELECT " + ", ".join(by_name[k] for k in art.info.primary_key)
                                        + ", s.rowguid" + new)
                else:
                    names = ", ".join([rg] + [d.quote(c) for c, _ in cols])
                    r.execute(f"INSERT INTO {t} ({names}) SELECT " + ", ".join(["s.rowguid"] + [e for _, e in cols])
                              + new)
            if d.capabilities.stable_rowids:
                # the contents rows the classification found, by rowid (one integer probe, no upsert); the others new
                if staged is None or staged.contented:
                    r.execute(f"UPDATE {contents} SET generation = {p}, lineage = s.lineage, colv = s.colv FROM {s} s "
                              f"WHERE {contents}.rowid = s.crow AND {mine('s.')}", [generation])
                if staged is None or staged.contented < staged.inserts + staged.updates:
                    r.execute(f"INSERT INTO {contents} (tablenick, rowguid, generation, lineage, colv) "
                              f"SELECT {nick}, rowguid, {p}, lineage, colv FROM {s} WHERE {mine()} AND crow IS NULL",
                              [generation])
            else:
                r.execute(
                    f"INSERT INTO {contents} (tablenick, rowguid, generation, lineage, colv) "
                    f"SELECT {nick}, rowguid, {p}, lineage, colv FROM {s} WHERE {mine()} "
                    f"ON CONFLICT (tablenick, rowguid) DO UPDATE SET generation = excluded.generation, "
                    f"lineage = excluded.lineage, colv = excluded.colv", [generation])
            if staged is None or staged.revived:
                r.execute(f"DELETE FROM {tomb} WHERE tablenick = {nick} AND rowguid IN ({guids} AND tlin IS NOT NULL)")
        if clear_failed:
            r.execute(f"DELETE FROM {r.meta('MSmerge_failed_changes')} WHERE tablenick = {nick} "
                      f"AND rowguid IN ({guids})")

    def set_aside(self, art: TrackedArticle, rowguids: list[str]) -> None:
        """These ``apply`` rows go another way (a business logic handler rejected them or gave a row of its own):
        the set-based apply leaves them (verdict ``handled``)."""
        u = self.d.uuid_param()
        for chunk in in_chunks(rowguids):
            self.replica.execute(f"UPDATE {self.rows_table(art.nickname)} SET verdict = 'handled' "
                                 f"WHERE rowguid IN ({', '.join([u] * len(chunk))})", chunk)

    def rows(self, art: TrackedArticle, op: str) -> list[tuple[str, bool]]:
        """(rowguid, present) of the ``apply`` rows of one article and operation, to go one at a time."""
        return [(str(g), bool(pr)) for g, pr in self.replica.query(
            f"SELECT rowguid, present FROM {self.rows_table(art.nickname)} WHERE verdict = 'apply' AND op = '{op}'")]


def _local_sql(d) -> str:
    """The local lineage a staged row is compared with: its tombstone's where it was deleted here, else
    its contents' (empty when it has none)."""
    return f"(CASE WHEN tlin IS NOT NULL AND present = 0 THEN tlin ELSE coalesce(clin, {d.empty_lineage_sql()}) END)"


def _advanced_sql(d, source: int) -> str:
    """A boolean SQL expression, true only where the verdict is a plain apply without comparing entry by entry:
    the row is here with a lineage, and the incoming one is that lineage with the entry of ``source`` moved up
    by at most ``lineage.MAX_ADVANCE`` (every other entry the same, so the incoming one dominates and claims
    nothing the destination has not seen). False says nothing: the entry-by-entry rules decide."""
    mine, theirs = d.lineage_entry_sql("lineage", source), d.lineage_entry_sql("clin", source)
    return (f"(present > 0 AND clin IS NOT NULL AND {d.lineage_without_sql('lineage', source)} = "
            f"{d.lineage_without_sql('clin', source)} AND {mine} > {theirs} AND {mine} <= {theirs} + {lin.MAX_ADVANCE})")


def _verdict_sql(up: str, down: str, forged: str | None, advanced: str | None = None) -> str:
    """The verdict of a staged row from its op, present, clin and tlin and four booleans: ``up`` the incoming
    lineage has seen all the local one has, ``down`` the other way, ``forged`` (at the publisher) it claims
    versions the publisher never had (``decide``'s rules), ``advanced`` (``_advanced_sql``) a plain apply
    found without them."""
    first = (f"WHEN {advanced} THEN 'apply' " if advanced else "") + (f"WHEN {forged} THEN 'slow' " if forged else "")
    return (f"CASE {first}WHEN op = 'upsert' THEN CASE "
            f"  WHEN present = 0 AND tlin IS NULL THEN 'apply' "
            f"  WHEN {up} AND NOT {down} THEN 'apply' WHEN {down} THEN 'skip' ELSE 'slow' END "
            f"ELSE CASE WHEN (tlin IS NOT NULL AND present = 0) OR (present = 0 AND clin IS NULL) THEN 'slow' "
            f"  WHEN {up} THEN 'apply' WHEN {down} THEN 'skip' ELSE 'slow' END END")
