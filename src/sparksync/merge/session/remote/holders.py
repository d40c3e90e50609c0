"""Which device file holds each web subscription, at the publisher (the device's side: ``identity.py``).

A device file makes an identity of its own the first time it is synced and sends it with every request, with its
*epoch*: the key of its latest sync the door accepted. At each sync's ``hello`` the file proposes the next key
(kept in the file before it is sent) and the door records it (``MSweb_holders``); every later request of the
sync carries it. So:

* a subscription is held by the file that initialized it (``begin``, then ``activate``); a second file — a typo'd
  path, a second till given the same token, a new file whose first sync was cut — never changes that: its
  ``initialize`` is refused unless it takes the subscription over on purpose (``sparksync sync --reinitialize``,
  ``Presented.take_over``);
* a copy of the holding file made before one of its later syncs (a cloned till image, a file restored from a
  backup) presents an older epoch and is refused at its first request, changing nothing (``at_hello``); a
  restored file whose original is gone takes the subscription with ``sparksync sync --recover``;
* two syncs of one subscription never change anything at the door at once: a request whose epoch is no longer
  the holder's (a newer sync began) is refused (``require``).

Each refused file is recorded (``MSweb_strays``): ``status`` lists it and names it a problem.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass
from typing import Any

from sparksync.dialects.replica import Replica
from sparksync.errors import OtherFile, ProtocolError
from sparksync.metadata import store
from sparksync.progress import Reporter, silent

HOLDERS, STRAYS = "MSweb_holders", "MSweb_strays"
TAKE_OVER = ("reinitialize", "recover")     # how a file takes a subscription over on purpose


@dataclass(frozen=True)
class Presented:
    """What a request says of the file it comes from (its ``Sparksync-File*`` headers, ``identity.headers``)."""

    file_id: str
    epoch: str | None = None           # None: the file holds no subscription yet (new), or was bound before identities
    next_epoch: str | None = None      # hello: the key this sync proposes
    described: str | None = None       # where the file says it lives (host:path), for the operator
    unsent: int | None = None          # the changes it holds that the publisher has not acknowledged, as it counts
    bound: bool = False                # it holds this subscription's data (bound before identities existed too)
    take_over: str | None = None       # "reinitialize" or "recover": it takes the subscription on purpose

    @classmethod
    def of_headers(cls, headers: Any) -> Presented:
        """The request's headers read, each checked (a 400 naming the header otherwise)."""
        def key(name: str, required: bool = False) -> str | None:
            value = headers.get(name)
            if value is None:
                if required:
                    raise ProtocolError(f"the request does not say which device file it comes from ({name}): "
                                        "upgrade sparksync on the device", obj=name)
                return None
            try:
                return str(uuid.UUID(value))
            except ValueError:
                raise ProtocolError(f"{name}: not a file identity", obj=name) from None

        unsent = headers.get("Sparksync-Unsent")
        if unsent is not None and not (unsent.isascii() and unsent.isdigit() and len(unsent) <= 12):
            raise ProtocolError("Sparksync-Unsent: not a count", obj="Sparksync-Unsent")
        take = headers.get("Sparksync-Take-Over")
        if take is not None and take not in TAKE_OVER:
            raise ProtocolError(f"Sparksync-Take-Over: one of {', '.join(TAKE_OVER)}", obj="Sparksync-Take-Over")
        where = headers.get("Sparksync-File-Where")
        return cls(str(key("Sparksync-File", True)), key("Sparksync-Epoch"), key("Sparksync-Next-Epoch"),
                   _printable(where) if where else None, int(unsent) if unsent is not None else None,
                   headers.get("Sparksync-Bound") == "1", take)


def _printable(text: str) -> str:
    return re.sub(r"[^\x20-\x7e]", "?", text)[:300]


@dataclass(frozen=True)
class Holder:
    file_id: str
    epoch: str | None
    described: str | None
    held_since: Any
    seen_at: Any


def holder(pub: Replica, subscription: str, lock: bool = False) -> Holder | None:
    """The file that holds ``subscription`` (None: no file yet); ``lock``: its row locked until the transaction ends."""
    t = pub.meta(HOLDERS)
    row = pub.query_one(f"SELECT file_id, epoch, described, held_since, seen_at FROM {t} WHERE subscription = {pub.p}"
                        + (pub.dialect.row_lock_clause() if lock else ""), [subscription])
    return Holder(*row) if row else None


