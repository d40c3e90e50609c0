"""What a download changed at a web device, for the application's callbacks (a screen refreshes from it, never by
polling its tables).

A batch's rows as they were before it applied and as they are after its writes, inside its transaction, say what
it changed: a row that appeared was *inserted*, one that went was *deleted* (a delete at the publisher, or a row
that left the device's partition), one whose version changed was *updated*. Most rows of a big download are plain
changes the apply stages, classifies and applies set-based (``merge/apply/staging.py``): their state before is what
the classification looked up (in the row's table and its tracking metadata), and their fate is its verdict, so they
are read once, from the staging table, when the batch is planned (``Watch.planned``). The others (rows decided one
at a time, rows that left the partition, a row twice in a batch, a set-based apply that fell back to rows one at a
time) are read before the writes and again after them. What the batch changed is written in its transaction
(``MSdevice_notices``, when the application listens) and given to the callbacks once it has committed
(``deliver``), then removed: a crash between the commit and the callbacks delivers it at the next sync (at least
once, never lost).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sparksync.dialects.replica import Replica, in_chunks
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
                    f"{d.table_sql(art.table)} t LEFT JOIN {device.meta('MSmerge_contents')} c ON c.tablenick = "
                    f"{int(nick)} AND c.rowguid = t.{rg} WHERE t.{rg} IN ({', '.join([d.uuid_param()] * len(chunk))})",
                    chunk):
                key = {c.name: codec.json_value(i, v) for i, (c, v) in enumerate(zip(cols, r[1:-1]))}
                seen[str(r[0]).lower()] = (key, str(r[-1]))
    return Rows(out)


def batch_guids(rows: Any) -> dict[int, list[str]]:
    """A batch's change rows (an Arrow table) -> its rowguids by article nickname."""
    out: dict[int, list[str]] = {}
    if rows is None or not rows.num_rows:
        return out
    cols = rows.select(["tablenick", "rowguid"]).to_pydict()
    for nick, guid in zip(cols["tablenick"], cols["rowguid"]):
        out.setdefault(int(nick), []).append(str(guid).lower())
    return out


def changed(before: Rows, after: Rows, names: dict[int, str]) -> list[RowChange]:
    """The rows whose presence or version differ between the two reads."""
    out = []
    for nick in sorted(set(before.seen) | set(after.seen)):
        was, now = before.seen.get(nick, {}), after.seen.get(nick, {})
        name = names.get(nick, str(nick))
        for guid in sorted(set(was) | set(now)):
            if guid not in was:
                out.append(RowChange(name, "inserted", guid, now[guid][0]))
            elif guid not in now:
                out.append(RowChange(name, "deleted", guid, was[guid][0]))
            elif was[guid][1] != now[guid][1]:
                out.append(RowChange(name, "updated", guid, now[guid][0]))
    return out


@dataclass
class Staged:
    """An article's rows of the batch staged by the apply, by rowguid: (op, whether it was here, its version here
    before, the classification's verdict, its primary key values as staged), and the primary key values here before
    of the deletes of rows that were here (``staged_rows``)."""

    codec: RowCodec
    names: list[str]
    rows: dict[str, tuple[str, bool, str, str, tuple]]
    deleted_keys: dict[str, tuple]

    def key(self, values: tuple) -> dict[str, Any]:
        return {name: self.codec.json_value(i, v) for i, (name, v) in enumerate(zip(self.names, values))}


