"""A web device's outbox: each of its local changes, and what the publisher decided of it.

A change not yet sent is read from the tracking metadata (the rows of the device's own generations after what
it uploaded: ``pending``). Before an upload request, the changes it carries are recorded in ``MSdevice_outbox``
as *sent*, with the row as sent (``sent``); the reply's fates (``fates.py``) are recorded in the transaction that
records the upload (``answered``): *applied*; *replaced* (a business logic handler at the publisher applied a
row of its own instead: a delete kept as a soft delete, values rewritten; the reason names it, the row comes back
with the download); *lost* a conflict (the winner, its row and lineage, the conflict's id at the publisher);
*failed* (sent again with every upload until it applies: the same entry, its tries counted); *refused*.
A reply that did not arrive (a cut connection, a kill) is asked for at the next sync
(``unanswered``, then ``answered`` or ``not_applied``), so every change has exactly one entry per upload that
carried it, with the fate the publisher decided.

Operation: a tombstone is a *delete*; a row the application inserted (noted by the flush of the triggers' log in
``MSdevice_inserts`` until the publisher answers its upload) an *insert*; anything else an *update*.

The conflict inbox is the *lost* entries the application has not settled: ``keep`` *theirs* (nothing to do:
the winner is, or will be, downloaded) or *mine*: the device's version written again over the winner once it
has arrived (the columns that conflicted, with column tracking; the whole row without), a new local change
that the next sync uploads. Entries leave the outbox when the application acknowledges them (``acknowledge``;
they stay, hidden, to tell an update from an insert) or when the publication's retention passes (``prune``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sparksync.dialects.replica import Replica, in_chunks
from sparksync.errors import ConfigurationError
from sparksync.merge.session.changes import RETRY_GENERATION
from sparksync.merge.session.remote.notices import read as read_rows
from sparksync.merge.tracking import identity
from sparksync.merge.tracking import lineage as lin
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import GenStatus
from sparksync.merge.tracking.pending import INSERTS, flush
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import PublicationRow, Role, SubscriptionRow
from sparksync.metadata.schema import DEVICE, WEB
from sparksync.rows import RowCodec

OUTBOX = "MSdevice_outbox"
State = Literal["pending", "applied", "replaced", "lost", "refused", "failed"]
Keep = Literal["mine", "theirs"]
_FINAL = {"won": "applied", "lost": "lost", "failed": "failed", "refused": "refused", "replaced": "replaced"}
SETTLED = ("applied", "replaced", "refused")      # answered for good: acknowledged in bulk, pruned after retention


@dataclass(frozen=True)
class OutboxChange:
    """One local change of the device and its fate. ``change_id``: its entry (None while it is not sent);
    ``state``: pending (not yet accepted by the publisher: not sent, or sent and not answered), applied, replaced
    (a handler at the publisher applied a row of its own instead: ``reason``), lost, refused or failed (sent again
    at every sync); ``key``: the row's primary key, where known; ``winner``:
    the winning row of a lost conflict (None: the winner deleted it); ``mine``: the row as the device sent it,
    while it is not applied (its key stays known after, from the row as sent, when the row is gone from here)."""

    change_id: int | None
    article: str
    rowguid: str
    operation: Literal["insert", "update", "delete"]
    state: State
    generation: int | None
    key: dict[str, Any] | None = None
    sent: bool = False
    tries: int = 0
    reason: str | None = None
    conflict_id: str | None = None
    winner_replica: str | None = None
    winner: dict[str, Any] | None = None
    columns: list[str] = field(default_factory=list)
    mine: dict[str, Any] | None = None
    resolution: Keep | None = None
    sent_at: str | None = None
    answered_at: str | None = None

    def as_json(self) -> dict[str, Any]:
        return dict(vars(self))


# -- the table ------------------------------------------------------------------------------------
def install(device: Replica) -> None:
    """The outbox's tables in a web device's file (bound to its subscription: ``MSweb_device``), once."""
    if store.table_set_version(device, WEB) is not None and store.table_set_version(device, DEVICE) != DEVICE.version:
        with device.transaction():
            store.install_table_set(device, DEVICE)
        device.notes_inserts = None          # the flush notes inserts from now on


def _has(device: Replica) -> bool:
    return store.table_set_version(device, DEVICE) is not None


@dataclass(frozen=True)
class _Articles:
    by_nick: dict[int, TrackedArticle]
    names: dict[int, str]

    @property
    def nicks(self) -> dict[str, int]:
        return {n: k for k, n in self.names.items()}


def _articles(device: Replica, pubid: str) -> _Articles:
    rows = published_articles(device, pubid)
    return _Articles({a.nickname: tracked_article(a) for a in rows}, {a.nickname: a.name for a in rows})


# -- an upload --------------------------------------------------------------------------------------
def sent(device: Replica, rows: Any, lo: int, hi: int) -> None:
    """The changes of one upload request (``rows``: its change rows, an Arrow table) recorded as sent, before the
    request goes: a change sent again (failed before) is its own entry again; a new one gets an entry."""
    if not _has(device) or rows is None or not rows.num_rows:
        return
    cols = rows.select(["tablenick", "rowguid", "generation", "op", "lineage", "row"]).to_pydict()
    now = store.utcnow()
    with device.transaction():
        keys = {(int(n), str(g).lower()) for n, g in zip(cols["tablenick"], cols["rowguid"])}
        known, inserted = _entries(device, keys), _inserted(device, keys)
        fresh, again = [], []
        for at, (nick, guid, gen, op, row) in enumerate(zip(cols["tablenick"], cols["rowguid"], cols["generation"],
                                                            cols["op"], cols["row"])):
            key = (int(nick), str(guid).lower())
            entries = known.get(key, [])
            open_ = next((e for e in entries if e["state"] in ("sent", "failed")), None)
            if open_ is not None:
                generation = open_["generation"] if gen == RETRY_GENERATION else int(gen)
                again.append(("sent", lo, hi, at, generation, row, open_["change_id"]))
                continue
            operation = "delete" if op == "delete" else "insert" if key in inserted else "update"
            fresh.append((key[0], key[1], operation, int(gen), lo, hi, at, "sent", 0, row, now))
            known.setdefault(key, []).append({"state": "sent", "generation": int(gen), "change_id": None})
        if again:
            device.executemany(f"UPDATE {device.meta(OUTBOX)} SET state = {device.p}, lo = {device.p}, hi = {device.p}, "
                               f"position = {device.p}, generation = {device.p}, mine = {device.p} WHERE change_id = "
                               f"{device.p}", again)
        if fresh:
            store.insert_rows(device, OUTBOX, ("tablenick", "rowguid", "operation", "generation", "lo", "hi", "position",
                                               "state", "tries", "mine", "sent_at"), fresh)


def _of_rows(device: Replica, table: str, columns: str, keys: set[tuple[int, str]]) -> list[tuple]:
    """``columns`` of ``table``'s rows (tablenick, rowguid first) for these [article nickname, rowguid] keys."""
    by_nick: dict[int, list[str]] = {}
    for n, g in keys:
        by_nick.setdefault(n, []).append(g)
    d, out = device.dialect, []
    for nick, guids in by_nick.items():
        for chunk in in_chunks(guids):
            out += device.query(f"SELECT tablenick, rowguid, {columns} FROM {device.meta(table)} WHERE tablenick = "
                                f"{int(nick)} AND rowguid IN ({', '.join([d.uuid_param()] * len(chunk))})", chunk)
    return out


