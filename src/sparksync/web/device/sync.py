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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from sparksync import failpoints
from sparksync.allocation import fewer_collections
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, ConnectionFailed, Diverged, OtherFile, SparksyncError
from sparksync.merge.session.remote import identity, notices, outbox
from sparksync.merge.session.remote.frames import write_changes
from sparksync.merge.session.remote.notices import Listener
from sparksync.merge.session.remote.restored import file_state, restored
from sparksync.merge.session.remote.spooled import Download
from sparksync.merge.session.remote.subscriber import (
    RemotePublisher,
    apply_download,
    check_binding,
    digests,
    download_request,
    file_of,
    finish_recovery,
    initialize_from_snapshot,
    initialized,
    made_under,
    plan_upload,
    prepare_upload,
    recorded,
    snapshot_files,
    unannounced,
    upgrade,
)
from sparksync.merge.session.summary import DirectionStats, MergeSummary, SubscriptionSession
from sparksync.metadata import store
from sparksync.progress import Reporter, silent
from sparksync.web.device import enrolled
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

M = TypeVar("M", bound=BaseModel)
PER_BATCH = 100                   # generations per upload request and per download batch
VALIDATION_WAIT = 1800.0          # seconds a done with digests waits for the door's answer (its read of the partition)


@dataclass(frozen=True)
class DeviceOptions:
    server: str
    subscription: str
    database: str                 # the device's database URL (a SQLite file path is made a URL by the CLI)
    token: str
    ca_file: str | None = None
    generations_per_batch: int = PER_BATCH
    reinitialize: bool = False    # a new file from the snapshot, the old one kept beside it (a SQLite file): it takes
                                  # the subscription over from whichever file held it
    upload_first: bool = False    # with reinitialize: the old file's changes uploaded first
    recover: bool = False         # this file, an older copy of the file that holds the subscription (restored from a
                                  # backup), takes the subscription over
    on_change: Listener | None = None   # given what each download batch changed, once it committed (notices.py)
    lock_wait: float = 120.0      # seconds to wait for another sync of the same file (lock.py)


def sync(options: DeviceOptions, report: Reporter = silent) -> MergeSummary:
    """One sync: upload, then download (both, always: as SQL Server's web synchronization does), one of the
    file at a time (``lock.py``). ``reinitialize``: the file is set aside first (its changes uploaded before,
    with ``upload_first``) and a new one initialized from the snapshot, under a fresh replica identity."""
    with sync_lock(options.database, options.lock_wait):
        return _sync(with_credential(options), report)


def with_credential(options: DeviceOptions) -> DeviceOptions:
    """``options`` of an enrolled device: the subscription and token its file keeps (``enrolled.py``), and its
    server unless one is given; options that name them already are left as they are."""
    if options.token and options.subscription:
        return options
    kept = enrolled.of_file(options.database)
    if kept is None:
        missing = [n for n in ("subscription", "token") if not getattr(options, n)]
        raise ConfigurationError(f"{file_of(options.database)}: a sync needs its {' and '.join(missing)}, or a file "
                                 "that enrolled into a device group (sparksync sync --enroll SECRET)", obj=missing[0])
    if options.subscription and options.subscription != kept.subscription:
        raise ConfigurationError(f"{file_of(options.database)} is enrolled as {kept.subscription}, not "
                                 f"{options.subscription}", obj=options.subscription)
    return replace(options, server=options.server or kept.server, subscription=kept.subscription,
                   token=options.token or kept.token)


