"""One sync of a web device (``sparksync sync``): the subscriber's half of a merge session, run on the
device, with nothing of Spark or Java.

1. ``hello``: who the device is at the publisher; the file is checked to be this subscription's.
2. First sync: the device's partition of the snapshot is downloaded, verified against its checksums and
   loaded with the same initialization as a direct subscriber (``merge.snapshot.initialize``); the door
   then marks the subscription active.
3. Schema changes the device has not had are replayed, its open generation closed.
4. Upload: its closed generations after the common watermark, one generation batch per request
   (idempotent by its generations); the door applies them at the publisher and decides every conflict.
5. Download: the publisher's changes for its partition, applied batch by batch with the merge agent's
   apply code, each batch in one transaction with its watermark; a local write that raced the download
   is kept (``ApplyContext.defer_conflicts``) and goes up at the next sync. Then the door is told.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sparksync import failpoints
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica, redact_url
from sparksync.errors import ConfigurationError, Diverged, ProtocolError, ReplicaBehind, SparksyncError
from sparksync.merge.maintenance.digest import replica_digests
from sparksync.merge.maintenance.integrity import upgrade_tracking
from sparksync.merge.publish.schema_changes import replay, schema_version
from sparksync.merge.session.backlog import unsent
from sparksync.merge.session.changes import RETRY_GENERATION, key_range_mask
from sparksync.merge.session.context import subscriber_half
from sparksync.merge.session.enumeration import change_reads, make_batches, retries_of
from sparksync.merge.session.in_driver import read_changes
from sparksync.merge.session.plan import BatchInfo
from sparksync.merge.session.remote.frames import change_schema, read_frames, write_changes
from sparksync.merge.session.summary import DirectionStats, MergeSummary, SubscriptionSession
from sparksync.merge.snapshot.initialize import SubscriberInit, initialize_subscriber
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import enumeration_bound, generation_rows, make_generation
from sparksync.metadata import store
from sparksync.metadata.records import FailedChangeRow, Role, SubscriptionRow
from sparksync.metadata.schema import WEB
from sparksync.progress import Reporter, silent
from sparksync.web.device.client import ServerClient, answered
from sparksync.web.device.restored import file_state, interrupted, restamp, restored
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
    UploadReply,
)

PER_BATCH = 100                   # generations per upload request and per download batch
DEVICE_LEVEL = 1000               # a device's generation of more changes is renumbered into ones of this many,
                                  # so an upload request (whole generations) stays under the server's limit


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


def sync(options: DeviceOptions, report: Reporter = silent) -> MergeSummary:
    """One sync: upload, then download (both, always: as SQL Server's web synchronization does).
    ``reinitialize``: the file is set aside first (its changes uploaded before, with ``upload_first``) and a
    new one initialized from the snapshot, under a fresh replica identity."""
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
            _sync_file(client, device, options, hello, session, summary, report, t0)
        except SparksyncError as e:
            if not answered(e):          # what stopped it here, the door is told (as the device's word)
                with contextlib.suppress(SparksyncError):
                    client.send(DONE, DoneReply, DoneRequest(seconds=time.perf_counter() - t0, errors=[e.message]))
            raise
    return summary


def _sync_file(client: ServerClient, device: Replica, options: DeviceOptions, hello: Hello,
               session: SubscriptionSession, summary: MergeSummary, report: Reporter, t0: float) -> None:
    """The sync after ``hello``: the file checked (and initialized, upgraded, recovered), upload, download,
    its digests when asked, then ``done``."""
    _check_binding(device, options, hello)
    if not _initialized(device, hello):
        _initialize(client, device, options, hello, report)
        hello = client.send(HELLO, Hello)
    if store.upgrade_metadata(device) and upgrade_tracking(device):
        report(f"{options.subscription}: change tracking upgraded")
    hello = _recover_if_restored(client, device, hello, report)
    _replay_schema(device, hello, report)
    make_generation(device, hello.nickname, level=DEVICE_LEVEL)
    _upload(client, device, hello, options, session, report)
    hello = client.send(HELLO, Hello)
    _download(client, device, options.database, hello, session, summary, report, options.generations_per_batch)
    validation = _digests(device, options.database, hello, report) if hello.validate_ else None
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


def _counts(st: DirectionStats) -> Counts:
    return Counts(**{k: int(getattr(st, k)) for k in Counts.model_fields})


def _digests(device: Replica, url: str, hello: Hello, report: Reporter) -> Digests:
    """What the device holds, as the publisher asked (``hello.validate_``): each article's row count and
    checksum (``merge.maintenance.digest``), or only that changes are pending here (the publisher's digests
    would differ for a reason the next sync mends)."""
    pubid = hello.pubid
    if unsent(device, pubid, int(hello.publisher_nickname)):
        return Digests(pending=True)
    t0 = time.perf_counter()
    digests = replica_digests(device, url, pubid)
    report(f"{hello.subscription}: digests of {len(digests)} article(s), "
           f"{sum(d.rows for d in digests.values())} row(s), in {time.perf_counter() - t0:.2f}s")
    return Digests(pending=False, articles={k: (d.rows, d.checksum) for k, d in digests.items()})


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
            hello = client.send(HELLO, Hello)
            if store.metadata_version(device) is not None and _initialized(device, hello):
                _check_binding(device, options, hello)
                hello = _recover_if_restored(client, device, hello, report)
                _replay_schema(device, hello, report)
                make_generation(device, hello.nickname, level=DEVICE_LEVEL)
                session = SubscriptionSession(options.subscription, hello.publication)
                _upload(client, device, hello, options, session, report)
                summary.subscriptions.append(session)
    with connect(url, options.subscription) as device:
        dialect = device.dialect
    where = dialect.set_aside(url, "replaced")
    report(f"{options.subscription}: the file is set aside as {where}; a new one is initialized from the snapshot")


# -- the file and its subscription ------------------------------------------------------------------
def _check_binding(device: Replica, options: DeviceOptions, hello: Hello) -> None:
    if store.table_set_version(device, WEB) is None:
        return
    rows = store.select_rows(device, "MSweb_device", {"id": 1})
    if rows and (rows[0]["subscription"] != hello.subscription or str(rows[0]["pubid"]) != str(hello.pubid)):
        raise ConfigurationError(
            f"{_file_of(options.database)} belongs to subscription {rows[0]['subscription']} (publication "
            f"{rows[0]['publication']}, synced with {rows[0]['server']}); it cannot sync subscription "
            f"{hello.subscription}: use another file", obj=options.database)


def _file_of(url: str) -> str:
    """The device's database as its user names it: the file's path, or the URL without its password."""
    return url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else redact_url(url)


def _initialized(device: Replica, hello: Hello) -> bool:
    if store.metadata_version(device) is None:
        return False
    mine = store.select_one(device, SubscriptionRow, {"pubid": hello.pubid, "name": hello.subscription,
                                                      "role": Role.SUBSCRIBER})
    state = file_state(device, hello.pubid)
    if mine is not None and hello.status == "active" and int(mine.replnickname) != int(hello.nickname) and \
            not (state is not None and interrupted(state, hello)):
        raise ReplicaBehind(f"{device.label} is an older file of subscription {hello.subscription} (replica "
                            f"{mine.replnickname}; a newer file, replica {hello.nickname}, has synced since): its "
                            "changes since then cannot be merged; start a new file: sparksync sync --reinitialize",
                            obj=hello.subscription)
    return mine is not None and hello.status == "active"


def _recover_if_restored(client: ServerClient, device: Replica, hello: Hello, report: Reporter) -> Hello:
    """A file restored from an older copy of itself (``restored.py``) is recovered before anything is sent:
    the publisher gives it a new nickname and takes its watermarks, the file's changes since are stamped as
    that replica's. Returns ``hello`` as it is then."""
    state = file_state(device, hello.pubid)
    if state is None:
        return hello
    name = hello.subscription
    if restored(state, hello):
        report(f"{name}: {device.label} is an older copy of itself (restored from a backup?): its newest generation "
               f"is {state.open_generation}, and the publisher already has its changes up to {hello.recgen}; "
               "recovering it")
        hello = client.send(RECOVER, Hello, RecoverRequest.model_validate(state.as_request()))
    if not interrupted(state, hello):
        return hello
    failpoints.hit("device.recovered", name)         # tests: recovered at the publisher, not yet here
    n = restamp(device, state.nickname, int(hello.nickname), state.sentgen)
    report(f"{name}: recovered as replica {hello.nickname} (was {state.nickname}): {n} change(s) made since "
           f"generation {state.sentgen} are uploaded as new ones; what the file lacks is downloaded again")
    return hello


def _initialize(client: ServerClient, device: Replica, options: DeviceOptions, hello: Hello, report: Reporter) -> None:
    hello = client.send(INITIALIZE, Hello)      # a fresh identity if the subscription synced before
    manifest = client.json(SNAPSHOT.method, SNAPSHOT.path)
    sid = manifest["snapshot_id"]
    files = [f"{a['path']}/{f['name']}" for a in manifest["articles"] for f in a["files"] or ()]
    files += [f"{manifest['contents_path']}/{f['name']}" for f in manifest["contents_files"] or ()]
    report(f"{options.subscription}: initializing from snapshot {sid} ({len(files)} file(s))")
    with tempfile.TemporaryDirectory(prefix="sparksync-snapshot-") as tmp:
        folder = Path(tmp)
        for rel in files:
            client.download_file(SNAPSHOT_FILE.url(snapshot_id=sid, path=rel), folder / rel)
        (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        spec = SubscriberInit(
            subscription=options.subscription, publication=hello.publication, url=options.database,
            label=options.subscription, subid=hello.subid, replica_id=hello.replica_id,
            replnickname=int(hello.nickname), priority=float(hello.priority or 0.0),
            subscriber_type=int(hello.subscriber_type), host_name=hello.host_name, pre_creation_cmd="drop",
            publisher_name=hello.publisher, snapshot_dir=str(folder), login=hello.login,
            partition_id=hello.partition_id, known_replicas=(str(hello.replica_id),))
        result = initialize_subscriber(spec)
    if not result.ok:
        raise SparksyncError(f"{options.subscription}: initialization failed: {result.message}",
                             obj=options.subscription)
    with device.transaction():
        store.install_table_set(device, WEB)
        store.delete_rows(device, "MSweb_device", {"id": 1})
        store.insert_row(device, "MSweb_device", {"id": 1, "server": client.server, "subscription": options.subscription,
                                                  "publication": hello.publication, "pubid": hello.pubid,
                                                  "bound_at": store.utcnow()})
    snap_gen = result.snapshot_generation if result.snapshot_generation is not None else manifest["snapshot_generation"]
    client.send(INITIALIZED, InitializedReply, InitializedRequest(snapshot_id=sid, baseline=result.baseline_generation,
                                                                  snapshot_generation=int(snap_gen)))
    report(f"{options.subscription}: {result.rows} row(s) loaded")


def _replay_schema(device: Replica, hello: Hello, report: Reporter) -> None:
    have = schema_version(device, hello.pubid)
    newer = [c for c in hello.schema_changes if int(c["schemaversion"]) > have]
    for line in replay(device, hello.pubid, hello.publication, newer, int(hello.nickname)) if newer else []:
        report(f"{hello.subscription}: schema change replayed: {line}")


# -- upload ---------------------------------------------------------------------------------------
def _upload(client: ServerClient, device: Replica, hello: Hello, options: DeviceOptions, session: SubscriptionSession,
            report: Reporter) -> None:
    pubid, nick, name = hello.pubid, int(hello.nickname), options.subscription
    partner = {"pubid": pubid, "role": Role.PUBLISHER}
    # The publisher's watermark of this device is what it has received: above the device's own record when
    # a reply was lost after the publisher committed (nothing is sent twice), below it when the publisher
    # was restored from a backup (sent again)
    start = int(hello.recgen or 0)
    bound = enumeration_bound(device)
    publisher = int(hello.publisher_nickname)
    gens = [g for g in generation_rows(device, start, bound) if publisher not in (g["nicknames"] or [])]
    batches, where = make_batches(gens, start, bound, options.generations_per_batch, name, nick)
    articles = published_articles(device, pubid)
    retry = retries_of([(int(n), str(g)) for n, g in hello.failed], hello.publisher, device,
                       options.database, name, pubid, name, nick, start)
    if retry and not batches:            # only changes that failed at the publisher: sent again on their own
        batches, where = [BatchInfo(name, nick, 0, start, start, [])], {}
    report(f"upload {name}: generations ({start}, {bound}], {len(gens)} to send in {len(batches)} batch(es)")
    for b in batches:
        mine = [g for g, k in where.items() if k == b.seq] + ([RETRY_GENERATION] if retry and b.seq == 0 else [])
        reads = (change_reads(options.database, name, device, articles, name, nick, b.lo, b.hi) if b.hi > b.lo else [])
        reads += retry if b.seq == 0 else []
        table = _rows_of(read_changes(reads) if mine else None, mine)
        if b.hi == b.lo and not table.num_rows:         # changes to send again whose rows are gone here
            continue
        reply = client.send(UPLOAD, UploadReply, content=write_changes(table), lo=b.lo, hi=b.hi)
        failpoints.hit("device.after_upload", name)       # tests: applied at the publisher, not yet recorded here
        if reply.refused:
            report(f"upload {name}: {reply.refused} change(s) to rows outside this device's partition were refused "
                   "by the publisher (sparksync conflicts there lists them)")
        for article, st in reply.stats.items():
            session.upload.setdefault(article, DirectionStats()).add(_stats(st))
        for c in reply.conflicts:
            report(f"upload {name}: conflict on {c.article} row {c.rowguid}: {c.reason}")
        with device.transaction():
            store.update(device, SubscriptionRow, {"sentgen": b.hi, "last_sync_date": store.utcnow()}, partner)
        session.batches["upload"] = session.batches.get("upload", 0) + 1


def _key(key) -> tuple[int, str] | None:
    """A key range's bound as the download's metadata carries it ([tablenick, rowguid] or null)."""
    if key is None:
        return None
    if not (isinstance(key, list) and len(key) == 2 and isinstance(key[0], int) and isinstance(key[1], str)):
        raise ProtocolError(f"download: a key range bound is not [tablenick, rowguid]: {key!r}", obj="ranges")
    return int(key[0]), key[1]


def _rows_of(table, generations: list[int]):
    """The change rows of ``generations`` (a read covers the batch's range: other generations in it are
    the publisher's own, which the publisher has)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table is None:
        return change_schema().empty_table()
    return table.filter(pc.is_in(table.column("generation"), pa.array(generations, pa.int64())))


def _last_appearances(tables: list):
    """The download's rows: this device's frame, then the partition feed's segments, oldest first. A
    segment holds each row as the publisher had it when the segment was written: a row changed again, or
    that left the partition, later is in a later segment too, and only its last appearance is applied
    (what a read of every generation at once would give: the row's newest version, or its removal). The
    changes sent again (failed here before) are kept as they are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    if len(tables) == 1 or not table.num_rows:
        return table
    at = pa.array(range(table.num_rows), pa.int64())
    again = pc.equal(table.column("generation"), RETRY_GENERATION)
    rest = table.select(["tablenick", "rowguid"]).append_column("at", at).filter(pc.invert(again))
    last = rest.group_by(["tablenick", "rowguid"], use_threads=False).aggregate([("at", "max")]).column("at_max")
    return table.filter(pc.or_(again, pc.is_in(at, value_set=last)))


def _stats(st: dict) -> DirectionStats:
    out = DirectionStats()
    for k, v in st.items():
        if hasattr(out, k):
            setattr(out, k, v)
    return out


# -- download -------------------------------------------------------------------------------------
def _download(client: ServerClient, device: Replica, url: str, hello: Hello, session: SubscriptionSession,
              summary: MergeSummary, report: Reporter, per_batch: int = PER_BATCH) -> None:
    pubid, nick, name = hello.pubid, int(hello.nickname), hello.subscription
    partner = {"pubid": pubid, "role": Role.PUBLISHER}
    mine = store.select_one(device, SubscriptionRow, partner)
    recgen = (mine.recgen if mine is not None else None) or 0
    failed = [(int(f.tablenick), str(f.rowguid)) for f in store.select(
        device, FailedChangeRow, {"source_nickname": int(hello.publisher_nickname)})][:MAX_RETRIES]
    frames = read_frames(client.changes(DOWNLOAD.path, json=DownloadRequest(
        after=int(recgen), batch=per_batch, failed=failed, keyset=True).model_dump(mode="json")), "download")
    meta = frames[0][1]
    if meta.get("frames", 1) != len(frames):
        raise ProtocolError(f"download: {len(frames)} frame(s) arrived of {meta.get('frames')}", obj=name)
    table = _last_appearances([t for t, _ in frames])
    publisher = hello.publisher
    batches = [BatchInfo(publisher, int(hello.publisher_nickname), int(b["seq"]), int(b["lo"]), int(b["hi"]),
                         [int(n) for n in b["nicknames"]], retry=bool(b.get("retry")),
                         ends_within=int(b.get("ends_within") or 0)) for b in meta.get("batches", [])]
    where = {int(g): int(k) for g, k in meta.get("where", {}).items()}
    report(f"download {name}: generations ({meta.get('start')}, {meta.get('bound')}], {table.num_rows} change(s) in "
           f"{len(batches)} batch(es)")
    if not batches:
        return
    half = subscriber_half(device, url, name, nick, pubid, hello.publication, publisher, batches,
                           summary.session_id, hello.partition_id)
    import pyarrow as pa
    import pyarrow.compute as pc

    # each row's batch, by its generation (a generation of no batch: -1, applied nowhere), computed in Arrow
    seqs = pc.fill_null(pc.take(pa.array(list(where.values()), pa.int32()), pc.index_in(
        table.column("generation"), value_set=pa.array(list(where), pa.int64()))), -1) if table.num_rows else None
    for r in meta.get("ranges", []) if seqs is not None else []:
        # a generation bigger than a batch, cut by key: its rows whose (tablenick, rowguid) is in (after, upto]
        if not (isinstance(r, list) and len(r) == 4 and isinstance(r[0], int) and isinstance(r[3], int)):
            raise ProtocolError(f"download: a key range is not [generation, after, upto, batch]: {r!r}", obj="ranges")
        g, after, upto, seq = r
        mask = pc.equal(table.column("generation"), int(g))
        in_range = key_range_mask(table, _key(after), _key(upto))
        seqs = pc.if_else(mask if in_range is None else pc.and_(mask, in_range), pa.scalar(int(seq), pa.int32()), seqs)
    done = None
    for b in batches:
        rows = table.filter(pc.equal(seqs, b.seq)) if seqs is not None else table
        outcome = half.apply(b, rows)
        failpoints.hit("device.after_download_batch", name)
        if outcome.status == "error":
            raise ProtocolError(f"download batch {b.seq} at {name}: {outcome.message}", obj=name)
        for nick_, st in outcome.stats.items():
            session.download.setdefault(half.ctx.article_names.get(nick_, str(nick_)), DirectionStats()).add(st)
        session.batches["download"] = session.batches.get("download", 0) + (outcome.status == "applied")
        done = b.hi
    if done is not None:
        client.send(ACK, AckReply, AckRequest(hi=done))
