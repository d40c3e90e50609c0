"""What an application does with its device file between syncs, offline: its outbox (each local change and its
fate), its conflict inbox (the conflicts its changes lost, to settle), and acknowledging what it has seen
(``merge/session/remote/outbox.py`` is the outbox itself). The file says which subscription and publication it
belongs to (``MSweb_device``); no server is asked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import NotInitialized
from sparksync.merge.session.remote import identity, outbox
from sparksync.merge.session.remote.outbox import Keep, OutboxChange
from sparksync.metadata import store
from sparksync.metadata.records import Role, SubscriptionRow
from sparksync.metadata.schema import WEB


@dataclass(frozen=True)
class DeviceFile:
    """A device database bound to its web subscription: its publication (``pubid``) and the publisher's replica
    nickname."""

    subscription: str
    pubid: str
    publisher_nickname: int


def bound(device: Replica, url: str) -> DeviceFile:
    """What the file says of its subscription; ``NotInitialized`` when it is no synced device's file."""
    rows = store.select_rows(device, "MSweb_device", {"id": 1}) if store.table_set_version(device, WEB) else []
    partner = store.select_one(device, SubscriptionRow, {"pubid": rows[0]["pubid"], "role": Role.PUBLISHER}) \
        if rows else None
    if not rows or partner is None:
        where = url.removeprefix("sqlite:///")
        raise NotInitialized(f"{where} is not a device's file that has synced (sparksync sync initializes it)",
                             obj=where)
    return DeviceFile(rows[0]["subscription"], str(rows[0]["pubid"]), int(partner.replnickname))


@contextmanager
def opened(url: str) -> Iterator[tuple[Replica, DeviceFile]]:
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        where = url.removeprefix("sqlite:///")
        raise NotInitialized(f"{where}: no such file (a device's file is made by its first sparksync sync)", obj=where)
    with connect(url, "device") as device:
        yield device, bound(device, url)


def changes(url: str, *, pending_only: bool = False) -> list[OutboxChange]:
    """The device's outbox (``outbox.listing``)."""
    with opened(url) as (device, f):
        outbox.install(device)
        return outbox.listing(device, f.pubid, f.publisher_nickname, pending_only=pending_only)


def inbox(url: str) -> list[OutboxChange]:
    """The conflicts the device's changes lost that the application has not settled."""
    with opened(url) as (device, f):
        outbox.install(device)
        return outbox.inbox(device, f.pubid)


def keep(url: str, change_id: int, which: Keep) -> OutboxChange:
    """A lost conflict settled: ``mine`` (written again, uploaded at the next sync) or ``theirs``."""
    with opened(url) as (device, f):
        outbox.install(device)
        return outbox.keep(device, f.pubid, change_id, which)


def acknowledge(url: str, change_ids: list[int] | None = None) -> int:
    """Answered entries the application has seen leave the outbox (None: every applied, replaced or refused one)."""
    with opened(url) as (device, _):
        outbox.install(device)
        return outbox.acknowledge(device, change_ids)


def replaced(url: str) -> str | None:
    """The file this one replaced, set aside with everything it held (its outbox is there), or None."""
    with connect(url, "device") as device:
        return identity.replaced_file(device)
