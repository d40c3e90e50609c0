"""What a download changed at a web device, for the application's callbacks (a screen refreshes from it, never by
polling its tables).

A batch's rows as they were before it applied and as they are after its writes, inside its transaction, say what
it changed: a row that appeared was *inserted*, one that went was *deleted* (a delete at the publisher, or a row
that left the device's partition), one whose version changed was *updated*. Most rows of a big download are plain
changes the apply stages, classifies and applies set-based (``merge/apply/staging.py``): their state before is what
the classification looked up (in the row's table and its tracking metadata), and their fate is its verdict, so they
are read from the table of judged rows, each once and only as far as its fate needs: the keys here before of the
deletes when the batch is planned (``Watch.planned``), the rows it applied (and how: inserted or updated) once it
has written. The others (rows decided one at a time, rows that left the partition, a row twice in a batch, a
set-based apply that fell back to rows one at a time) are read before the writes and again after them. What the
batch changed is written in its transaction (``MSdevice_notices``, when the application listens) and given to the
callbacks once it has committed (``deliver``), then removed: a crash between the commit and the callbacks delivers
it at the next sync (at least once, never lost).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal

from sparksync.dialects.replica import Replica, in_chunks
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.tracked import TrackedArticle
from sparksync.metadata import store
from sparksync.metadata.schema import DEVICE
from sparksync.rows import RowCodec

NOTICES = "MSdevice_notices"


@dataclass(frozen=True)
class RowChange:
    """One row a download changed: its article, ``inserted`` / ``updated`` / ``deleted``, its rowguid and its
    primary key (JSON values, as change rows carry them)."""

    article: str
    operation: Literal["inserted", "updated", "deleted"]
    rowguid: str
    key: dict[str, Any]


@dataclass(frozen=True)
class ChangeBatch:
    """What one committed download batch changed at the device."""

    session_id: str
    batch: int
    changes: list[RowChange] = field(default_factory=list)

    def keys(self, article: str, operation: str | None = None) -> list[dict[str, Any]]:
        """The primary keys of ``article``'s rows this batch changed (``operation``: only those)."""
        return [c.key for c in self.changes if c.article == article and operation in (None, c.operation)]

    @property
    def articles(self) -> set[str]:
        return {c.article for c in self.changes}


Listener = Callable[[ChangeBatch], None]


@dataclass
class Rows:
    """A batch's rows at the device: rowguid -> (primary key, version), per article nickname."""

    seen: dict[int, dict[str, tuple[dict[str, Any], str]]]


def read(device: Replica, articles: dict[int, TrackedArticle], guids: dict[int, list[str]]) -> Rows:
    """These rows as the device has them now (a row it does not have is absent)."""
    d = device.dialect
    out: dict[int, dict[str, tuple[dict[str, Any], str]]] = {}
    for nick, wanted in guids.items():
        art = articles.get(nick)
        if art is None:
            continue
        pk = list(art.info.primary_key)
        cols = [c for c in art.info.columns if c.name in pk]
        codec = RowCodec([(c.name, c.type) for c in cols])
        rg = d.quote(art.rowguid_column)
        seen = out.setdefault(nick, {})
        for chunk in in_chunks(wanted):
            for r in device.query(
                    f"SELECT t.{rg}, {', '.join('t.' + d.quote(c.name) for c in cols)}, c.lineage FROM "
                    f"{identity.rows_sql(d, art)} t LEFT JOIN {device.meta('MSmerge_contents')} c ON c.tablenick = "
                    f"{int(nick)} AND c.rowguid = t.{rg} WHERE t.{rg} IN ({', '.join([d.uuid_param()] * len(chunk))})",
                    chunk):
                key = {c.name: codec.json_value(i, v) for i, (c, v) in enumerate(zip(cols, r[1:-1]))}
                seen[str(r[0]).lower()] = (key, str(r[-1]))
    return Rows(out)


def batch_guids(rows: Any) -> dict[int, list[str]]:
    """A batch's change rows (an Arrow table) -> its rowguids (lowercase) by article nickname, in row order."""
    import pyarrow.compute as pc

    out: dict[int, list[str]] = {}
    if rows is None or not rows.num_rows:
        return out
    nicks, guids = rows.column("tablenick"), rows.column("rowguid")
    if nicks.null_count or guids.null_count or not pc.all(pc.string_is_ascii(guids)).as_py():
        for nick, guid in zip(nicks.to_pylist(), guids.to_pylist()):      # (what str.lower does, exactly)
            out.setdefault(int(nick), []).append(str(guid).lower())
        return out
    lower = pc.ascii_lower(guids)             # an ASCII text lowercased as str.lower does, in C
    unique = pc.unique(nicks).to_pylist()
    for nick in unique:
        out[int(nick)] = (lower if len(unique) == 1 else lower.filter(pc.equal(nicks, nick))).to_pylist()
    return out