def _inserted(device: Replica, keys: set[tuple[int, str]]) -> set[tuple[int, str]]:
    """Of these rows, the ones the application inserted and whose insert is not answered yet."""
    return {(int(n), str(g).lower()) for n, g, _ in _of_rows(device, INSERTS, "1", keys)}


def _entries(device: Replica, keys: set[tuple[int, str]]) -> dict[tuple[int, str], list[dict]]:
    """The outbox's entries of these rows, by row."""
    out: dict[tuple[int, str], list[dict]] = {}
    for nick, guid, cid, state, gen in _of_rows(device, OUTBOX, "change_id, state, generation", keys):
        out.setdefault((int(nick), str(guid).lower()), []).append(
            {"change_id": int(cid), "state": state, "generation": int(gen)})
    return out


def answered(device: Replica, pubid: str, lo: int, hi: int, conflicts: list[Any],
             refused_at: Sequence[tuple[int, str]] = ()) -> None:
    """The publisher's reply to the upload (lo, hi]: its ``conflicts`` (``UploadConflictReply``: every change it
    did not simply apply, with its fate) and ``refused_at`` ([position in the upload, reason]: changes to rows
    outside the partition) recorded, every other change of the upload applied. In the caller's transaction (the
    one recording the upload)."""
    if not _has(device):
        return
    p, t, now = device.p, device.meta(OUTBOX), store.utcnow()
    for at, reason in refused_at:
        device.execute(f"UPDATE {t} SET state = 'refused', reason = {p}, answered_at = {p} WHERE lo = {p} "
                       f"AND hi = {p} AND state = 'sent' AND position = {p}", [reason, now, lo, hi, int(at)])
    nicks = _articles(device, pubid).nicks
    for c in conflicts:
        nick = nicks.get(c.article)
        if nick is None:
            continue
        state = _FINAL.get(c.fate or "", "lost" if c.type < 5 else "failed")
        where = (f"WHERE lo = {p} AND hi = {p} AND state = 'sent' AND tablenick = {p} AND rowguid = "
                 f"{device.dialect.uuid_param()}")
        params = [lo, hi, nick, str(c.rowguid).lower()]
        if state == "failed":
            tries = str(int(c.attempts)) if c.attempts else "tries + 1"
            device.execute(f"UPDATE {t} SET state = 'failed', tries = {tries}, reason = {p}, answered_at = {p} {where}",
                           [c.reason, now, *params])
            continue
        device.execute(
            f"UPDATE {t} SET state = {p}, reason = {p}, conflict_id = {p}, winner = {p}, winner_row = {p}, "
            f"winner_lineage = {p}, columns = {p}, answered_at = {p} "
            f"{where}", [state, c.reason, c.conflict_id, c.winner or None, c.winner_row, c.winner_lineage,
                         device.dialect.json_param(list(c.columns)) if c.columns else None, now, *params])
    # the row as sent is kept (its key, once the row is gone from here), shown while the change is not applied
    device.execute(f"UPDATE {t} SET state = 'applied', answered_at = {p} WHERE lo = {p} AND hi = {p} AND "
                   "state = 'sent'", [now, lo, hi])
    # an insert answered (but failed: sent again as an insert) is the publisher's row: a change to it is an update
    device.execute(f"DELETE FROM {device.meta(INSERTS)} WHERE EXISTS (SELECT 1 FROM {t} o WHERE o.lo = {p} AND o.hi = "
                   f"{p} AND o.state <> 'failed' AND o.tablenick = {device.meta(INSERTS)}.tablenick AND o.rowguid = "
                   f"{device.meta(INSERTS)}.rowguid)", [lo, hi])