class Watch:
    """One download batch watched: ``planned`` (the apply's hook once the batch is staged and classified, before
    anything is written) reads the staged rows' state and verdicts and the other rows' state; ``record`` (its hook in
    the batch's transaction after its writes) reads the rows whose fate the verdicts do not tell, keeps what changed
    in ``found`` and, ``keep``: writes it."""

    def __init__(self, device: Replica, articles: dict[int, TrackedArticle], names: dict[int, str], rows: Any,
                 session_id: str, seq: int, keep: bool):
        self.articles, self.names, self.session_id, self.seq, self.keep = articles, names, session_id, seq, keep
        self.guids = batch_guids(rows)
        self.staged: dict[int, Staged] = {}
        self.before = Rows({})
        self.found: list[RowChange] = []

    def planned(self, replica: Replica, work: list) -> None:
        """``work``: the batch's set-based steps (``merge.apply.classify.StagedWork``)."""
        for w in work:
            nick = int(w.art.nickname)
            if nick in self.staged or nick not in self.articles:
                continue
            staged = staged_rows(replica, self.articles[nick], w.staging)
            repeated = [g for g, k in Counter(self.guids.get(nick, [])).items() if k > 1]
            for g in repeated:                  # a row twice in the batch: read before and after
                staged.rows.pop(g, None)
            self.staged[nick] = staged
        rest = {nick: [g for g in guids if g not in self.staged[nick].rows] if nick in self.staged else guids
                for nick, guids in self.guids.items()}
        self.before = read(replica, self.articles, {n: g for n, g in rest.items() if g})

    def record(self, replica: Replica, outcome: Any) -> None:
        bulk: set[tuple[int, str]] = getattr(outcome, "bulk", set())
        told: list[tuple[int, str, RowChange]] = []
        again: dict[int, list[str]] = {}
        for nick, staged in self.staged.items():
            name = self.names.get(nick, str(nick))
            upserted, deleted = (nick, "upsert") in bulk, (nick, "delete") in bulk
            for g, (op, present, version, verdict, values) in staged.rows.items():
                if verdict == "skip":
                    continue
                if verdict == "apply" and (deleted if op == "delete" else upserted):
                    if op != "delete":
                        told.append((nick, g, RowChange(name, "updated" if present else "inserted", g,
                                                        staged.key(values))))
                    elif g in staged.deleted_keys:
                        told.append((nick, g, RowChange(name, "deleted", g, staged.key(staged.deleted_keys[g]))))
                    continue
                again.setdefault(nick, []).append(g)       # decided one at a time, or the bulk apply fell back
                if present:           # (an upsert's notice carries its key after; a delete's, the one before)
                    before = staged.deleted_keys.get(g) or values
                    self.before.seen.setdefault(nick, {})[g] = (staged.key(before), version)
        wanted = {nick: [g for g in guids if nick not in self.staged or g not in self.staged[nick].rows]
                  + again.get(nick, []) for nick, guids in self.guids.items()}
        after = read(replica, self.articles, {n: g for n, g in wanted.items() if g})
        order = {name: nick for nick, name in self.names.items()}
        rest = [(order.get(c.article, 0), c.rowguid, c) for c in changed(self.before, after, self.names)]
        self.found = [c for _, _, c in sorted(told + rest, key=lambda t: (t[0], t[1]))]
        if self.keep:
            write(replica, self.session_id, self.seq, self.found)


def staged_rows(device: Replica, art: TrackedArticle, staging: Any) -> Staged:
    """Article ``art``'s rows in ``staging`` (``merge.apply.staging.Staging``) after its classification: one read
    of its staging table, and one joined to the rows here of its deletes (their keys before the batch)."""
    d = device.dialect
    pk = list(art.info.primary_key)
    cols = [c for c in art.info.columns if c.name in pk]
    staged_cols = {c.name: f"c{i}" for i, c in enumerate(staging.columns(art))}
    codec = RowCodec([(c.name, c.type) for c in cols])
    rg = d.quote(art.rowguid_column)
    table = staging.rows_table(art.nickname)
    n = len(cols)
    rows = {str(r[0]).lower(): (r[1], bool(r[2]), str(r[3]), r[4], r[5:]) for r in device.query(
        "SELECT rowguid, op, present, clin, verdict, " + ", ".join(staged_cols[c.name] for c in cols) + f" FROM {table}")}
    deleted = {str(r[0]).lower(): r[1:1 + n] for r in device.query(
        "SELECT s.rowguid, " + ", ".join(f"t.{d.quote(c.name)}" for c in cols)
        + f" FROM {table} s JOIN {d.table_sql(art.table)} t ON t.{rg} = s.rowguid WHERE s.op = 'delete'")}
    return Staged(codec, [c.name for c in cols], rows, deleted)


def listening(device: Replica) -> bool:
    return store.table_set_version(device, DEVICE) is not None


def write(device: Replica, session_id: str, seq: int, changes: list[RowChange]) -> None:
    """What a batch changed, in its transaction (delivered after it commits)."""
    if changes:
        store.insert_row(device, NOTICES, {
            "session_id": session_id, "batch_seq": seq, "committed_at": store.utcnow(),
            "changes": [[c.article, c.operation, c.rowguid, c.key] for c in changes]})


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