def at_hello(pub: Replica, subscription: str, active: bool, f: Presented, report: Reporter = silent) -> str:
    """The file's standing at a sync's ``hello``, in the caller's transaction: ``holder`` (its proposed epoch
    recorded), ``other`` (another file holds the subscription; this one is new: it may take it over only on
    purpose), ``free`` (no file holds it active: this one may initialize it, or tell the door again that it did),
    ``copy`` (an older copy of the holder that asked to ``recover``). A file that held the subscription's data and
    is not its holder is refused here (``OtherFile``), recorded as a stray."""
    now = store.utcnow()
    if active and f.epoch and f.next_epoch:      # the usual sync of the holder: one statement, its epoch moved on
        t = pub.meta(HOLDERS)
        moved = pub.execute(f"UPDATE {t} SET epoch = {pub.p}, seen_at = {pub.p} WHERE subscription = {pub.p} AND "
                            f"file_id = {pub.p} AND epoch IN ({pub.p}, {pub.p})",
                            [f.next_epoch, now, subscription, f.file_id, f.epoch, f.next_epoch]).rowcount
        if moved == 1:
            return "holder"
    h = holder(pub, subscription, lock=True)
    if h is None:
        if active and f.bound and f.next_epoch:      # bound before identities existed: it holds the subscription
            store.insert_row(pub, HOLDERS, {"subscription": subscription, "file_id": f.file_id, "epoch": f.next_epoch,
                                            "described": f.described, "held_since": now, "seen_at": now})
            report(f"{subscription}: file {f.file_id} ({f.described or 'no place said'}) holds it from now on")
            return "holder"
        return "free"
    if h.epoch is None or not active:
        return "free"                # no file holds it active: this one may initialize it (or tell its end again)
    if h.file_id != f.file_id:
        if f.bound or f.epoch is not None:
            raise _refused(pub, subscription, f, h, "another file holds this subscription")
        if f.take_over is None:
            raise _refused(pub, subscription, f, h, "a new file, while another file holds this subscription")
        return "other"
    if h.epoch in (f.epoch, f.next_epoch):
        if f.next_epoch:
            store.update_rows(pub, HOLDERS, {"epoch": f.next_epoch, "seen_at": now}, {"subscription": subscription})
        return "holder"
    if f.take_over == "recover":
        return "copy"
    raise _refused(pub, subscription, f, h, "a copy of this subscription's file made before its later syncs")


def require(pub: Replica, subscription: str, f: Presented) -> None:
    """A request of a sync comes from the file that holds ``subscription``, at its current epoch (or while the
    file initializes it); else ``OtherFile`` (nothing is changed)."""
    check(holder(pub, subscription), subscription, f)


def check(h: Holder | None, subscription: str, f: Presented) -> None:
    """``require`` of a holder read already (``h``: the door reads it with the token, ``tokens.authenticate_holding``)."""
    if h is None or h.file_id != f.file_id:
        raise OtherFile(f"{subscription}: this request comes from a file that does not hold the subscription "
                        f"({_holder_text(h)}); nothing was changed", obj=subscription)
    if h.epoch is not None and h.epoch != f.epoch:
        raise OtherFile(f"{subscription}: another sync of this subscription began at the door since this one did "
                        f"({h.seen_at}); this one stops, nothing of it was changed after that", obj=subscription)


def begin(pub: Replica, subscription: str, active: bool, f: Presented, report: Reporter = silent) -> None:
    """The file ``f`` starts initializing ``subscription`` (in the caller's transaction): it becomes its holder,
    its initialization under way. Refused (``OtherFile``) while another file holds the subscription active, unless
    ``f`` takes it over on purpose (that file is then recorded as replaced)."""
    h = holder(pub, subscription, lock=True)
    now = store.utcnow()
    if h is not None and h.file_id != f.file_id and active:
        if f.take_over is None:
            raise _refused(pub, subscription, f, h, "a new file, while another file holds this subscription")
        report(f"{subscription}: file {f.file_id} takes it over from file {h.file_id} ({h.described or 'no place said'})")
    if h is None:
        store.insert_row(pub, HOLDERS, {"subscription": subscription, "file_id": f.file_id, "epoch": None,
                                        "described": f.described, "held_since": now, "seen_at": now})
    elif h.file_id != f.file_id or h.epoch is not None:
        store.update_rows(pub, HOLDERS, {"file_id": f.file_id, "epoch": None, "described": f.described,
                                         "held_since": now, "seen_at": now}, {"subscription": subscription})
    store.delete_rows(pub, STRAYS, {"subscription": subscription, "file_id": f.file_id})


def activate(pub: Replica, subscription: str, f: Presented) -> None:
    """The holder initialized its file: the epoch it proposed with ``initialized`` is its epoch."""
    if not f.next_epoch:
        raise ProtocolError(f"{subscription}: initialized without the file's next epoch (Sparksync-Next-Epoch)",
                            obj="Sparksync-Next-Epoch")
    h = holder(pub, subscription, lock=True)
    if h is None or h.file_id != f.file_id:
        raise OtherFile(f"{subscription}: this file did not start the subscription's initialization "
                        f"({_holder_text(h)}); nothing was changed", obj=subscription)
    if h.epoch not in (None, f.next_epoch):
        raise OtherFile(f"{subscription}: this file's initialization was superseded ({_holder_text(h)})", obj=subscription)
    store.update_rows(pub, HOLDERS, {"epoch": f.next_epoch, "seen_at": store.utcnow()}, {"subscription": subscription})