def changed(before: Rows, after: Rows, names: dict[int, str]) -> list[list[Any]]:
    """The rows whose presence or version differ between the two reads: [article, operation, rowguid, key] each."""
    out: list[list[Any]] = []
    for nick in sorted(set(before.seen) | set(after.seen)):
        was, now = before.seen.get(nick, {}), after.seen.get(nick, {})
        name = names.get(nick, str(nick))
        for guid in sorted(set(was) | set(now)):
            if guid not in was:
                out.append([name, "inserted", guid, now[guid][0]])
            elif guid not in now:
                out.append([name, "deleted", guid, was[guid][0]])
            elif was[guid][1] != now[guid][1]:
                out.append([name, "updated", guid, now[guid][0]])
    return out


@dataclass
class Staged:
    """An article's rows of the batch staged by the apply (``staged_rows``): the table its judged rows are in
    (``table``, their primary key values in its ``columns``), the primary key values here before of its deletes of
    rows that were here, with their verdicts (``deleted``), the rows the batch holds twice (``repeated``: read before
    and after, as the others are) and, unless every change of the article is staged once (``whole``), the rowguids
    staged once (``once``)."""

    codec: RowCodec
    names: list[str]
    table: str
    columns: list[str]
    deleted: dict[str, tuple[str | None, tuple]]
    repeated: set[str]
    whole: bool
    once: set[str] = field(default_factory=set)

    def key(self, values: tuple) -> dict[str, Any]:
        return {name: self.codec.json_value(i, v) for i, (name, v) in enumerate(zip(self.names, values))}

    def told(self, device: Replica, name: str, upserted: bool, deleted: bool) -> list[list[Any]]:
        """What the verdicts tell of the rows the set-based apply wrote (``upserted``, ``deleted``: it did, for that
        operation): an upsert's row inserted or updated (its key after: as staged), a delete's row deleted if it was
        here (its key before). [article, operation, rowguid, key] each."""
        out: list[list[Any]] = []
        if upserted:
            rows = device.query(f"SELECT rowguid, present, {', '.join(self.columns)} FROM {self.table} "
                                "WHERE verdict = 'apply' AND coalesce(op, '') <> 'delete'")
            if len(self.names) == 1:          # one key column: no generic key per row
                column, value = self.names[0], self.codec.json_value
                out = [[name, "updated" if p else "inserted", str(g).lower(), {column: value(0, v)}] for g, p, v in rows]
            else:
                out = [[name, "updated" if r[1] else "inserted", str(r[0]).lower(), self.key(r[2:])] for r in rows]
        if deleted:
            out += [[name, "deleted", g, self.key(values)] for g, (verdict, values) in self.deleted.items()
                    if verdict == "apply"]
        return [c for c in out if c[2] not in self.repeated] if self.repeated else out

    def untold(self, device: Replica, upserted: bool, deleted: bool) -> list[tuple[str, bool, str, tuple]]:
        """The rows whose fate the verdicts do not tell (decided one at a time, or the bulk apply of their operation
        fell back to rows one at a time): (rowguid, whether it was here, its version here, its key here) each, read
        before the batch (an upsert's key as staged, a delete's as it was)."""
        which = ["coalesce(verdict, '') NOT IN ('skip', 'apply')"]
        if not upserted:
            which.append("(verdict = 'apply' AND coalesce(op, '') <> 'delete')")
        if not deleted:
            which.append("(verdict = 'apply' AND op = 'delete')")
        out = []
        for r in device.query(f"SELECT rowguid, present, clin, {', '.join(self.columns)} FROM {self.table} "
                              f"WHERE {' OR '.join(which)}"):
            g = str(r[0]).lower()
            if g not in self.repeated:
                out.append((g, bool(r[1]), str(r[2]), self.deleted.get(g, (None, ()))[1] or r[3:]))
        return out


