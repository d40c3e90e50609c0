"""What a download changed at a web device, for the application's callbacks (a screen refreshes from it, never by
polling its tables).

Each download batch's rows are read before it applies and again inside its transaction, after its writes
(``before`` then ``after``): a row that appeared was *inserted*, one that went was *deleted* (a delete at the
publisher, or a row that left the device's partition), one whose version changed was *updated*. What the batch
changed is written in its transaction (``MSdevice_notices``, when the application listens) and given to the
callbacks once it has committed (``deliver``), then removed: a crash between the commit and the callbacks
delivers it at the next sync (at least once, never lost).
"""

from __future__ import annotations

import json
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


class Watch:
    """One download batch watched: its rows read before it applies; ``record`` (the apply's hook, in the batch's
    transaction after its writes) reads them again, keeps what changed in ``found`` and, ``keep``: writes it."""

    def __init__(self, device: Replica, articles: dict[int, TrackedArticle], names: dict[int, str], rows: Any,
                 session_id: str, seq: int, keep: bool):
        self.articles, self.names, self.session_id, self.seq, self.keep = articles, names, session_id, seq, keep
        self.guids = batch_guids(rows)
        self.before = read(device, articles, self.guids)
        self.found: list[RowChange] = []

    def record(self, replica: Replica, _outcome: Any) -> None:
        self.found = changed(self.before, read(replica, self.articles, self.guids), self.names)
        if self.keep:
            write(replica, self.session_id, self.seq, self.found)


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