def _sync(options: DeviceOptions, report: Reporter) -> MergeSummary:
    t0 = time.perf_counter()
    summary = MergeSummary(store.new_guid())
    if options.reinitialize:
        _reinitialize(options, summary, report)
    take_over = "reinitialize" if options.reinitialize else "recover" if options.recover else None
    with ServerClient(options.server, options.token, options.ca_file) as client:
        while True:
            with connect(options.database, options.subscription) as device:
                hello = _hello(client, device, options, take_over)
                session = SubscriptionSession(options.subscription, hello.publication)
                summary.subscriptions.append(session)
                try:
                    held = _sync_file(client, device, options, hello, session, summary, report, t0)
                except SparksyncError as e:
                    if not answered(e) and not isinstance(e, OtherFile):   # the door is told what stopped it here
                        if isinstance(e, ConnectionFailed):     # not reached through a round of retries just now:
                            client.retries = 1                  # one try, not another round of waits
                        with contextlib.suppress(SparksyncError):
                            client.send(DONE, DoneReply, DoneRequest(seconds=time.perf_counter() - t0,
                                                                     errors=[e.message]))
                    raise
                if held:
                    return summary
                dialect = device.dialect
            summary.subscriptions.remove(session)
            _set_aside(options, dialect, report)        # the file held data the publisher does not count on
            take_over = None


def _hello(client: ServerClient, device: Replica, options: DeviceOptions, take_over: str | None) -> Hello:
    """The sync's first ``hello``: the file's identity and its proposed epoch sent (``identity.py``), taken as the
    file's epoch once the door recorded it (the file holds the subscription); every later request carries it."""
    check_binding(device, options.database, options.subscription)       # another subscription's file: said first
    where = identity.described(file_of(options.database))
    me = identity.propose(device)
    unsent = identity.unsent(device) if me.bound else None
    hello = client.send(HELLO, Hello, headers=me.headers(where, propose=True, take_over=take_over, unsent=unsent))
    if hello.subscription != options.subscription:
        raise ConfigurationError(f"the token belongs to subscription {hello.subscription}, not "
                                 f"{options.subscription}", obj=options.subscription)
    if hello.file == "holder":
        me = identity.accepted(device)
    client.identify(me.headers(where, take_over=take_over))
    return hello


def _proposing(client: ServerClient, device: Replica, options: DeviceOptions, route: Any, reply: type[M],
               body: Any, take_over: str | None = None) -> M:
    """A request that makes the file the subscription's holder at a new epoch (``initialized``, a ``recover`` on
    purpose): the epoch proposed (kept in the file first), and the file's once the door answered."""
    where = identity.described(file_of(options.database))
    me = identity.propose(device)
    out = client.send(route, reply, body, headers=me.headers(where, propose=True, take_over=take_over))
    client.identify(identity.accepted(device).headers(where))
    return out


def _set_aside(options: DeviceOptions, dialect, report: Reporter) -> None:
    """A file that holds data the publisher does not count on (an initialization it never heard the end of, a
    subscription the operator reinitialized) is never loaded again in place: it is kept as
    ``<file>.replaced-<time>`` with everything it holds, and a new file is initialized."""
    if not options.database.startswith("sqlite"):
        raise ConfigurationError(f"{options.subscription}: the device's database holds data of an initialization "
                                 "the publisher does not count on; a SQLite file would be set aside, a "
                                 f"{options.database.split(':')[0]} database is reinitialized by dropping its tables "
                                 "and sparksync metadata by hand", obj=options.subscription)
    credential = enrolled.carried(options.database)
    where = dialect.set_aside(options.database, "replaced")
    report(f"{options.subscription}: the file holds data of an initialization the publisher does not count on: it "
           f"is set aside as {where} (nothing in it is lost or sent) and a new file is initialized from the snapshot")
    _replaces(options.database, options.subscription, where, credential)


def _replaces(url: str, subscription: str, where: str, credential: enrolled.Credential | None) -> None:
    """The new file at ``url`` says which file it replaced (set aside as ``where``), and keeps the enrolled device's
    credential that file held."""
    with connect(url, subscription) as device:
        identity.replaced(device, where)
        if credential is not None:
            enrolled.keep(device, credential)