def unanswered(device: Replica) -> list[tuple[int, int]]:
    """The uploads (lo, hi] sent whose reply was not recorded (the connection was cut, the device stopped)."""
    if not _has(device):
        return []
    return [(int(lo), int(hi)) for lo, hi in device.query(
        f"SELECT DISTINCT lo, hi FROM {device.meta(OUTBOX)} WHERE state = 'sent' ORDER BY lo, hi")]


def not_applied(device: Replica, lo: int, hi: int) -> None:
    """The publisher applied no upload (lo, hi]: its changes are pending again (a change that failed before is
    failed, waiting to be sent again)."""
    p, t = device.p, device.meta(OUTBOX)
    with device.transaction():
        device.execute(f"UPDATE {t} SET state = 'failed' WHERE lo = {p} AND hi = {p} AND state = 'sent' AND tries > 0",
                       [lo, hi])
        device.execute(f"DELETE FROM {t} WHERE lo = {p} AND hi = {p} AND state = 'sent'", [lo, hi])


# -- reading it -------------------------------------------------------------------------------------
def listing(device: Replica, pubid: str, publisher_nickname: int, *, pending_only: bool = False) -> list[OutboxChange]:
    """Every local change the application has not acknowledged, oldest first: the ones not yet sent (read from
    the tracking metadata, after a flush of the triggers' log), then the outbox's entries (``pending_only``: only
    the changes the publisher has not accepted yet)."""
    if store.metadata_version(device) is None:
        return []
    flush(device)
    arts = _articles(device, pubid)
    entries = _rows(device, "acknowledged_at IS NULL" + (" AND state = 'sent'" if pending_only else ""))
    in_flight = {(e["tablenick"], e["rowguid"], e["generation"]) for e in entries if e["state"] == "sent"}
    out = _unsent(device, pubid, publisher_nickname, arts, in_flight)
    out += [_change(e, arts) for e in entries]
    return _with_keys(device, arts, out)