def take_over(pub: Replica, subscription: str, f: Presented, report: Reporter = silent) -> None:
    """A copy of the holder's file recovered on purpose (``sparksync sync --recover``) holds the subscription from
    now on, at the epoch it proposed; the file it replaces is recorded as a stray."""
    h = holder(pub, subscription, lock=True)
    if h is None or h.file_id != f.file_id or not f.next_epoch:
        raise OtherFile(f"{subscription}: only a copy of the file that holds the subscription can recover it "
                        f"({_holder_text(h)})", obj=subscription)
    if h.epoch not in (f.epoch, f.next_epoch):
        report(f"{subscription}: a copy of file {f.file_id} recovers it; the copy that synced last is refused from now on")
    store.update_rows(pub, HOLDERS, {"epoch": f.next_epoch, "described": f.described, "seen_at": store.utcnow()},
                      {"subscription": subscription})


def _refused(pub: Replica, subscription: str, f: Presented, h: Holder, reason: str) -> OtherFile:
    """The refusal of file ``f``: the caller's transaction is rolled back, then the door records the stray
    (``record``, from ``OtherFile.stray``)."""
    if f.bound or f.epoch is not None:
        way = ("if the file that holds it is gone (this one was restored from a backup), take the subscription "
               "with 'sparksync sync --recover'; if it is a second device (a cloned till), give it a subscription "
               "of its own")
    else:
        way = ("if that file is lost and this one replaces it, take the subscription over with 'sparksync sync "
               "--reinitialize'; otherwise check --database")
    unsent = f" It holds {f.unsent} change(s) the publisher has not received; they stay in it." if f.unsent else ""
    e = OtherFile(f"{subscription}: this file ({f.described or f.file_id}) does not hold the subscription: "
                  f"{reason} ({_holder_text(h)}). Nothing was changed.{unsent} Way out: {way}", obj=subscription)
    e.stray = (subscription, f.file_id, f.described, f.unsent, reason)
    return e


def record(pub: Replica, refusal: OtherFile) -> None:
    """A refused file recorded as a stray of its subscription, in a transaction of its own."""
    if refusal.stray is not None:
        with pub.transaction():
            _stray(pub, *refusal.stray)


def _holder_text(h: Holder | None) -> str:
    if h is None:
        return "no file holds it yet"
    where = f", {h.described}" if h.described else ""
    return f"held by file {h.file_id}{where} since {_when(h.held_since)}, its last sync began {_when(h.seen_at)}"


def _when(value: Any) -> str:
    return value.isoformat(timespec="seconds") if isinstance(value, dt.datetime) else str(value)


def _stray(pub: Replica, subscription: str, file_id: str, described: str | None, unsent: int | None,
           reason: str) -> None:
    now = store.utcnow()
    t = pub.meta(STRAYS)
    found = pub.query_one(f"SELECT attempts FROM {t} WHERE subscription = {pub.p} AND file_id = {pub.p}",
                          [subscription, file_id])
    if found:
        store.update_rows(pub, STRAYS, {"reason": reason, "last_seen": now, "attempts": int(found[0]) + 1,
                                        **({"unsent": unsent} if unsent is not None else {}),
                                        **({"described": described} if described else {})},
                          {"subscription": subscription, "file_id": file_id})
    else:
        store.insert_row(pub, STRAYS, {"subscription": subscription, "file_id": file_id, "reason": reason,
                                       "described": described, "unsent": unsent, "first_seen": now, "last_seen": now,
                                       "attempts": 1})


def strays(pub: Replica, subscription: str | None = None) -> list[dict[str, Any]]:
    """The files refused as ``subscription``'s (None: as any subscription's), newest first (``status``)."""
    if not pub.dialect.metadata_table_exists(pub, STRAYS):
        return []
    rows = store.select_rows(pub, STRAYS, {"subscription": subscription} if subscription is not None else None)
    return sorted(rows, key=lambda r: str(r["last_seen"]), reverse=True)


def forget(pub: Replica, subscription: str) -> list[dict[str, Any]]:
    """The files refused as ``subscription``'s forgotten (the operator dealt with them: the copy wiped, or given a
    subscription of its own): ``status`` stops naming them. Returns what was recorded of them. A forgotten file
    that syncs again is refused again, and recorded again."""
    if not pub.dialect.metadata_table_exists(pub, STRAYS):
        return []
    with pub.transaction():
        found = strays(pub, subscription)
        store.delete_rows(pub, STRAYS, {"subscription": subscription})
    return found
