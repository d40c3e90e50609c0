"""One sync of a web device (``sparksync sync``): the subscriber's half of a merge session, run on the
device, with nothing of Spark or Java. What is done to the file is the session's
(``merge/session/remote/subscriber.py``); this is the HTTP around it.

1. ``hello``: who the device is at the publisher; the file is checked to be this subscription's.
2. First sync: the device's partition of the snapshot is downloaded, verified against its checksums and
   loaded with the same initialization as a direct subscriber (``merge.snapshot.initialize``); the door
   then marks the subscription active.
3. A file restored from an older copy is recovered (``recover``); schema changes the device has not had
   are replayed, its open generation closed.
4. Upload: its closed generations after the common watermark, one generation batch per request
   (idempotent by its generations); the door applies them at the publisher and decides every conflict.
5. Download: the publisher's changes for its partition, applied batch by batch with the merge agent's
   apply code, each batch in one transaction with its watermark; a local write that raced the download
   is kept (``ApplyContext.defer_conflicts``) and goes up at the next sync. Then the door is told.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sparksync import failpoints
from sparksync.allocation import fewer_collections
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, Diverged, SparksyncError
from sparksync.merge.session.remote import notices, outbox
from sparksync.merge.session.remote.frames import read_frames, write_changes
from sparksync.merge.session.remote.notices import Listener
from sparksync.merge.session.remote.restored import file_state, restored
from sparksync.merge.session.remote.subscriber import (
    RemotePublisher,
    apply_download,
    check_binding,
    digests,
    download_request,
    finish_recovery,
    initialize_from_snapshot,
    initialized,
    made_under,
    plan_upload,
    prepare_upload,
    recorded,
    snapshot_files,
    upgrade,
)
from sparksync.merge.session.summary import DirectionStats, MergeSummary, SubscriptionSession
from sparksync.metadata import store
from sparksync.progress import Reporter, silent
from sparksync.web.device.client import ServerClient, answered
from sparksync.web.device.downloads import downloads
from sparksync.web.device.lock import sync_lock
from sparksync.web.protocol import (
    ACK,
    DONE,
    DOWNLOAD,
    HELLO,
    INITIALIZE,
    INITIALIZED,
    MAX_RETRIES,
    RECOVER,
    SNAPSHOT,
    SNAPSHOT_FILE,
    UPLOAD,
    UPLOADED,
    AckReply,
    AckRequest,
    Counts,
    Digests,
    DoneReply,
    DoneRequest,
    DownloadRequest,
    Hello,
    InitializedReply,
    InitializedRequest,
    RecoverRequest,
    UploadLookup,
    UploadReply,
)

PER_BATCH = 100                   # generations per upload request and per download batch


@dataclass(frozen=True)
class DeviceOptions:
    server: str
    subscription: str
    database: str                 # the device's database URL (a SQLite file path is made a URL by the CLI)
    token: str
    ca_file: str | None = None
    generations_per_batch: int = PER_BATCH
    reinitialize: bool = False    # a new file from the snapshot, the old one kept beside it (a SQLite file)
    upload_first: bool = False    # with reinitialize: the old file's changes uploaded first
    on_change: Listener | None = None   # given what each download batch changed, once it committed (notices.py)
    lock_wait: float = 120.0      # seconds to wait for another sync of the same file (lock.py)


def sync(options: DeviceOptions, report: Reporter = silent) -> MergeSummary:
    """One sync: upload, then download (both, always: as SQL Server's web synchronization does), one of the
    file at a time (``lock.py``). ``reinitialize``: the file is set aside first (its changes uploaded before,
    with ``upload_first``) and a new one initialized from the snapshot, under a fresh replica identity."""
    with sync_lock(options.database, options.lock_wait):
        return _sync(options, report)


def _sync(options: DeviceOptions, report: Reporter) -> MergeSummary:
    t0 = time.perf_counter()
    summary = MergeSummary(store.new_guid())
    if options.reinitialize:
        _reinitialize(options, summary, report)
    with ServerClient(options.server, options.token, options.ca_file) as client, \
            connect(options.database, options.subscription) as device:
        hello = client.send(HELLO, Hello)
        if hello.subscription != options.subscription:
            raise ConfigurationError(f"the token belongs to subscription {hello.subscription}, not "
                                     f"{options.subscription}", obj=options.subscription)
        session = SubscriptionSession(options.subscription, hello.publication)
        summary.subscriptions.append(session)
        try:
            _sync_file(client, device, options, _publisher(hello), session, summary, report, t0)
        except SparksyncError as e:
            if not answered(e):          # what stopped it here, the door is told (as the device's word)
                with contextlib.suppress(SparksyncError):
                    client.send(DONE, DoneReply, DoneRequest(seconds=time.perf_counter() - t0, errors=[e.message]))
            raise
    return summary


def _sync_file(client: ServerClient, device: Replica, options: DeviceOptions, publisher: RemotePublisher,
               session: SubscriptionSession, summary: MergeSummary, report: Reporter, t0: float) -> None:
    """The sync after ``hello``: the file checked (and initialized, upgraded, recovered), upload, download,
    its digests when asked, then ``done``."""
    url = options.database
    check_binding(device, url, publisher)
    if not initialized(device, publisher):
        _initialize(client, device, options, report)
        publisher = _publisher(client.send(HELLO, Hello))
    if upgrade(device):
        report(f"{options.subscription}: change tracking upgraded")
    publisher = _recover_if_restored(client, device, publisher, report)
    outbox.install(device)
    if options.on_change is not None:            # what a sync stopped before its callbacks changed, first
        notices.deliver(device, options.on_change)
    _unanswered(client, device, publisher, report)
    prepare_upload(device, publisher, report)
    _upload(client, device, options, publisher, session, report)
    hello = client.send(HELLO, Hello)
    publisher = _publisher(hello)
    _download(client, device, options, publisher, session, summary, report)
    outbox.prune(device, publisher.pubid)
    validation = _digests(device, url, publisher, report) if hello.validate_ else None
    session.seconds = summary.seconds = time.perf_counter() - t0
    up, down = session.total("upload"), session.total("download")
    said = client.send(DONE, DoneReply, DoneRequest(
        seconds=session.seconds, errors=session.errors, upload=_counts(up), download=_counts(down), validation=validation))
    verdict = said.validation
    if verdict is not None and verdict.result == "failed":
        message = (f"{options.subscription}: the publisher's validation of this file failed: {verdict.message}; run "
                   "'sparksync sync --reinitialize --upload-first'")
        session.fail(message, Diverged(message, obj=options.subscription))
    elif verdict is not None:
        report(f"{options.subscription}: validation {verdict.result}" + (f" ({verdict.message})" if verdict.message else ""))


def _publisher(hello: Hello) -> RemotePublisher:
    """What ``hello`` says of the publisher and of the device's registration, as the session reads it."""
    return RemotePublisher(
        subscription=hello.subscription, publication=hello.publication, pubid=hello.pubid, publisher=hello.publisher,
        publisher_nickname=hello.publisher_nickname, status=hello.status, subid=hello.subid,
        replica_id=hello.replica_id, nickname=hello.nickname, priority=hello.priority,
        subscriber_type=hello.subscriber_type, host_name=hello.host_name, login=hello.login,
        partition_id=hello.partition_id, recgen=hello.recgen, sentgen=hello.sentgen,
        schema_version=hello.schema_version, schema_changes=tuple(hello.schema_changes), failed=tuple(hello.failed),
        recoveries=tuple(hello.recoveries))


def _counts(st: DirectionStats) -> Counts:
    return Counts(**{k: int(getattr(st, k)) for k in Counts.model_fields})


def _digests(device: Replica, url: str, publisher: RemotePublisher, report: Reporter) -> Digests:
    """What the device holds, as the publisher asked (``hello.validate_``): each article's row count and
    checksum, or only that changes are pending here (``subscriber.digests``)."""
    articles = digests(device, url, publisher, report)
    return Digests(pending=True) if articles is None else Digests(pending=False, articles=articles)


def _reinitialize(options: DeviceOptions, summary: MergeSummary, report: Reporter) -> None:
    """``sync --reinitialize``: with ``upload_first``, what the file holds that the publisher has not is
    uploaded (as a sync's upload: a restored file is recovered first); then the file is set aside as
    ``<file>.replaced-<UTC time>`` and the sync goes on with a new one, initialized from the snapshot."""
    url = options.database
    if not url.startswith("sqlite"):
        raise ConfigurationError(f"--reinitialize sets the device's SQLite file aside and starts a new one; "
                                 f"{url.split(':')[0]} databases are reinitialized by dropping their tables and "
                                 "sparksync metadata by hand", obj=options.subscription)
    if options.upload_first:
        with ServerClient(options.server, options.token, options.ca_file) as client, \
                connect(url, options.subscription) as device:
            publisher = _publisher(client.send(HELLO, Hello))
            if store.metadata_version(device) is not None and initialized(device, publisher):
                check_binding(device, url, publisher)
                publisher = _recover_if_restored(client, device, publisher, report)
                prepare_upload(device, publisher, report)
                session = SubscriptionSession(options.subscription, publisher.publication)
                _upload(client, device, options, publisher, session, report)
                summary.subscriptions.append(session)
    with connect(url, options.subscription) as device:
        dialect = device.dialect
    where = dialect.set_aside(url, "replaced")
    report(f"{options.subscription}: the file is set aside as {where}; a new one is initialized from the snapshot")


# -- the file and its subscription ------------------------------------------------------------------
def _recover_if_restored(client: ServerClient, device: Replica, publisher: RemotePublisher,
                         report: Reporter) -> RemotePublisher:
    """A file restored from an older copy of itself (``restored.py``) is recovered before anything is sent:
    the publisher gives it a new nickname and takes its watermarks, the file's changes since are stamped as
    that replica's (``subscriber.finish_recovery``). Returns what the publisher says then."""
    state = file_state(device, publisher.pubid)
    if state is None:
        return publisher
    if restored(state, publisher.nickname, publisher.recgen):
        report(f"{publisher.subscription}: {device.label} is an older copy of itself (restored from a backup?): its "
               f"newest generation is {state.open_generation}, and the publisher already has its changes up to "
               f"{publisher.recgen}; recovering it")
        publisher = _publisher(client.send(RECOVER, Hello, RecoverRequest.model_validate(state.as_request())))
    finish_recovery(device, state, publisher, report)
    return publisher


def _initialize(client: ServerClient, device: Replica, options: DeviceOptions, report: Reporter) -> None:
    """The file initialized from the device's partition of the snapshot, downloaded file by file."""
    publisher = _publisher(client.send(INITIALIZE, Hello))      # a fresh identity if the subscription synced before
    manifest = client.json(SNAPSHOT.method, SNAPSHOT.path)
    sid = manifest["snapshot_id"]
    files = snapshot_files(manifest)
    report(f"{options.subscription}: initializing from snapshot {sid} ({len(files)} file(s))")
    with tempfile.TemporaryDirectory(prefix="sparksync-snapshot-") as tmp:
        kept = downloads(options.database, Path(tmp))      # sealed when the file is encrypted
        try:
            for rel in files:
                client.download_file(SNAPSHOT_FILE.url(snapshot_id=sid, path=rel), kept.target(rel))
            failpoints.hit("device.snapshot_downloaded", options.subscription)   # tests: a kill with the files here
            done = initialize_from_snapshot(device, options.database, publisher, kept, manifest, client.server)
        finally:
            kept.close()
    client.send(INITIALIZED, InitializedReply, InitializedRequest(snapshot_id=sid, baseline=done.baseline,
                                                                  snapshot_generation=done.snapshot_generation))
    report(f"{options.subscription}: {done.rows} row(s) loaded")


# -- upload and download --------------------------------------------------------------------------
def _upload(client: ServerClient, device: Replica, options: DeviceOptions, publisher: RemotePublisher,
            session: SubscriptionSession, report: Reporter) -> None:
    """Each batch of the upload in one request; what the publisher did with it recorded."""
    name = options.subscription
    upload = plan_upload(device, options.database, publisher, options.generations_per_batch)
    schema = made_under(device, publisher)      # the columns its rows are read with
    report(f"upload {name}: generations ({upload.start}, {upload.bound}], {upload.generations} to send in "
           f"{len(upload.batches)} batch(es)")
    for b in upload.batches:
        rows = upload.rows(b)
        if rows is None:
            continue
        outbox.sent(device, rows, b.lo, b.hi)
        reply = client.send(UPLOAD, UploadReply, content=write_changes(rows, {"schema_version": schema}),
                            lo=b.lo, hi=b.hi)
        failpoints.hit("device.after_upload", name)       # tests: applied at the publisher, not yet recorded here
        _said_of(reply, name, report)
        upload.sent(b, reply.stats, session, reply.conflicts, reply.refused_at)


def _said_of(reply: UploadReply, name: str, report: Reporter) -> None:
    if reply.refused:
        report(f"upload {name}: {reply.refused} change(s) to rows outside this device's partition were refused "
               "by the publisher (sparksync outbox lists them)")
    for c in reply.conflicts:
        if c.fate != "refused":
            report(f"upload {name}: conflict on {c.article} row {c.rowguid}: {c.reason}")


def _unanswered(client: ServerClient, device: Replica, publisher: RemotePublisher, report: Reporter) -> None:
    """The uploads sent at an earlier sync whose reply the device did not record (a cut connection, a kill): the
    publisher's reply asked for and recorded, or, when it applied no such upload, their changes pending again."""
    for lo, hi in outbox.unanswered(device):
        found = client.send(UPLOADED, UploadLookup, lo=lo, hi=hi)
        if found.reply is not None:
            recorded(device, publisher.pubid, lo, hi, found.reply.conflicts, found.reply.refused_at)
            _said_of(found.reply, publisher.subscription, report)
        else:
            outbox.not_applied(device, lo, hi)


def _download(client: ServerClient, device: Replica, options: DeviceOptions, publisher: RemotePublisher,
              session: SubscriptionSession, summary: MergeSummary, report: Reporter) -> None:
    """The publisher's changes for the device in one request, applied; the door told how far."""
    after, failed = download_request(device, publisher, MAX_RETRIES)
    frames = read_frames(client.changes(DOWNLOAD.path, json=DownloadRequest(
        after=after, batch=options.generations_per_batch, failed=failed, keyset=True).model_dump(mode="json")),
        "download")
    with fewer_collections():           # tens of thousands of rows' short-lived objects (allocation.py)
        done = apply_download(device, options.database, publisher, frames, summary.session_id, session, report,
                              options.on_change)
    if done is not None:
        client.send(ACK, AckReply, AckRequest(hi=done))
