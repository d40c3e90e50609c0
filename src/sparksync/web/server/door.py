"""The web door's work, without HTTP: what a device may ask of the publisher, each answer bounded. The
replication is the publisher's half of the device's merge session (``merge/session/remote/``:
``publisher.PublisherHalf``, ``downloads.py``, ``feed.py``, ``recovery.py``, ``validated.py``); this is its
orchestration for one request at a time.

* ``hello``: who the device is at the publisher (its registration, watermarks, the protocol).
* ``snapshot`` / ``snapshot_file``: its partition of the current snapshot (``web/server/partitioned.py``).
* ``initialized``: the device loaded it; its registration turns active with the snapshot's watermarks.
* ``upload``: one range of the device's closed generations, applied at the publisher
  (``PublisherHalf.apply_upload``) in one transaction with its watermark and the reply: the same upload again
  gets that reply, the same range with another body is refused.
* ``download``: the publisher's changes for the device's partition after the device's watermark, as
  generation batches the device applies with the same apply code (``merge/session/remote/subscriber.py``);
  ``ack`` records what it applied.

Every decision is made at the publisher: conflicts and resolvers at the upload, partition membership in the
reads. Publication-wide work (closing the publisher's generation, evaluating partitions) is a *round*, shared
by the requests that wait for it, and skipped (not waited for) while a merge agent holds the publication.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sparksync import __version__, failpoints, locks, storage
from sparksync.config import PublicationConfig, SubscriptionConfig, Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import OtherFile, ProtocolError, SnapshotError, SparksyncError, Unauthorized, UploadConflict
from sparksync.merge.session.remote import enrollment, holders
from sparksync.merge.session.remote.downloads import DownloadPlan, plan_download, read_download
from sparksync.merge.session.remote.enrollment import ENROLLED, Enrolled
from sparksync.merge.session.remote.feed import Feed
from sparksync.merge.session.remote.frames import read_changes, write_changes
from sparksync.merge.session.remote.publisher import Probe, PublisherHalf, ReceivedUpload
from sparksync.merge.session.remote.recovery import recover_file, recoveries
from sparksync.merge.session.remote.validated import (
    FAILED,
    Validation,
    partition_params,
    publisher_digests,
    validate_device,
    validation_due,
)
from sparksync.metadata import store
from sparksync.metadata.records import FailedChangeRow, PublicationRow, SubscriptionRow, SubscriptionStatus
from sparksync.progress import Reporter, silent
from sparksync.redaction import redact
from sparksync.retry import with_retries
from sparksync.snapshot.manifest import current_snapshot
from sparksync.web import tokens
from sparksync.web.protocol import (
    MAX_RETRIES,
    PROTOCOL,
    PROTOCOL_HEADER,
    REPLACED_FATE,
    AckReply,
    Digests,
    DoneReply,
    DoneRequest,
    Hello,
    InitializedReply,
    UploadLookup,
    UploadReply,
    Verdict,
)
from sparksync.web.server.issuers import issuer_of, issuers
from sparksync.web.server.ledger import Ledger, session_row
from sparksync.web.server.partitioned import device_snapshot
from sparksync.web.server.read_ahead import ReadAhead

QUIET_FOR = 1.0     # seconds a door's rounds may be skipped on an unchanged tracking mark (``Door.round``)


@dataclass(frozen=True)
class Device:
    """An authenticated device: the one subscription its token belongs to, and the file the request says it comes
    from (``holders.py``)."""

    subscription: SubscriptionConfig
    publication: PublicationConfig
    file: holders.Presented | None = None
    protocol: int = PROTOCOL             # the protocol version the device speaks (its header)

    @property
    def name(self) -> str:
        return self.subscription.name


class Door:
    """What ``sparksync serve``'s device endpoint does (``web/server/app.py`` is its HTTP side)."""

    def __init__(self, topology: Topology, report: Reporter = silent, feed: Feed | None = None):
        self.topology = topology
        self.report = report
        self.feed = feed
        self.max_request = int(topology.server.max_request_mb * 1024 * 1024)   # what an upload may unpack to
        self.ledger = Ledger()
        self.half = PublisherHalf(topology, MAX_RETRIES)
        self._rounds: dict[str, float] = {}
        self._quiet: dict[str, tuple[Probe, tuple, float]] = {}     # the last complete round's mark
        # the configured web subscriptions by name: looked up at every request (10,000 devices); an enrolled
        # device's is made from its group and its row of MSweb_devices, read with its token (``authenticate``)
        self._devices = {s.name: s for s in topology.subscriptions if s.transport == "web"}
        self._groups = {g.name: g for g in topology.device_groups}
        self._enrolled: dict[tuple, SubscriptionConfig] = {}
        self._issuers = issuers(topology)        # the identity providers groups trust, their keys read now
        self._round_lock = threading.Lock()
        self._snapshot_lock = threading.Lock()
        self._local = threading.local()
        self._read_ahead = ReadAhead()

    def close(self) -> None:
        """The door stops: the reads ahead not started are dropped."""
        self._read_ahead.close()

    def served_publications(self) -> list[PublicationConfig]:
        """The merge publications this door serves devices of, configured or enrolled into a device group (their
        rounds run ahead: ``ahead.py``)."""
        served = {s.publication for s in self._devices.values()} | {g.publication for g in self._groups.values()}
        return [p for p in self.topology.publications_of_kind("merge") if p.name in served]

    @contextlib.contextmanager
    def publisher(self) -> Iterator[Replica]:
        """A connection to the publisher, kept by this worker thread for its next request (a connection per
        request would cost more than an idle sync); one that was lost or left in a transaction is closed."""
        pub = getattr(self._local, "pub", None)
        self._local.pub = None
        if pub is None or pub.lost:
            pub = connect(self.topology.publisher_url, self.topology.publisher.name)
        try:
            yield pub
        except BaseException:
            pub.close()
            raise
        if pub.in_transaction or pub.lost:
            pub.close()
        else:
            self._local.pub = pub

    def prepare(self) -> None:
        """At start: the publisher is reachable and set up, the token table exists, resolvers load."""
        with self.publisher() as pub:
            store.require_metadata(pub)
            with pub.transaction():
                tokens.install(pub)
        for pubcfg in self.served_publications():
            self.half.check(pubcfg)

    # -- who ------------------------------------------------------------------------------------
    def authenticate(self, token: str | None, headers: Any = None, free: bool = False) -> Device:
        """The device whose token this is, and the file its request says it comes from (``headers``: the request's,
        read once the token is checked); unless the route is ``free`` (``hello``, ``initialize``: they decide the
        file's standing themselves), the request must come from the file that holds the subscription, at its
        current epoch (``holders.check``, of the holder read with the token)."""
        with self.publisher() as pub:
            bearer = tokens.authenticate_holding(pub, token)
            name, held = bearer.subscription, bearer.held
            s = self._devices.get(name) or self._enrolled_device(name, bearer.enrolled)
            if s is None:             # a token of a subscription the configuration no longer serves, a removed device
                raise Unauthorized("unauthorized")
            file = holders.Presented.of_headers(headers) if headers is not None else None
            sent = headers.get(PROTOCOL_HEADER) if headers is not None else None      # checked by the endpoint
            device = Device(s, self.topology.publication(s.publication), file,
                            int(sent) if sent and sent.isdigit() else PROTOCOL)
            if file is not None and not free:
                holders.check(holders.Holder(*held) if held else None, s.name, file)
        return device

    def _enrolled_device(self, name: str, enrolled: tuple | None) -> SubscriptionConfig | None:
        """The web subscription of a device enrolled into a group this door serves: (group, host_name, login, state)
        of its row of MSweb_devices; None when it is revoked or removed, or its group is no longer configured."""
        if enrolled is None or enrolled[3] != ENROLLED or enrolled[0] not in self._groups:
            return None
        key = (name, *enrolled[:3])
        s = self._enrolled.get(key)
        if s is None:
            if len(self._enrolled) > 200_000:      # bounded: the devices of one door's fleet, and no more
                self._enrolled.clear()
            s = self._enrolled[key] = self._groups[enrolled[0]].device(name, enrolled[1], enrolled[2])
        return s

    def enroll(self, secret: str | None, file_id: str, described: str | None,
               jwt: str | None = None) -> tuple[Enrolled, str]:
        """A device joins a device group (``enrollment.redeem``) with the group's ``secret``, or with a ``jwt`` of
        the identity provider its group trusts (verified here: ``issuers.py``; ``enrollment.redeem_claims``): (its
        own web subscription, its token), made in one transaction."""
        if (secret is None) == (jwt is None):
            raise ProtocolError("enroll: give the group's secret or a JWT, one of them", obj="enroll")
        claims = None
        if jwt is not None:
            issuer = issuer_of(self._issuers, jwt)
            claims = (issuer.group, issuer.verify(jwt))
        with self.publisher() as pub:
            return with_retries(functools.partial(self._enroll, pub, secret, claims, file_id, described),
                                connections=[pub])

    def _enroll(self, pub: Replica, secret: str | None, claims: tuple | None, file_id: str,
                described: str | None) -> tuple[Enrolled, str]:
        with pub.transaction():
            if claims is not None:
                outcome: Enrolled | enrollment.Refused = enrollment.redeem_claims(
                    pub, claims[0], self._devices.keys(), claims[1], file_id, described)
            else:
                outcome = enrollment.redeem(pub, self._groups, self._devices.keys(), secret, file_id, described)
            if isinstance(outcome, Enrolled):
                token = tokens.issue(pub, outcome.subscription, rotate=outcome.again)
        if not isinstance(outcome, Enrolled):
            enrollment.refuse(pub, outcome, self.report)
        self.report(f"{outcome.subscription}: " + ("enrolled again by the same file: a new token" if outcome.again
                                                   else f"enrolled into device group {outcome.group}"))
        return outcome, token

    def refused(self, e: OtherFile) -> None:
        """A file that does not hold its subscription was refused: recorded as a stray of it (``status`` lists it),
        never as a run of the subscription (the holder's standing is not the stray's to change)."""
        try:
            with self.publisher() as pub:
                holders.record(pub, e)
        except SparksyncError as err:                     # the publisher unreachable: the log has both
            self.report(f"{e.obj}: a refused file could not be recorded ({redact(err.message)})")

    def _registration(self, pub: Replica, device: Device) -> tuple[PublicationRow, SubscriptionRow]:
        return self.half.registration(pub, device.publication.name, device.name)

    def hello(self, device: Device) -> Hello:
        """Who the device is at the publisher, and the standing of the file it syncs (``holders.at_hello``: a
        holder's proposed epoch recorded, a copy or a second file refused)."""
        with self.publisher() as pub:
            if device.file is None:
                return self._hello(pub, device)
            with pub.transaction():
                prow, reg = self._registration(pub, device)
                standing = holders.at_hello(pub, device.name, reg.active, device.file, self.report)
            return self._hello(pub, device, standing, (prow, reg))

    def _hello(self, pub: Replica, device: Device, standing: str = "holder",
               registration: tuple[PublicationRow, SubscriptionRow] | None = None) -> Hello:
        prow, reg = registration or self._registration(pub, device)
        ident = store.replica_identity(pub)
        assert ident is not None             # a publisher set up (require_metadata at start)
        return Hello.model_validate({
            "protocol": PROTOCOL, "server_version": __version__, "subscription": device.name,
            "publication": device.publication.name, "pubid": prow.pubid, "publisher": self.topology.publisher.name,
            "publisher_nickname": ident.nickname, "publisher_replica_id": ident.replica_id,
            "status": "active" if reg.active else "created", "subid": reg.subid, "replica_id": reg.replica_id,
            "nickname": reg.replnickname, "priority": reg.priority, "subscriber_type": int(reg.subscriber_type),
            "host_name": reg.host_name, "login": reg.login, "partition_id": reg.partition_id,
            "recgen": reg.recgen, "sentgen": reg.sentgen, "schema_version": prow.schema_version or 0,
            "schema_changes": self.half.schema_changes(pub, prow.pubid),
            "rowguids_added": self.half.rowguids_added(pub, prow.pubid),
            "failed": self.half.failed_changes(pub, reg.replnickname),   # failed here: the device sends them again
            # [old nickname, sentgen, recgen] of the files recovered to this nickname
            "recoveries": recoveries(pub, device.name, reg.replnickname),
            "max_request_bytes": self.max_request,
            "validate": self._validation_due(pub, device, prow, reg),  # digests with done
            "file": standing,
        })

    def _validation_due(self, pub: Replica, device: Device, prow: PublicationRow, reg: SubscriptionRow) -> bool:
        """Whether the device is asked for its digests; if so, the publisher's of its partition are read meanwhile
        (``read_ahead.py``)."""
        if not validation_due(pub, device.publication, prow.pubid, device.name):
            return False
        self._read_ahead.start(device.name, (prow.pubid, reg.partition_id),
                               functools.partial(self._partition_digests, prow.pubid, reg))
        return True

    def _partition_digests(self, pubid: str, reg: SubscriptionRow) -> dict:
        """On the read-ahead thread: the publisher's digests of ``reg``'s partition."""
        with self.publisher() as pub:
            return publisher_digests(pub, self.topology.publisher_url, pubid, partition_params(pub, pubid, reg))

    # -- the first sync ---------------------------------------------------------------------------
    def snapshot(self, device: Device) -> tuple[storage.Folder, dict]:
        """(folder, manifest) of the device's partition of the current snapshot."""
        snap_dir, manifest = current_snapshot(self.topology.snapshots, device.publication.name)
        with self.publisher() as pub:
            prow, reg = self._registration(pub, device)
        cleaned = prow.cleanup_generation
        if (cleaned is not None and manifest.snapshot_generation < cleaned) or \
                manifest.schema_version < (prow.schema_version or 0):
            raise SnapshotError(f"publication {device.publication.name}: snapshot {manifest.snapshot_id} is older than "
                                "the publisher's metadata cleanup or its last schema change; a device cannot be "
                                "initialized from it until the operator runs 'sparksync snapshot'", obj=device.name)
        with self._snapshot_lock:
            return device_snapshot(snap_dir, manifest, reg.partition_id)

    def snapshot_file(self, device: Device, snapshot_id: str, path: str) -> tuple[storage.Folder, str]:
        """(snapshot folder, path in it) of one file the device's manifest lists (nothing else is served)."""
        folder, manifest = self.snapshot(device)
        if manifest["snapshot_id"] != snapshot_id:
            raise UploadConflict(f"snapshot {snapshot_id} is no longer the current one ({manifest['snapshot_id']}); "
                                 "start the initialization again", obj=device.name)
        allowed = {f"{a['path']}/{f['name']}" for a in manifest["articles"] for f in a["files"] or ()}
        allowed |= {f"{manifest['contents_path']}/{f['name']}" for f in manifest["contents_files"] or ()}
        if path not in allowed:
            raise ProtocolError(f"file {path[:200]!r} is not in this subscription's snapshot", obj=device.name)
        return folder, path

    def begin(self, device: Device) -> Hello:
        """The device starts initializing a file. A registration that synced before (its device lost its
        file, or starts over) gets a fresh replica identity: the publisher believes the old nickname has
        every generation it sent, and the new file has none of them (a direct subscriber's database that
        belonged to a dropped subscription is given a fresh identity the same way). Returns ``hello``."""
        with self.publisher() as pub, pub.transaction():
            _, reg = self._registration(pub, device)
            if device.file is not None:       # another file holding it active: refused, unless taken over on purpose
                holders.begin(pub, device.name, reg.active, device.file, self.report)
            if reg.active or reg.sentgen is not None:
                nick = store.next_nickname(pub)
                store.note_nickname(pub, nick)
                store.update(pub, SubscriptionRow, {
                    "replica_id": store.new_guid(), "replnickname": nick, "status": SubscriptionStatus.CREATED,
                    "sentgen": None, "recgen": None}, {"subid": reg.subid})
                store.delete(pub, FailedChangeRow, {"source_nickname": reg.replnickname})
                store.delete_rows(pub, "MSweb_uploads", {"subscription": device.name})
                store.delete_rows(pub, "MSmerge_validations", {"subscription": device.name, "pubid": reg.pubid})
                self.report(f"{device.name}: its device starts a new file: replica nickname {reg.replnickname} "
                            f"-> {nick}")
        return self.hello(device)

    def recover(self, device: Device, nickname: int, sentgen: int, recgen: int) -> Hello:
        """The device's file is an older copy of itself: recovered at the publisher (``recovery.py``). Returns
        ``hello``."""
        with self.publisher() as pub, pub.transaction():
            prow, reg = self._registration(pub, device)
            copy = device.file is not None and device.file.take_over == "recover"
            if copy:                     # an older copy of the holder's file takes the subscription on purpose
                holders.take_over(pub, device.name, device.file, self.report)   # type: ignore[arg-type]
            if not copy or nickname != reg.replnickname or sentgen < int(reg.recgen or 0):
                recover_file(pub, prow, reg, device.name, nickname, sentgen, recgen, self.report)
            return self._hello(pub, device)

    def initialized(self, device: Device, snapshot_id: str, baseline: int, snapshot_generation: int) -> InitializedReply:
        """The device committed its initialization: the registration turns active, with the watermarks
        the device recorded (the publisher's sentgen: the snapshot's generation; recgen: its baseline).
        The same request again (its reply lost) changes nothing."""
        with self.publisher() as pub, pub.transaction():
            _, reg = self._registration(pub, device)
            if device.file is not None:
                holders.activate(pub, device.name, device.file)
            if reg.active:
                return InitializedReply(status="active")
            store.update(pub, SubscriptionRow, {
                "status": SubscriptionStatus.ACTIVE, "sentgen": int(snapshot_generation), "recgen": int(baseline),
                "last_sync_date": store.utcnow()}, {"subid": reg.subid})
        self.report(f"{device.name}: initialized from snapshot {snapshot_id}")
        return InitializedReply(status="active")

    # -- upload -----------------------------------------------------------------------------------
    def upload(self, device: Device, lo: int, hi: int, body: bytes) -> UploadReply:
        what = f"upload ({lo}, {hi}] of {device.name}"
        if not 0 <= lo <= hi:
            raise ProtocolError(f"{what}: not a generation range", obj=device.name)
        digest = hashlib.sha256(body).hexdigest()
        rows, meta = read_changes(body, what, self.max_request)
        upload = ReceivedUpload(device.name, lo, hi, rows, digest, what, meta)
        self._read_ahead.drop(device.name)
        with self.publisher() as pub:
            reply = with_retries(functools.partial(self.half.apply_upload, pub, device.publication, upload),
                                 connections=[pub])
        return UploadReply.model_validate(_for_version(reply, device.protocol))

    def uploaded(self, device: Device, lo: int, hi: int) -> UploadLookup:
        """The reply to an earlier upload of generations (lo, hi] of the device, which it did not receive."""
        with self.publisher() as pub:
            reply = self.half.upload_reply(pub, device.name, lo, hi)
        return UploadLookup(found=reply is not None,
                            reply=UploadReply.model_validate(_for_version(reply, device.protocol)) if reply else None)

    # -- download ---------------------------------------------------------------------------------
    def round(self, publication: PublicationConfig) -> None:
        """Close the publisher's open generation, bring partition mappings up to it and the partition feed
        up to them (``feed.py``), so a download sees every change committed before it was asked for.
        Requests share rounds: one that arrives while a round runs waits for it, and the next round (started
        after it arrived) serves every request waiting then. Several doors of one publisher (``serve``
        processes sharing ``feed_dir``) take turns without waiting for each other: a round holds the
        publication's feed round lock, and a door that finds it held serves the feed as it read it at its own
        last round (what is closed; the changes that round is reading reach the device at its next sync).
        Closing and evaluating are skipped (not waited for) while a merge agent holds the publication (it does
        the same work, and a device must not wait for its session): the feed then takes what the agent has
        closed and evaluated.

        A round with nothing to do is skipped: the publisher's tracking mark (``PublisherHalf.probe``, one
        read) equal to the one taken when this door's last *complete* round began (it closed, evaluated and
        extended the feed itself) says nothing was committed, closed or evaluated since; a complete round still
        runs at least every ``QUIET_FOR`` seconds (what the mark does not read: a feed index changed by hand)."""
        arrived = time.monotonic()
        with self._round_lock:
            if self._rounds.get(publication.name, -1.0) > arrived:
                return
            started = time.monotonic()
            name = publication.name
            with self.publisher() as pub:
                last = self._quiet.pop(name, None)
                if last is not None and started - last[2] < QUIET_FOR and last[0].read(pub) == last[1]:
                    self._quiet[name] = last
                    self._rounds[name] = started
                    return
                probe = self.half.probe(pub, name)
                mark = probe.read(pub) if probe is not None else None
            complete = False
            try:
                with locks.hold(self.topology, "serve round", [name], wait=0.0):
                    complete = self._round(publication)
            except locks.LockBusy:
                pass                     # another door's round: the feed as this door last read it
            if complete and probe is not None and mark is not None:
                self._quiet[name] = (probe, mark, started)
            self._rounds[name] = started

    def _round(self, publication: PublicationConfig) -> bool:
        """One round; True when it was complete (this door closed, evaluated and brought the feed up to date)."""
        complete = True
        try:
            with locks.hold(self.topology, "merge", [publication.name], wait=0.0), self.publisher() as pub:
                self.half.close_and_evaluate(pub, publication.name)
        except locks.LockBusy:
            complete = False
        if self.feed is None:
            return complete
        try:
            with self.publisher() as pub:
                self.feed.extend(pub, self.topology.publisher_url, self.topology.publisher.name, publication.name)
            return complete
        except (SparksyncError, OSError) as e:
            # never a stall: the downloads are read for each device until a round writes a segment again
            self.feed.drop(publication.name)
            message = e.message if isinstance(e, SparksyncError) else f"{type(e).__name__}: {e}"
            self.report(f"feed {publication.name}: the round's segment was not written ({redact(message)}); "
                        "downloads are read for each device until the next round")
            return False

    def download(self, device: Device, recgen: int, per_batch: int = 100,
                 failed: list[tuple[int, str]] | None = None, keyset: bool = False) -> list[bytes]:
        """The publisher's changes for the device after ``recgen`` (the device's watermark): frames of Arrow
        streams, the first this device's (its generation batches in its metadata, with the publisher's
        changes that failed at the device, ``failed``: (tablenick, rowguid), read again), then the partition
        feed's segments after its watermark (files, sent as they are) when the feed has them; otherwise the
        first frame holds every row, read for this device. ``keyset``: the device takes a generation bigger
        than a batch in parts cut by key (its batches' key ranges in the metadata); a device of an earlier
        release, which does not say so, gets whole generations."""
        failpoints.hit("door.download", device.name)          # tests: a download held inside the door
        self.round(device.publication)
        with self.publisher() as pub:
            at = self.half.download_start(pub, device.publication.name, device.name, int(recgen))
            start, pid = at.start, at.partition_id
            served = self.feed.serve(device.publication.name, start, pid, at.registration.replnickname) \
                if self.feed is not None else None
            files = served[1] if served is not None else []
            seen = self.ledger.seen(device.name, device.file.epoch if device.file else None)
            seen.sent += served[2] if served is not None else 0
            if served is not None and served[0] == start and not failed:    # at the head: nothing to plan
                empty = DownloadPlan(device.name, self.topology.publisher.name, pid, start, start)
                return [write_changes(None, {**empty.metadata(), "frames": 1})]
            head = self.feed.head(device.publication.name) if self.feed is not None and served is None else None
            plan = plan_download(pub, self.topology.publisher_url, self.topology.publisher.name, at.publication,
                                 at.registration, int(recgen), per_batch, failed or [],
                                 bound=served[0] if served is not None else head, from_feed=served is not None,
                                 keyset=keyset)
        table = read_download(plan)
        seen.sent += table.num_rows
        return [write_changes(table, {**plan.metadata(), "frames": 1 + len(files)}), *files]

    def done(self, device: Device, report: DoneRequest) -> DoneReply:
        """The device's sync ended: one ``MSmerge_sessions`` row, as a merge session of a direct subscriber
        has (``status`` and history read it), made from what the door saw (``ledger.py``): the device's own
        counts only where the door cannot know them, and bounded by what it sent."""
        row = self._session_row(device, report.seconds, report.download.model_dump(), list(report.errors))
        self._record(device, {**row, "message": redact(row["message"]) if row["message"] else None})
        if report.validation is None:
            return DoneReply(recorded=True)
        v = self.validate(device, report.validation)
        return DoneReply(recorded=True, validation=Verdict.model_validate({"result": v.result, "message": v.message}))

    def validate(self, device: Device, said: Digests) -> Validation:
        """The device's digests of what it holds against the publisher's of its partition, recorded
        (``validated.py``)."""
        with self.publisher() as pub:
            prow, reg = self._registration(pub, device)
            early = self._read_ahead.take(device.name, (prow.pubid, reg.partition_id))
            v = validate_device(pub, self.topology.publisher_url, prow, reg, said.pending,
                                {k: list(x) for k, x in said.articles.items()}, said.error, early)
        if v.result == FAILED:
            self.report(f"{device.name}: its validation failed: {v.message}")
        return v

    def failed(self, device: Device, message: str) -> None:
        """A request of the device's sync failed at the door: a failed run of its subscription, with the door's
        own message (the sync it was part of is over for the door)."""
        try:
            row = self._session_row(device, 0.0, {}, [])
            self._record(device, {**row, "status": "failed", "message": redact(message)[:1000]})
        except SparksyncError as e:                    # the publisher unreachable: the log has both
            self.report(f"{device.name}: its failed sync could not be recorded ({redact(e.message)})")

    def _session_row(self, device: Device, device_seconds: float, download: dict, errors: list[str]) -> dict:
        """The history row of the device's sync that ended (``ledger.session_row``): begun at its ``hello`` (at any
        door: the holder's ``seen_at``), its uploads' replies since then read at the publisher."""
        epoch = device.file.epoch if device.file is not None else None
        seen = self.ledger.end(device.name, epoch)
        with self.publisher() as pub:            # one read: the sync's hello (at any door) and its uploads since
            h, u = pub.meta(holders.HOLDERS), pub.meta("MSweb_uploads")
            found = pub.query(f"SELECT h.seen_at, u.reply FROM {h} h LEFT JOIN {u} u ON u.subscription = h.subscription "
                              f"AND u.applied_at >= h.seen_at WHERE h.subscription = {pub.p} AND h.epoch = {pub.p}",
                              [device.name, epoch]) if epoch is not None else []
        began = found[0][0] if found else None
        if isinstance(began, str):
            began = dt.datetime.fromisoformat(began)
        if isinstance(began, dt.datetime) and began.tzinfo is None:
            began = began.replace(tzinfo=dt.UTC)
        replies = [reply for _, reply in found if reply is not None]
        return session_row(began, seen, replies, device_seconds, download, errors)

    def _record(self, device: Device, row: dict) -> None:
        with self.publisher() as pub, pub.transaction():
            prow, _ = self._registration(pub, device)
            store.insert_row(pub, "MSmerge_sessions", {"session_id": store.new_guid(), "subscription": device.name,
                                                       "pubid": prow.pubid, **row})

    def ack(self, device: Device, hi: int) -> AckReply:
        """The device applied the download up to ``hi``: the publisher's sentgen toward it moves."""
        with self.publisher() as pub, pub.transaction():
            _, reg = self._registration(pub, device)
            if hi > int(reg.sentgen or 0):
                bound = int(pub.scalar(f"SELECT coalesce(max(generation), 0) FROM {pub.meta('MSmerge_genhistory')}") or 0)
                if hi > bound:
                    raise ProtocolError(f"ack of generation {hi}: the publisher has no such generation", obj=device.name)
                store.update(pub, SubscriptionRow, {"sentgen": int(hi), "last_sync_date": store.utcnow()},
                             {"subid": reg.subid})
        return AckReply(sentgen=hi)


def _for_version(reply: dict, protocol: int) -> dict:
    """An upload's reply as a device speaking ``protocol`` reads it: before ``REPLACED_FATE``, a change a handler's
    row replaced is not listed (such a device records it as applied, as it always did)."""
    if protocol >= REPLACED_FATE:
        return reply
    return {**reply, "conflicts": [c for c in reply.get("conflicts") or () if c.get("fate") != "replaced"]}
