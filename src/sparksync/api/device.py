"""The device's side: ``Device``, a device database bound to its server and subscription (or enrolled into a
device group), its key when it is encrypted at rest, and ``database_url``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparksync.api.common import Progress, _said
from sparksync.dialects.sqlite import cipher
from sparksync.dialects.sqlite.cipher import KeySource
from sparksync.errors import ConfigurationError, SparksyncError
from sparksync.merge.session.remote.notices import ChangeBatch
from sparksync.merge.session.remote.outbox import Keep, OutboxChange
from sparksync.merge.session.summary import MergeSummary
from sparksync.web.device import enrolled
from sparksync.web.device import local as device_local
from sparksync.web.device.background import Background, LocalWrites
from sparksync.web.device.sync import DeviceOptions
from sparksync.web.device.sync import sync as _sync

# -- the device's side --------------------------------------------------------------------------------------
key_from_env = cipher.from_env
"""``Device(key=key_from_env("TILL_KEY"))``: an encrypted file's passphrase from an environment variable."""
key_from_file = cipher.from_file
"""``Device(key=key_from_file(path))``: an encrypted file's passphrase from a file only its owner may read."""


def database_url(database: str) -> str:
    """A device database's URL: a path is a SQLite file's; a URL other than ``sqlite:///`` or ``postgresql://`` is a
    ``ConfigurationError``."""
    if database.startswith(("sqlite:///", "postgresql://", "postgres://")):
        return database
    if "://" in database:
        raise ConfigurationError(f"--database {database}: a SQLite file path, or a sqlite:/// or postgresql:// URL",
                                 obj="database")
    return "sqlite:///" + str(Path(database).expanduser().resolve())