def _rows(device: Replica, where: str, params: list | None = None) -> list[dict]:
    cols = ("change_id", "tablenick", "rowguid", "operation", "generation", "state", "reason", "tries", "conflict_id",
            "winner", "winner_row", "winner_lineage", "columns", "mine", "resolution", "sent_at", "answered_at")
    rows = device.query(f"SELECT {', '.join(cols)} FROM {device.meta(OUTBOX)} WHERE {where} ORDER BY change_id",
                        params or []) if _has(device) else []
    out = []
    for r in rows:
        e = dict(zip(cols, r))
        e["rowguid"], e["tablenick"], e["generation"] = str(e["rowguid"]).lower(), int(e["tablenick"]), int(e["generation"])
        e["columns"] = json.loads(e["columns"]) if isinstance(e["columns"], str) else (e["columns"] or [])
        out.append(e)
    return out


def _change(e: dict, arts: _Articles) -> OutboxChange:
    """An entry as the application sees it: its key, until the row here says it (``_with_keys``), the row's as
    sent (so a row since gone from the device, moved out of its partition by a handler say, keeps its key)."""
    state: State = "pending" if e["state"] == "sent" else e["state"]
    mine = json.loads(e["mine"]) if e["mine"] else None
    art = arts.by_nick.get(e["tablenick"])
    return OutboxChange(
        change_id=e["change_id"], article=arts.names.get(e["tablenick"], str(e["tablenick"])), rowguid=e["rowguid"],
        operation=e["operation"], state=state, generation=e["generation"], sent=True, tries=int(e["tries"] or 0),
        reason=e["reason"], conflict_id=e["conflict_id"], winner_replica=e["winner"],
        winner=json.loads(e["winner_row"]) if e["winner_row"] else None, columns=list(e["columns"]),
        key={k: mine.get(k) for k in art.info.primary_key} if mine and art is not None else None,
        mine=None if state == "applied" else mine, resolution=e["resolution"],
        sent_at=_iso(e["sent_at"]), answered_at=_iso(e["answered_at"]))


def _iso(v: Any) -> str | None:
    return None if v is None else v if isinstance(v, str) else v.isoformat()


def own_generations(device: Replica, after: int, publisher_nickname: int) -> set[int]:
    """The device's generations after ``after`` that hold its own changes: open, or closed here (not received
    from the publisher), as an upload enumerates them."""
    gh = device.meta("MSmerge_genhistory")
    out = set()
    for g, status, nicknames in device.query(f"SELECT generation, genstatus, nicknames FROM {gh} WHERE generation > "
                                             f"{device.p}", [after]):
        known = json.loads(nicknames) if isinstance(nicknames, str) else (nicknames or [])
        if int(status) == GenStatus.OPEN or int(publisher_nickname) not in [int(n) for n in known]:
            out.add(int(g))
    return out


def _unsent(device: Replica, pubid: str, publisher_nickname: int, arts: _Articles,
            in_flight: set[tuple[int, str, int]]) -> list[OutboxChange]:
    """The device's changes not sent yet: its rows in its own generations after what it uploaded."""
    mine = store.select_one(device, SubscriptionRow, {"pubid": pubid, "role": Role.PUBLISHER})
    if mine is None:
        return []
    sentgen = int(mine.sentgen or 0)
    gens = own_generations(device, sentgen, publisher_nickname)
    if not gens:
        return []
    rows = []
    for table, deleted in (("MSmerge_contents", False), ("MSmerge_tombstone", True)):
        extra = " AND type = 1" if deleted else ""
        for nick, guid, gen in device.query(
                f"SELECT tablenick, rowguid, generation FROM {device.meta(table)} WHERE generation > {device.p}{extra}",
                [sentgen]):
            if int(gen) in gens and int(nick) in arts.names and (int(nick), str(guid).lower(), int(gen)) not in in_flight:
                rows.append((int(gen), int(nick), str(guid).lower(), deleted))
    rows.sort()
    inserted = _inserted(device, {(n, g) for _, n, g, _ in rows})
    return [OutboxChange(None, arts.names[n], g, "delete" if deleted else "insert" if (n, g) in inserted else "update",
                         "pending", gen) for gen, n, g, deleted in rows]


