"""Set-based apply of a commit batch at a subscriber.

A generated procedure (CALL, SCALL, MCALL, XCALL) or a plain statement (SQL) does one known thing
per command: insert the row, update it by its original key (SCALL/MCALL: only the columns whose bit
is set), delete it, and fail with 20598 when the row is not there. Calling it once per command costs
a round trip and a procedure call each; for a batch of thousands of commands sparksync gets the same
result with a few statements: the batch is staged (COPY on PostgreSQL), each command numbered by
how many commands of the same row came before it in the batch (its *wave*), and wave by wave each
article's deletes (children first), then updates and inserts (parents first) run set-based; an
update or delete matching fewer rows than it has commands is 20598. Any failure rolls the batch
back and the caller applies it one command at a time, which finds the failing command exactly (and
honours skip_errors). Commands of different rows commute, and a row's commands keep their order, so
the result is the same; a batch with a custom procedure, a schema change, a TRUNCATE or an update of
a primary key is applied command by command instead. A PostgreSQL publisher's changes at a
PostgreSQL subscriber are staged typed, in the text form the log holds them in (``bulk_text.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sparksync.dialects.replica import Replica
from sparksync.errors import RowNotFound
from sparksync.ordering import dri_order
from sparksync.transactional.delivery.bulk_text import TextBatch, TextStaging
from sparksync.transactional.delivery.subscriber import ArticleTarget, Command
from sparksync.types import SqlType

STAGED = "sparksync_tx_staged"
MIN_COMMANDS = 20           # below this a few executemany runs cost less than staging


class BulkApplier:
    def __init__(self, replica: Replica, targets: dict[int, ArticleTarget], processes: int = 1):
        self.replica = replica
        self.targets = targets
        self.processes = processes          # how many processes may make a big batch's lines (bulk_text.py)
        self.d = replica.dialect
        self.table = self.d.quote(STAGED)
        self._ready = False
        self.single_wave: set[int] = set()     # articles of the staged batch whose rows each come once

    # -- eligibility -------------------------------------------------------------------------------
    def _bulk_spec(self, t: ArticleTarget, op: str) -> bool:
        spec = t.spec(op)
        return not spec.replicated or spec.syntax == "SQL" or (spec.uses_procedure and spec.generated)

    def eligible(self, commands: Sequence[Command]) -> bool:
        if len(commands) < MIN_COMMANDS:
            return False
        seen: set[tuple[int, str]] = set()
        for c in commands:
            if c.type == "token":
                continue
            if c.type not in ("ins", "upd", "del"):
                return False
            k = (c.article_id, c.type)
            if k not in seen:
                t = self.targets.get(c.article_id)
                if t is None or not self._bulk_spec(t, c.type):
                    return False
                seen.add(k)
        return True

    def _replicated(self) -> set[tuple[int, str]]:
        return {(aid, op) for aid, t in self.targets.items() for op in ("ins", "upd", "del") if t.spec(op).replicated}

    def _in_text(self, commands: Sequence[Command]) -> bool:
        """A PostgreSQL publisher's changes to a PostgreSQL subscriber: staged in the log's own text form."""
        return self.d.capabilities.takes_server_text and all(c.change is not None for c in commands
                                                             if c.type != "token")

    def prepare(self, commands: Sequence[Command]) -> TextBatch | None:
        """The Python half of applying ``commands`` in the log's text form (:meth:`TextStaging.prepare`, in
        this process: the subscription streams' statements use the other cores), or None when the batch
        does not go that way (:meth:`apply` does everything then)."""
        if not (self._in_text(commands) and self.eligible(commands)):
            return None
        return TextStaging(self.replica, self.targets).prepare(commands, self._replicated())   # (one process)

    def apply_prepared(self, batch: TextBatch) -> bool:
        """:meth:`apply` of a batch :meth:`prepare` made."""
        return TextStaging(self.replica, self.targets).execute(batch)

    # -- apply -------------------------------------------------------------------------------------
    def apply(self, commands: Sequence[Command]) -> bool:
        """Apply ``commands`` (checked by :meth:`eligible`) inside the caller's transaction. Returns False,
        having changed nothing, when the batch updates a primary key (the caller goes command by
        command); raises on any failure (the caller rolls back)."""
        d, r, s = self.d, self.replica, self.table
        replicated = self._replicated()
        if self._in_text(commands):
            return TextStaging(r, self.targets, self.processes).apply(commands, replicated)
        if not self._ready:
            r.execute(d.tx_staging_table_ddl(s))
            self._ready = True
        r.execute(f"DELETE FROM {s}")
        rows = [(i, c.article_id, c.type, c.after, c.before) for i, c in enumerate(commands)
                if (c.article_id, c.type) in replicated]
        if not rows:
            return True
        markers = d.unstorable_markers()
        if markers and any(m in (x[3] or "") for x in rows for m in markers):
            return False       # a value this subscriber may not hold: command by command, so it is named
        d.load_rows(r, s, ("ord", "article_id", "op", "after", "before"), rows)
        articles = list(dict.fromkeys(x[1] for x in rows))
        self.single_wave = set()
        waves = {}
        for aid in articles:
            moved, repeated = self._shape(self.targets[aid])
            if moved:
                return False
            waves[aid] = self._number_waves(self.targets[aid]) if repeated else 1
            if not repeated:            # every row once: one wave, and no need to write it down
                self.single_wave.add(aid)
        counts = {(aid, op, w or 1): n for aid, op, w, n in r.query(
            f"SELECT article_id, op, wave, count(*) FROM {s} GROUP BY article_id, op, wave")}
        order = dri_order(articles, {aid: self.targets[aid].parents for aid in articles})
        for wave in range(1, max(waves.values()) + 1):
            for aid in reversed(order):
                n = counts.get((aid, "del", wave))
                if n:
                    self._delete(self.targets[aid], wave, n)
            for aid in order:
                for op, run in (("upd", self._update), ("ins", self._insert)):
                    n = counts.get((aid, op, wave))
                    if n:
                        run(self.targets[aid], wave, n)
        return True

    def _key_fields(self, t: ArticleTarget, source: str) -> list[str]:
        return [self.d.json_field(f"{self.table}.{source}", k) for k in t.key]

    def _shape(self, t: ArticleTarget) -> tuple[bool, bool]:
        """(does an update change the primary key? — then the batch goes command by command,
        does a row have several commands?) for one article of the staged batch, in one query."""
        s, d = self.table, self.d
        moved = " OR ".join(f"{b} IS DISTINCT FROM {a}" for b, a in
                            zip(self._key_fields(t, "before"), self._key_fields(t, "after")))
        key = ", ".join(f"coalesce({d.json_field(f'{s}.before', k)}, {d.json_field(f'{s}.after', k)})" for k in t.key)
        distinct = f"count(DISTINCT {key})" if len(t.key) == 1 else "-1"
        n_moved, repeated = self.replica.aggregate(
            f"SELECT sum(CASE WHEN op = 'upd' AND before IS NOT NULL AND ({moved}) THEN 1 ELSE 0 END), "
            f"count(*) <> {distinct} FROM {s} WHERE article_id = {int(t.article_id)}")
        return bool(n_moved), bool(repeated)

    def _number_waves(self, t: ArticleTarget) -> int:
        """Number each command by the commands of the same row before it (1, 2, ...); returns the highest."""
        s = self.table
        key = ", ".join(f"coalesce({self.d.json_field('x.before', k)}, {self.d.json_field('x.after', k)})"
                        for k in t.key)
        aid = int(t.article_id)
        r = self.replica
        r.execute(f"UPDATE {s} SET wave = w.rn FROM (SELECT x.ord, row_number() OVER (PARTITION BY {key} "
                  f"ORDER BY x.ord) AS rn FROM {s} x WHERE x.article_id = {aid}) w WHERE {s}.ord = w.ord")
        return int(r.scalar(f"SELECT max(wave) FROM {s} WHERE article_id = {aid}") or 1)

    def _columns(self, t: ArticleTarget) -> list[tuple[str, SqlType]]:
        return [(c, SqlType.from_dict(x)) for c, x in t.columns]

    def _mine(self, t: ArticleTarget, op: str, wave: int, alias: str = "s") -> str:
        mine = f"{alias}.article_id = {int(t.article_id)} AND {alias}.op = '{op}'"
        return mine if t.article_id in self.single_wave else f"{mine} AND {alias}.wave = {int(wave)}"

    def _delete(self, t: ArticleTarget, wave: int, n: int) -> None:
        d, table = self.d, self.d.table_sql(t.table)
        types = dict(t.columns)
        exprs = [d.json_typed("s.before", k, SqlType.from_dict(types[k])) for k in t.key]
        cols = ", ".join(d.quote(k) for k in t.key)
        done = self.replica.execute(
            f"DELETE FROM {table} WHERE ({cols}) IN (SELECT {', '.join(exprs)} FROM {self.table} s "
            f"WHERE {self._mine(t, 'del', wave)})").rowcount
        self._check(t, "delete", n, done)

    def _update(self, t: ArticleTarget, wave: int, n: int) -> None:
        d, table = self.d, self.d.table_sql(t.table)
        cols = self._columns(t)
        types = dict(cols)
        after_joins, values = d.staged_values(t.table, cols, "s", payload="after")
        keys = [d.json_typed("s.before", k, types[k]) for k in t.key]
        bitmap = t.upd.syntax in ("SCALL", "MCALL")
        sets = []
        for (name, _), v in zip(cols, values):
            if name in t.key:
                continue
            q = d.quote(name)
            if bitmap:      # only the columns the update changed, as the procedure's bitmap says
                changed = (f"{d.json_has('s.before', name)} AND {d.json_field('s.before', name)} IS DISTINCT FROM "
                           f"{d.json_field('s.after', name)}")
                sets.append(f"{q} = CASE WHEN {changed} THEN {v} ELSE {table}.{q} END")
            else:
                sets.append(f"{q} = {v}")
        if not sets:        # every column is in the key: the row only has to exist
            cols_sql = ", ".join(d.quote(k) for k in t.key)
            found = self.replica.scalar(
                f"SELECT count(*) FROM {table} WHERE ({cols_sql}) IN (SELECT {', '.join(keys)} FROM {self.table} "
                f"s WHERE {self._mine(t, 'upd', wave)})")
            self._check(t, "update", n, int(found or 0))
            return
        where = " AND ".join(f"{table}.{d.quote(k)} = {e}" for k, e in zip(t.key, keys))
        done = self.replica.execute(
            f"UPDATE {table} SET {', '.join(sets)} FROM {self.table} s{after_joins} "
            f"WHERE {where} AND {self._mine(t, 'upd', wave)}").rowcount
        self._check(t, "update", n, done)

    def _insert(self, t: ArticleTarget, wave: int, n: int) -> None:
        d = self.d
        cols = self._columns(t)
        joins, values = d.staged_values(t.table, cols, "s", payload="after")
        self.replica.execute(
            f"INSERT INTO {d.table_sql(t.table)} ({', '.join(d.quote(c) for c, _ in cols)}) "
            f"SELECT {', '.join(values)} FROM {self.table} s{joins} WHERE {self._mine(t, 'ins', wave)} ORDER BY s.ord")

    def _check(self, t: ArticleTarget, what: str, expected: int, done: int | None) -> None:
        if done is not None and 0 <= done < expected:
            raise RowNotFound(f"{self.replica.label}: {expected - done} of {expected} {what}s of {t.name} found no "
                              "row (20598)")