def _sync_file(client: ServerClient, device: Replica, options: DeviceOptions, hello: Hello,
               session: SubscriptionSession, summary: MergeSummary, report: Reporter, t0: float) -> bool:
    """The sync after ``hello``: the file checked (and initialized, upgraded, recovered), upload, download,
    its digests when asked, then ``done``. False: the file holds data the publisher does not count on, and must be
    set aside before a new one is initialized (``_set_aside``)."""
    url = options.database
    publisher = _publisher(hello)
    if hello.file in ("holder", "copy"):
        check_binding(device, url, publisher.subscription, publisher.pubid)
    if hello.file == "copy":
        publisher = _recover_if_restored(client, device, publisher, report, options, copy=True)
    elif hello.file != "holder" or not initialized(device, publisher):
        if store.metadata_version(device) is None:
            _initialize(client, device, options, report)
        elif hello.file == "free" and unannounced(device, publisher):
            _announce(client, device, options, publisher, report)     # initialized here, the door never told
        else:
            return False
        publisher = _publisher(client.send(HELLO, Hello))
    if upgrade(device, publisher.rowguids_added):
        report(f"{options.subscription}: change tracking upgraded")
    publisher = _recover_if_restored(client, device, publisher, report, options)
    outbox.install(device)
    if options.on_change is not None:            # what a sync stopped before its callbacks changed, first
        notices.deliver(device, options.on_change)
    _unanswered(client, device, publisher, report)
    blocked = prepare_upload(device, publisher, report)
    _upload(client, device, options, publisher, session, report)
    if blocked is not None:       # its writes are up; nothing comes down until its rows admit the new schema
        raise blocked
    hello = client.send(HELLO, Hello)
    publisher = _publisher(hello)
    _download(client, device, options, publisher, session, summary, report)
    outbox.prune(device, publisher.pubid)
    validation = _digests(device, url, publisher, report) if hello.validate_ else None
    session.seconds = summary.seconds = time.perf_counter() - t0
    up, down = session.total("upload"), session.total("download")
    # with digests, the door answers once it has its own of the partition: a read of every row of it, minutes for
    # tens of millions of rows (a connection lost meanwhile sends it again, which waits for the same read)
    said = client.send(DONE, DoneReply, DoneRequest(
        seconds=session.seconds, errors=session.errors, upload=_counts(up), download=_counts(down), validation=validation),
        timeout=httpx.Timeout(client.http.timeout.connect, read=VALIDATION_WAIT) if validation is not None else None)
    verdict = said.validation
    if verdict is not None and verdict.result == "failed":
        message = (f"{options.subscription}: the publisher's validation of this file failed: {verdict.message}; run "
                   "'sparksync sync --reinitialize --upload-first'")
        session.fail(message, Diverged(message, obj=options.subscription))
    elif verdict is not None:
        report(f"{options.subscription}: validation {verdict.result}" + (f" ({verdict.message})" if verdict.message else ""))
    return True


def _publisher(hello: Hello) -> RemotePublisher:
    """What ``hello`` says of the publisher and of the device's registration, as the session reads it."""
    return RemotePublisher(
        subscription=hello.subscription, publication=hello.publication, pubid=hello.pubid, publisher=hello.publisher,
        publisher_nickname=hello.publisher_nickname, status=hello.status, subid=hello.subid,
        replica_id=hello.replica_id, nickname=hello.nickname, priority=hello.priority,
        subscriber_type=hello.subscriber_type, host_name=hello.host_name, login=hello.login,
        partition_id=hello.partition_id, recgen=hello.recgen, sentgen=hello.sentgen,
        schema_version=hello.schema_version, schema_changes=tuple(hello.schema_changes), failed=tuple(hello.failed),
        recoveries=tuple(hello.recoveries), rowguids_added=tuple(hello.rowguids_added))


def _counts(st: DirectionStats) -> Counts:
    return Counts(**{k: int(getattr(st, k)) for k in Counts.model_fields})