def _with_keys(device: Replica, arts: _Articles, changes: list[OutboxChange]) -> list[OutboxChange]:
    """Each change with its row's primary key: from the row here (``notices.read``), else from the row as sent."""
    import dataclasses

    wanted: dict[int, list[str]] = {}
    for c in changes:
        if c.article in arts.nicks:
            wanted.setdefault(arts.nicks[c.article], []).append(c.rowguid)
    here = read_rows(device, arts.by_nick, wanted).seen
    out = []
    for c in changes:
        at = arts.nicks.get(c.article)
        found = here.get(at, {}).get(c.rowguid) if at is not None else None
        key = found[0] if found else c.key
        if key is None and c.mine and at is not None:
            key = {k: c.mine.get(k) for k in arts.by_nick[at].info.primary_key}
        out.append(dataclasses.replace(c, key=key))
    return out


# -- the application's answers ------------------------------------------------------------------------
def acknowledge(device: Replica, change_ids: list[int] | None = None) -> int:
    """Entries the application has seen leave the outbox (``change_ids``; None: every applied, replaced or refused
    one).
    A change the publisher has not answered, one that failed and a lost conflict not settled (``keep``) stay.
    Returns how many left."""
    if not _has(device):
        return 0
    t, p = device.meta(OUTBOX), device.p
    states = ", ".join(f"'{s}'" for s in SETTLED)
    settled = f"(state IN ({states}) OR (state = 'lost' AND resolution IS NOT NULL))"
    with device.transaction():
        if change_ids is None:
            cur = device.execute(f"UPDATE {t} SET acknowledged_at = {p} WHERE acknowledged_at IS NULL AND "
                                 f"state IN ({states})", [store.utcnow()])
            return int(cur.rowcount or 0)
        n = 0
        for cid in change_ids:
            cur = device.execute(f"UPDATE {t} SET acknowledged_at = {p} WHERE change_id = {p} AND acknowledged_at IS NULL "
                                 f"AND {settled}", [store.utcnow(), int(cid)])
            n += int(cur.rowcount or 0)
        return n


def prune(device: Replica, pubid: str) -> int:
    """Answered entries older than publication ``pubid``'s retention (as the device's file has it) removed: the
    publisher has forgotten the conflicts and the metadata they name."""
    pub = store.select_one(device, PublicationRow, {"pubid": pubid}) if _has(device) else None
    if pub is None or not pub.retention or pub.retention <= 0:
        return 0
    import datetime as dt

    before = store.utcnow() - dt.timedelta(days=float(pub.retention))
    with device.transaction():
        states = ", ".join(f"'{s}'" for s in (*SETTLED, "lost"))
        cur = device.execute(f"DELETE FROM {device.meta(OUTBOX)} WHERE state IN ({states}) AND "
                             f"answered_at < {device.p}", [before])
        return int(cur.rowcount or 0)


def inbox(device: Replica, pubid: str) -> list[OutboxChange]:
    """The conflicts the device's changes lost that the application has not settled, oldest first."""
    flush(device)                           # the rows' keys are read with their versions (``notices.read``)
    arts = _articles(device, pubid) if _has(device) else _Articles({}, {})
    found = [_change(e, arts) for e in _rows(device, "state = 'lost' AND resolution IS NULL AND acknowledged_at IS NULL")]
    return _with_keys(device, arts, found)