@dataclass
class Device:
    """A device database (a SQLite file path, or a ``sqlite:///`` / ``postgresql://`` URL) bound to its server
    (``https://host:port``, or ``http://`` to a loopback address) and its web subscription, with the token the
    operator made for it (``token``). Its outbox and conflict inbox are read from the file alone (``Device(path)``
    is enough); a sync needs the rest. Needs neither Spark nor the server extra."""

    database: str
    server: str | None = None
    subscription: str | None = None
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    generations_per_batch: int = 100
    key: str | bytes | KeySource | None = field(default=None, repr=False)
    _background: Background | None = field(default=None, init=False, repr=False)
    _listeners: list[Callable[[ChangeBatch], None]] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.key is not None:          # the file is encrypted (SQLCipher): every connection to it asks for this
            if not self.url.startswith("sqlite:///"):
                raise ConfigurationError(f"device {self.database}: only a SQLite file is encrypted with a key",
                                         obj="key")
            cipher.use_key(self.url.removeprefix("sqlite:///"), self.key)

    @property
    def url(self) -> str:
        return database_url(self.database)

    def connect(self) -> Any:
        """A DB-API connection to the device's SQLite file for the application's own reads and writes (``sqlite3``'s,
        or SQLCipher's with the key when the file is encrypted); what it writes the next sync uploads."""
        if not self.url.startswith("sqlite:///"):
            raise ConfigurationError(f"device {self.database}: connect() opens a SQLite file; a PostgreSQL device "
                                     "database is the application's to connect to", obj="database")
        path = self.url.removeprefix("sqlite:///")
        if cipher.keyed(path):
            return cipher.connect(path)
        import sqlite3

        return sqlite3.connect(path)

    def sync(self, *, reinitialize: bool = False, upload_first: bool = False, recover: bool = False,
             progress: Progress | None = None) -> MergeSummary:
        """One sync: upload, then download (``sparksync sync``); ``reinitialize``: a new file from the snapshot,
        the old one kept beside it (``upload_first``: its changes uploaded before), holding the subscription from
        then on; ``recover``: this file, an older copy of the one that holds the subscription, takes it over. A
        device that enrolled (``enroll``) needs neither its subscription nor its token: its file keeps them."""
        options = DeviceOptions(self.server or "", self.subscription or "", self.url, self.token or "", self.ca_file,
                                self.generations_per_batch, reinitialize, upload_first, recover=recover,
                                on_change=self._notify if self._listeners else None)
        if not self.server and (self.token and self.subscription or enrolled.of_file(self.url) is None):
            raise ConfigurationError(f"device {self.database}: a sync needs its server", obj="server")
        return _sync(options, _said(progress))

    def enroll(self, secret: str, *, sync: bool = True, progress: Progress | None = None) -> MergeSummary | None:
        """Enroll this device into the device group of ``secret`` (an enrollment secret the operator made with
        ``sparksync enroll-token``, or a JWT of the identity provider the group trusts), once: the door makes its own
        subscription and token, which its file keeps (a file that enrolled already keeps its credential); then, with
        ``sync``, its first sync (``sync``), whose summary is returned. ``EnrollmentRefused`` when the secret is
        unknown, used up, expired or revoked, or the token is not accepted."""
        if not self.server:
            raise ConfigurationError(f"device {self.database}: an enrollment needs the server", obj="server")
        kept = enrolled.enroll(self.server, self.url, secret, self.ca_file, _said(progress))
        self.subscription, self.token = kept.subscription, kept.token
        return self.sync(progress=progress) if sync else None

    def outbox(self, *, pending: bool = False) -> list[OutboxChange]:
        """Every local change the application has not acknowledged, with its fate (``sparksync outbox``);
        ``pending``: only those the publisher has not accepted yet."""
        return device_local.changes(self.url, pending_only=pending)

    def replaced(self) -> str | None:
        """The file this one replaced (``sync`` set it aside with everything it held, its outbox included), or None."""
        return device_local.replaced(self.url)

    def conflicts(self) -> list[OutboxChange]:
        """The conflict inbox: the device's changes that lost a conflict, not settled yet (``sparksync conflicts
        --database``), each with its version (``mine``) and the winner's (``winner``)."""
        return device_local.inbox(self.url)

    def keep(self, change_id: int, which: Keep) -> OutboxChange:
        """Settle a lost conflict: ``"mine"`` writes the device's version again (a change the next sync uploads),
        ``"theirs"`` keeps the winner."""
        return device_local.keep(self.url, change_id, which)

    def acknowledge(self, change_ids: list[int] | None = None) -> int:
        """Answered changes the application has seen leave the outbox (None: every applied, replaced or refused one);
        how many did."""
        return device_local.acknowledge(self.url, change_ids)

    def on_change(self, callback: Callable[[ChangeBatch], None]) -> None:
        """``callback`` is given what each download batch changed (the articles and keys it inserted, updated or
        deleted, rows that left the partition included), once the batch has committed; what a crash kept from
        it is given at the next sync."""
        self._listeners.append(callback)

    def _notify(self, batch: ChangeBatch) -> None:
        for callback in list(self._listeners):
            callback(batch)

    def start(self, interval: float = 60.0, on_sync: Callable[[MergeSummary], None] | None = None,
              on_error: Callable[[SparksyncError], None] | None = None, max_backoff: float = 600.0,
              debounce: float = 2.0) -> None:
        """Sync in a thread of this process until ``stop()``: at once, then every ``interval`` seconds and
        ``debounce`` seconds after a local write (seen without reading the tables: ``web/device/background.py``)
        or ``poke()``. ``on_sync`` is called with each finished sync's summary, ``on_error`` with what stopped a
        sync (after which the next one waits twice as long, up to ``max_backoff``, until one succeeds). One sync
        of the file runs at a time, across processes too."""
        if self._background is not None and self._background.running:
            raise RuntimeError(f"device {self.subscription} is already syncing in the background")
        watch = LocalWrites(self.url.removeprefix("sqlite:///")) if self.url.startswith("sqlite:///") else None
        self._background = Background(self.sync, str(self.subscription), interval=interval, debounce=debounce,
                                      max_backoff=max_backoff, local_writes=watch, on_sync=on_sync, on_error=on_error)
        self._background.start()

    def poke(self) -> None:
        """The application wrote: the background sync runs ``debounce`` seconds from now."""
        if self._background is not None:
            self._background.poke()

    def stop(self, timeout: float | None = None) -> None:
        """Stop syncing in the background: a sync in flight finishes first."""
        if self._background is not None:
            self._background.stop(timeout)
            self._background = None