class Watch:
    """One download batch watched: ``planned`` (the apply's hook once the batch is staged and classified, before
    anything is written) reads the keys its deletes had and the state of the rows it did not stage; ``record`` (its
    hook in the batch's transaction after its writes) tells the staged rows' fate from their verdicts, reads the rows
    whose fate the verdicts do not tell, keeps what changed in ``changes`` ([article, operation, rowguid, key] each,
    by article and rowguid) and, ``keep``: writes it."""

    def __init__(self, device: Replica, articles: dict[int, TrackedArticle], names: dict[int, str], rows: Any,
                 session_id: str, seq: int, keep: bool):
        self.articles, self.names, self.session_id, self.seq, self.keep = articles, names, session_id, seq, keep
        self.guids = batch_guids(rows)
        self.staged: dict[int, Staged] = {}
        self.rest: dict[int, list[str]] = {}       # the batch's rows not staged (or staged twice), per article
        self.before = Rows({})
        self.changes: list[list[Any]] = []

    def planned(self, replica: Replica, work: list) -> None:
        """``work``: the batch's set-based steps (``merge.apply.classify.StagedWork``)."""
        for w in work:
            nick = int(w.art.nickname)
            if nick in self.staged or nick not in self.articles:
                continue
            self.staged[nick] = staged_rows(replica, self.articles[nick], w.staging, w.staged,
                                            self.guids.get(nick, []))
        self.rest = {nick: _unstaged(self.staged.get(nick), guids) for nick, guids in self.guids.items()}
        self.before = read(replica, self.articles, {n: g for n, g in self.rest.items() if g})

    def record(self, replica: Replica, outcome: Any) -> None:
        bulk: set[tuple[int, str]] = getattr(outcome, "bulk", set())
        told: dict[int, list[list[Any]]] = {}
        again: dict[int, list[str]] = {}
        for nick, staged in self.staged.items():
            upserted, deleted = (nick, "upsert") in bulk, (nick, "delete") in bulk
            told[nick] = staged.told(replica, self.names.get(nick, str(nick)), upserted, deleted)
            for g, present, version, before in staged.untold(replica, upserted, deleted):
                again.setdefault(nick, []).append(g)       # decided one at a time, or the bulk apply fell back
                if present:           # (an upsert's notice carries its key after; a delete's, the one before)
                    self.before.seen.setdefault(nick, {})[g] = (staged.key(before), version)
        wanted = {nick: self.rest.get(nick, guids) + again.get(nick, []) for nick, guids in self.guids.items()}
        after = read(replica, self.articles, {n: g for n, g in wanted.items() if g})
        order = {name: nick for nick, name in self.names.items()}
        for c in changed(self.before, after, self.names):
            told.setdefault(order.get(c[0], 0), []).append(c)
        # by article (its nickname), then rowguid; told before read where both say the same row (never)
        self.changes = [c for nick in sorted(told) for c in sorted(told[nick], key=itemgetter(2))]
        if self.keep:
            write(replica, self.session_id, self.seq, self.changes)

    def row_changes(self) -> list[RowChange]:
        """``changes`` as the callbacks are given them."""
        return [RowChange(*c) for c in self.changes]


def _unstaged(staged: Staged | None, guids: list[str]) -> list[str]:
    """Of an article's rows in the batch, those the classification does not tell: not staged, or staged twice."""
    if staged is None:
        return guids
    if staged.whole:
        return []
    return [g for g in guids if g not in staged.once]


def staged_rows(device: Replica, art: TrackedArticle, staging: Any, classified: Any, guids: list[str]) -> Staged:
    """Article ``art``'s rows in ``staging`` (``merge.apply.staging.Staging``) after its classification
    (``classified``: its ``StagedArticle``); ``guids``: the batch's rowguids of the article. One read joined to the
    rows here of its deletes (their keys before the batch); a read of the staged rowguids only when not every change
    of the article was staged once."""
    d = device.dialect
    pk = list(art.info.primary_key)
    cols = [c for c in art.info.columns if c.name in pk]
    staged_cols = {c.name: f"c{i}" for i, c in enumerate(staging.columns(art))}
    codec = RowCodec([(c.name, c.type) for c in cols])
    table = staging.rows_table(art.nickname)
    deleted = {str(r[0]).lower(): (r[1], r[2:]) for r in device.query(
        "SELECT s.rowguid, s.verdict, " + ", ".join(f"t.{d.quote(c.name)}" for c in cols)
        + f" FROM {table} s {identity.join_rows(d, art, 't', 's.rowguid')} WHERE s.op = 'delete'")}
    unique = set(guids)
    repeated = {g for g, k in Counter(guids).items() if k > 1} if len(unique) < len(guids) else set()
    out = Staged(codec, [c.name for c in cols], table, [staged_cols[c.name] for c in cols], deleted, repeated,
                 whole=not repeated and len(guids) == classified.rows)
    if not out.whole:                 # some changes of the batch were not staged (or twice): which were
        out.once = {str(g).lower() for (g,) in device.query(f"SELECT rowguid FROM {table}")} - repeated
    return out


def listening(device: Replica) -> bool:
    return store.table_set_version(device, DEVICE) is not None


def write(device: Replica, session_id: str, seq: int, changes: list[list[Any]]) -> None:
    """What a batch changed ([article, operation, rowguid, key] each), in its transaction (delivered after it
    commits)."""
    if changes:
        store.insert_row(device, NOTICES, {
            "session_id": session_id, "batch_seq": seq, "committed_at": store.utcnow(), "changes": changes})


def deliver(device: Replica, listener: Listener) -> int:
    """Every committed batch's changes not delivered yet, oldest first, each removed once ``listener`` returned.
    Returns how many batches were delivered."""
    if not listening(device):
        return 0
    n = 0
    for nid, sid, seq, changes in device.query(f"SELECT notice_id, session_id, batch_seq, changes FROM "
                                                f"{device.meta(NOTICES)} ORDER BY notice_id"):
        items = json.loads(changes) if isinstance(changes, str) else changes
        listener(ChangeBatch(str(sid), int(seq), [RowChange(a, op, g, k) for a, op, g, k in items]))
        with device.transaction():
            device.execute(f"DELETE FROM {device.meta(NOTICES)} WHERE notice_id = {device.p}", [int(nid)])
        n += 1
    return n
