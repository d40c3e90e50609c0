"""A device that enrolls itself into a device group (``sparksync sync --enroll SECRET``; docs/web-sync.md, "A
fleet"): the group's secret presented once at the door's ``enroll``, the device's own credential (server,
subscription, token) kept in its file (``MSweb_credential``: as protected as the file is, encrypted with it where
it is) and read from there by every later sync, which needs no secret and no token.

The file's identity (``identity.py``) is made before it enrolls and sent with the secret: a process killed
between the door's answer and the credential kept enrolls again with the same file and is the same device; a
wiped device (a new file) is a new one. A file set aside (``--reinitialize``, an initialization the publisher
never heard the end of) gives its credential to the new file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sparksync import failpoints
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, ProtocolError, SparksyncError
from sparksync.merge.session.remote import identity
from sparksync.merge.session.remote.subscriber import file_of
from sparksync.metadata import store
from sparksync.metadata.schema import WEB
from sparksync.progress import Reporter, silent
from sparksync.web.device.client import ServerClient
from sparksync.web.device.lock import sync_lock
from sparksync.web.protocol import ENROLL, EnrollReply, EnrollRequest

CREDENTIAL = "MSweb_credential"


@dataclass(frozen=True)
class Credential:
    """What an enrolled device's file keeps of its enrollment."""

    server: str
    subscription: str
    group: str
    token: str = field(repr=False)


def kept(device: Replica) -> Credential | None:
    """The file's credential, or None (a file that never enrolled)."""
    v = store.table_set_version(device, WEB)
    if v is None or v < 4:
        return None
    rows = store.select_rows(device, CREDENTIAL, {"id": 1})
    if not rows:
        return None
    r = rows[0]
    return Credential(r["server"], r["subscription"], r["group_name"], r["token"])


def of_file(url: str) -> Credential | None:
    """``kept`` of the database at ``url`` (None when there is no such file yet)."""
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        return None
    with connect(url, "device") as device:
        return kept(device)


def keep(device: Replica, credential: Credential) -> None:
    """The credential written to the file (a file set aside gives its own to the one that replaces it)."""
    identity.identity(device)                 # the web metadata, installed where it is not
    with device.transaction():
        store.delete_rows(device, CREDENTIAL, {"id": 1})
        store.insert_row(device, CREDENTIAL, {"id": 1, "server": credential.server,
                                              "subscription": credential.subscription,
                                              "group_name": credential.group, "token": credential.token,
                                              "enrolled_at": store.utcnow()})


def enroll(server: str, database: str, secret: str, ca_file: str | None = None,
           report: Reporter = silent) -> Credential:
    """The device at ``database`` enrolls with ``secret``, a group's enrollment secret or a JWT of the identity
    provider its group trusts (once: a file that has a credential keeps it, and this says so); returns its
    credential. ``EnrollmentRefused`` when the door refuses it."""
    if not secret.strip():
        raise ConfigurationError("--enroll: the enrollment secret is empty", obj="enroll")
    with sync_lock(database, 120.0), connect(database, "device") as device:
        have = kept(device)
        if have is not None:
            report(f"{have.subscription}: this file enrolled already (device group {have.group}); it syncs with its "
                   "own credential")
            return have
        bound = store.select_rows(device, "MSweb_device", {"id": 1}) \
            if store.table_set_version(device, WEB) is not None else []
        if bound:
            raise ConfigurationError(f"{file_of(database)} is subscription {bound[0]['subscription']}'s file: an "
                                     "enrollment makes a new device, with a file of its own (give --database a new "
                                     "path)", obj="enroll")
        me = identity.identity(device)
        with ServerClient(server, "", ca_file) as client:
            try:
                given = secret.strip()
                as_jwt = not given.startswith("sse_") and given.count(".") == 2     # a JWT: header.payload.signature
                reply = client.send(ENROLL, EnrollReply, EnrollRequest(
                    secret=None if as_jwt else given, jwt=given if as_jwt else None, file_id=me.file_id,
                    described=identity.described(file_of(database))))
            except ProtocolError as e:
                if " 404 " in e.message:
                    raise ProtocolError(f"{client.server}: the server does not enroll devices (a release before "
                                        "device groups): ask the operator for a token", obj=client.server) from None
                raise
        credential = Credential(client.server, reply.subscription, reply.group, reply.token)
        failpoints.hit("device.enrolled", database)      # tests: enrolled at the door, the credential not kept yet
        keep(device, credential)
    report(f"{reply.subscription}: enrolled into device group {reply.group}"
           + (" (this file had enrolled before: a new credential)" if reply.again else ""))
    return credential


def carried(url: str) -> Credential | None:
    """The credential of the file at ``url`` before it is set aside (``sync._set_aside``), None when it has none."""
    try:
        return of_file(url)
    except SparksyncError:
        return None