def _digests(device: Replica, url: str, publisher: RemotePublisher, report: Reporter) -> Digests:
    """What the device holds, as the publisher asked (``hello.validate_``): each article's row count and
    checksum, or only that changes are pending here (``subscriber.digests``)."""
    try:
        articles = digests(device, url, publisher, report)
    except SparksyncError as e:          # the publisher records it as a failed validation of this file
        report(f"{publisher.subscription}: its digests could not be computed: {e.message}")
        return Digests(pending=False, error=e.message[:2_000])
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
            hello = _hello(client, device, options, None)      # a file that does not hold it is refused here
            publisher = _publisher(hello)
            if hello.file == "holder" and store.metadata_version(device) is not None and initialized(device, publisher):
                check_binding(device, url, publisher.subscription, publisher.pubid)
                publisher = _recover_if_restored(client, device, publisher, report, options)
                blocked = prepare_upload(device, publisher, report)
                if blocked is not None:      # set aside with the rows its application must correct, said here
                    report(blocked.message)
                session = SubscriptionSession(options.subscription, publisher.publication)
                _upload(client, device, options, publisher, session, report)
                summary.subscriptions.append(session)
    with connect(url, options.subscription) as device:
        dialect = device.dialect
        holds = store.metadata_version(device) is not None
    if not holds:
        report(f"{options.subscription}: a new file is initialized from the snapshot")
        return
    credential = enrolled.carried(url)
    where = dialect.set_aside(url, "replaced")
    report(f"{options.subscription}: the file is set aside as {where}; a new one is initialized from the snapshot")
    _replaces(url, options.subscription, where, credential)


# -- the file and its subscription ------------------------------------------------------------------
def _recover_if_restored(client: ServerClient, device: Replica, publisher: RemotePublisher,
                         report: Reporter, options: DeviceOptions, copy: bool = False) -> RemotePublisher:
    """A file restored from an older copy of itself (``restored.py``) is recovered before anything is sent:
    the publisher gives it a new nickname and takes its watermarks, the file's changes since are stamped as
    that replica's (``subscriber.finish_recovery``). ``copy``: the file is an older copy of the file that holds the
    subscription, recovered on purpose (``sparksync sync --recover``): it holds the subscription from then on.
    Returns what the publisher says then."""
    state = file_state(device, publisher.pubid)
    if state is None:
        return publisher
    if copy:
        report(f"{publisher.subscription}: {device.label} is an older copy of the file that holds the subscription; "
               "it takes the subscription over (--recover)")
        publisher = _publisher(_proposing(client, device, options, RECOVER, Hello,
                                          RecoverRequest.model_validate(state.as_request()), take_over="recover"))
    elif restored(state, publisher.nickname, publisher.recgen):
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
    failpoints.hit("device.initialized", options.subscription)     # tests: loaded here, the door not told yet
    _proposing(client, device, options, INITIALIZED, InitializedReply, InitializedRequest(
        snapshot_id=sid, baseline=done.baseline, snapshot_generation=done.snapshot_generation))
    report(f"{options.subscription}: {done.rows} row(s) loaded")


def _announce(client: ServerClient, device: Replica, options: DeviceOptions, publisher: RemotePublisher,
              report: Reporter) -> None:
    """The file's initialization committed here and the door was never told (a kill, a cut connection): told now,
    with the watermarks the file recorded, so nothing written to it since is set aside."""
    baseline, snapshot_generation = unannounced(device, publisher) or (0, 0)
    _proposing(client, device, options, INITIALIZED, InitializedReply, InitializedRequest(
        snapshot_id="told again", baseline=baseline, snapshot_generation=snapshot_generation))
    report(f"{options.subscription}: its initialization, which the publisher had not heard the end of, is told again")


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
        if c.fate == "replaced":
            report(f"upload {name}: {c.article} row {c.rowguid}: {c.reason}")
        elif c.fate != "refused":
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
    with tempfile.TemporaryFile(prefix="sparksync-download-") as fh:      # gone with the process, however it ends
        client.changes_into(DOWNLOAD.path, fh, json=DownloadRequest(
            after=after, batch=options.generations_per_batch, failed=failed, keyset=True).model_dump(mode="json"))
        with fewer_collections():           # tens of thousands of rows' short-lived objects (allocation.py)
            done = apply_download(device, options.database, publisher, Download(fh, "download"), summary.session_id,
                                  session, report, options.on_change)
    if done is not None:
        client.send(ACK, AckReply, AckRequest(hi=done))
