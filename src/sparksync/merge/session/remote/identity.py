"""A device file's own identity (the publisher's side: ``holders.py``), without HTTP.

The first time a file is synced it makes an identity for itself (``MSweb_file``), kept with its data: a copy of
the file carries it too, so the file's *epoch* tells copies apart. At each sync the file proposes the next epoch,
keeps the proposal before it is sent (``propose``), and takes it as its epoch once the door accepted it
(``accepted``): a copy made before one of the file's later syncs still has an older epoch and is refused at its
first request. A kill between the two steps leaves the proposal in the file, which the door accepts as well.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace

from sparksync.dialects.replica import Replica
from sparksync.merge.session.backlog import count_after
from sparksync.merge.tracking.articles import published_articles
from sparksync.metadata import store
from sparksync.metadata.records import Role, SubscriptionRow
from sparksync.metadata.schema import WEB

FILE = "MSweb_file"


@dataclass(frozen=True)
class FileIdentity:
    file_id: str
    epoch: str | None          # the key of its latest sync the door accepted (None: it never synced as a holder)
    next_epoch: str | None     # the key it proposed, until the door's answer is recorded
    bound: bool                # it holds a subscription's data (``MSweb_device``)

    def headers(self, where: str, propose: bool = False, take_over: str | None = None,
                unsent: int | None = None) -> dict[str, str]:
        """What each request says of the file (``holders.Presented.of_headers`` reads it); ``propose``: with the
        proposed epoch (a sync's first ``hello``, ``initialized``, ``recover``); ``unsent``: the count of its own
        changes the publisher has not received (a sync's ``hello``: a refused file's message and ``status`` say
        how many writes stay in it)."""
        out = {"Sparksync-File": self.file_id, "Sparksync-File-Where": where}
        if unsent is not None:
            out["Sparksync-Unsent"] = str(int(unsent))
        if self.epoch:
            out["Sparksync-Epoch"] = self.epoch
        if propose and self.next_epoch:
            out["Sparksync-Next-Epoch"] = self.next_epoch
        if self.bound:
            out["Sparksync-Bound"] = "1"
        if take_over:
            out["Sparksync-Take-Over"] = take_over
        return out


def described(path: str) -> str:
    """Where the file lives, as the operator reads it: this host and the file's path."""
    return f"{socket.gethostname()}:{path}"


def identity(device: Replica) -> FileIdentity:
    """The file's identity, made (with the web metadata) the first time the file is synced."""
    v = store.table_set_version(device, WEB)
    if v is None or v < WEB.version:
        with device.transaction():
            store.install_table_set(device, WEB)
    rows = store.select_rows(device, FILE, {"id": 1})
    if not rows:
        with device.transaction():
            store.insert_row(device, FILE, {"id": 1, "file_id": store.new_guid(), "epoch": None, "next_epoch": None,
                                            "made_at": store.utcnow()})
        rows = store.select_rows(device, FILE, {"id": 1})
    bound = bool(store.select_rows(device, "MSweb_device", {"id": 1}))
    r = rows[0]
    return FileIdentity(str(r["file_id"]), r["epoch"], r["next_epoch"], bound)


def propose(device: Replica) -> FileIdentity:
    """A new epoch proposed and kept in the file before it is sent (one that is already there is proposed again:
    the door may have accepted it before a kill)."""
    me = identity(device)
    if me.next_epoch is not None:
        return me
    proposed = store.new_guid()
    with device.transaction():
        store.update_rows(device, FILE, {"next_epoch": proposed}, {"id": 1})
    return replace(me, next_epoch=proposed)


def unsent(device: Replica) -> int | None:
    """The file's own changes not yet sent to its publisher (after what it recorded as uploaded), for a file that
    holds a subscription's data; None otherwise (and for a file of an earlier release, counted once this sync has
    upgraded it)."""
    if (store.metadata_version(device) or 0) < store.MERGE.version:
        return None
    partner = store.select_one(device, SubscriptionRow, {"role": Role.PUBLISHER})
    if partner is None:
        return None
    nicks = [a.nickname for a in published_articles(device, partner.pubid)]
    return count_after(device, nicks, partner.sentgen, exclude_received_from=partner.replnickname)[0]


def accepted(device: Replica) -> FileIdentity:
    """The door accepted the proposed epoch: it is the file's epoch now."""
    me = identity(device)
    if me.next_epoch is None:
        return me
    with device.transaction():
        store.update_rows(device, FILE, {"epoch": me.next_epoch, "next_epoch": None}, {"id": 1})
    return replace(me, epoch=me.next_epoch, next_epoch=None)


def replaced(device: Replica, where: str) -> None:
    """This (new) file replaces one set aside as ``where`` with everything it held (``sparksync outbox`` says so)."""
    identity(device)
    with device.transaction():
        store.update_rows(device, FILE, {"replaced": where}, {"id": 1})


def replaced_file(device: Replica) -> str | None:
    """The file this one replaced, set aside with its data (None: none)."""
    if store.table_set_version(device, WEB) != WEB.version:
        return None
    rows = store.select_rows(device, FILE, {"id": 1})
    return rows[0]["replaced"] if rows else None