def keep(device: Replica, pubid: str, change_id: int, which: Keep) -> OutboxChange:
    """Settle a lost conflict (``inbox``): *theirs* keeps the winner; *mine* writes the device's version again
    over it, as a new local change the next sync uploads: the columns that conflicted (column tracking), or
    the row (a winner that deleted the row: the row again; a lost delete: the delete again). Refused
    (``ConfigurationError``) when the winning version has not been downloaded yet: sync first."""
    if which not in ("mine", "theirs"):
        raise ConfigurationError(f"keep {which!r}: mine or theirs", obj=str(change_id))
    arts = _articles(device, pubid)
    flush(device)                    # the rows' lineage is read (the winner's arrival, the entry's key)
    with device.transaction():
        found = _rows(device, f"change_id = {device.p}", [int(change_id)])
        if not found or found[0]["state"] != "lost":
            raise ConfigurationError(f"change {change_id} is not a lost conflict of this device's outbox "
                                     "(sparksync conflicts --database lists them)", obj=str(change_id))
        e = found[0]
        if e["resolution"] is not None:
            raise ConfigurationError(f"change {change_id}: already settled ({e['resolution']})", obj=str(change_id))
        if which == "mine":
            _write_mine(device, arts.by_nick[e["tablenick"]], e)
        device.execute(f"UPDATE {device.meta(OUTBOX)} SET resolution = {device.p} WHERE change_id = {device.p}",
                       [which, int(change_id)])
    return _with_keys(device, arts, [_change({**e, "resolution": which}, arts)])[0]


def _write_mine(device: Replica, art: TrackedArticle, e: dict) -> None:
    """The device's version of a lost change written again over the winner (in the caller's transaction)."""
    d = device.dialect
    rg = d.quote(art.rowguid_column)
    guid = e["rowguid"]
    flush(device)
    key = {(int(art.nickname), guid)}
    here = _of_rows(device, "MSmerge_contents", "lineage", key) or _of_rows(device, "MSmerge_tombstone", "lineage", key)
    winner = lin.parse(e["winner_lineage"]) if e["winner_lineage"] else {}
    local = lin.parse(here[0][2]) if here else {}
    if any(local.get(n, 0) < v for n, v in winner.items()):
        raise ConfigurationError(f"change {e['change_id']}: the winning version has not been downloaded yet; sync, "
                                 "then keep yours", obj=str(e["change_id"]))
    table, this_row = d.table_sql(art.table), identity.rows_of(d, art, d.uuid_param())
    if e["operation"] == "delete":
        device.execute(f"DELETE FROM {table} WHERE {this_row}", [guid])
        return
    codec = RowCodec([(c.name, c.type) for c in art.info.columns])
    mine = codec.decode(e["mine"]) if e["mine"] else None
    if mine is None:
        raise ConfigurationError(f"change {e['change_id']}: the device's version was not kept", obj=str(e["change_id"]))
    convs = dict(zip([c.name for c in art.info.columns], d.db_converters([c.type for c in art.info.columns])))

    def param(c: str) -> Any:
        v, conv = mine.get(c), convs.get(c)
        return v if v is None or conv is None else conv(v)

    exists = device.query_one(f"SELECT 1 FROM {identity.guids_sql(d, art)} WHERE {rg} = {d.uuid_param()}", [guid])
    if exists is None:                   # the winner deleted it: the row again, under its rowguid
        names = [c.name for c in (art.table_info.columns)]
        device.execute(f"INSERT INTO {table} ({', '.join(d.quote(c) for c in names)}) VALUES "
                       f"({', '.join([device.p] * len(names))})", [param(c) for c in names])
        if art.keyed:                    # its rowguid kept, and its tombstone's lineage bumped by the flush
            identity.insert_ids(device, art, "VALUES (" + ", ".join([device.p] * len(art.info.primary_key))
                                + f", {d.uuid_param()})", [param(k) for k in art.info.primary_key] + [guid])
            flush(device)
            device.execute(f"DELETE FROM {device.meta('MSmerge_tombstone')} WHERE tablenick = {int(art.nickname)} "
                           f"AND rowguid = {d.uuid_param()}", [guid])
        return
    fixed = set(art.info.primary_key) | {art.rowguid_column}
    cols = [c for c in (e["columns"] if art.column_tracking and e["columns"] else [c.name for c in art.info.columns])
            if c not in fixed]
    if cols:
        device.execute(f"UPDATE {table} SET {', '.join(f'{d.quote(c)} = {device.p}' for c in cols)} WHERE "
                       f"{this_row}", [*[param(c) for c in cols], guid])
