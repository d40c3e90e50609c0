"""The subscriber's half of a merge session whose publisher is remote (a web device): everything the device
does to its own file, with nothing of HTTP (``web/device/sync.py`` carries it to the door and back).

1. The file is checked to be this subscription's (``check_binding``) and initialized (``initialized``); on a
   first sync, the device's partition of the snapshot, downloaded into a folder, is loaded with the same
   initialization as a direct subscriber (``merge.snapshot.initialize``) and the file bound to the
   subscription (``initialize_from_snapshot``).
2. Before an upload: the metadata and the tracking upgraded (``upgrade``), a file restored from an older
   copy recovered (``restored.py``; the file's step: ``finish_recovery``), the schema changes it has not had
   replayed, its open generation closed (``prepare_upload``).
3. Upload: its closed generations after the publisher's watermark of it, in batches of whole generations
   (``plan_upload``: ``Upload.rows`` of each batch; ``Upload.sent`` once the publisher applied it).
4. Download: what to ask for (``download_request``), then the publisher's changes applied batch by batch
   with the merge agent's apply code (``apply_download``), each batch in one transaction with its
   watermark; a local write that raced the download is kept (``ApplyContext.defer_conflicts``) and goes up
   at the next sync.
5. The file's digests when the publisher asks for a validation (``digests``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sparksync import failpoints
from sparksync.dialects.replica import Replica, redact_url
from sparksync.errors import ConfigurationError, ProtocolError, ReplayBlocked, ReplicaBehind, SparksyncError
from sparksync.merge.maintenance.digest import replica_digests
from sparksync.merge.maintenance.integrity import rowguid_columns, upgrade_tracking
from sparksync.merge.publish.fitting import not_admitted
from sparksync.merge.publish.schema_changes import replay, schema_version
from sparksync.merge.session.backlog import unsent
from sparksync.merge.session.changes import RETRY_GENERATION, key_range_mask
from sparksync.merge.session.context import subscriber_half
from sparksync.merge.session.enumeration import change_reads, make_batches, retries_of
from sparksync.merge.session.in_driver import read_changes
from sparksync.merge.session.plan import BatchInfo
from sparksync.merge.session.remote import notices, outbox
from sparksync.merge.session.remote.frames import change_schema
from sparksync.merge.session.remote.restored import FileState, file_state, interrupted, restamp
from sparksync.merge.session.remote.spooled import Download
from sparksync.merge.session.summary import DirectionStats, SubscriptionSession
from sparksync.merge.snapshot.initialize import SubscriberInit, initialize_subscriber
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import enumeration_bound, generation_rows, make_generation
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, FailedChangeRow, Role, SubscriptionRow
from sparksync.metadata.schema import DEVICE, WEB
from sparksync.progress import Reporter
from sparksync.snapshot.manifest import MANIFEST
from sparksync.snapshot.source import Received
from sparksync.spark.reads import ReadPartition

DEVICE_LEVEL = 1000               # a device's generation of more changes is renumbered into ones of this many,
                                  # so an upload request (whole generations) stays under the server's limit


@dataclass(frozen=True)
class RemotePublisher:
    """What the subscriber knows of its remote publisher and of its own registration there, as the
    publisher says it at the start of a session (the door's ``hello``)."""

    subscription: str
    publication: str
    pubid: str
    publisher: str                # the publisher's name
    publisher_nickname: int
    status: str                   # "active", or "created": the subscriber initializes a file first
    subid: str
    replica_id: str               # the subscriber's replica identity at the publisher
    nickname: int                 # the subscriber's replica nickname
    priority: float | None
    subscriber_type: int
    host_name: str | None
    login: str | None
    partition_id: int | None
    recgen: int | None            # the subscriber's changes the publisher has, up to this generation
    sentgen: int | None           # the publisher's changes the subscriber acknowledged, up to this generation
    schema_version: int
    schema_changes: Sequence[dict[str, Any]]            # the publication's schema changes, to replay
    failed: Sequence[tuple[int, str]]                   # the subscriber's changes that failed at the publisher
    recoveries: Sequence[tuple[int, int, int]] = ()     # [old nickname, sentgen, recgen] recovered to this nickname
    rowguids_added: Sequence[str] = ()                  # artids whose rowguid column publishing added


# -- the file and its subscription ------------------------------------------------------------------
def check_binding(device: Replica, url: str, subscription: str, pubid: str | None = None) -> None:
    """The file is this subscription's (of publication ``pubid``, when known), or no subscription's yet
    (``MSweb_device``)."""
    if store.table_set_version(device, WEB) is None:
        return
    rows = store.select_rows(device, "MSweb_device", {"id": 1})
    if rows and (rows[0]["subscription"] != subscription or pubid is not None and str(rows[0]["pubid"]) != str(pubid)):
        raise ConfigurationError(
            f"{file_of(url)} belongs to subscription {rows[0]['subscription']} (publication "
            f"{rows[0]['publication']}, synced with {rows[0]['server']}); it cannot sync subscription "
            f"{subscription}: use another file", obj=url)


def file_of(url: str) -> str:
    """The device's database as its user names it: the file's path, or the URL without its password."""
    return url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else redact_url(url)


def initialized(device: Replica, publisher: RemotePublisher) -> bool:
    """The file holds this subscription, active at the publisher; ``ReplicaBehind`` when it is an older file
    of the subscription that a newer one replaced (not one whose recovery was cut short: ``restored.interrupted``)."""
    if store.metadata_version(device) is None:
        return False
    mine = store.select_one(device, SubscriptionRow, {"pubid": publisher.pubid, "name": publisher.subscription,
                                                      "role": Role.SUBSCRIBER})
    state = file_state(device, publisher.pubid)
    if mine is not None and publisher.status == "active" and int(mine.replnickname) != publisher.nickname and \
            not (state is not None and interrupted(state, publisher.nickname, publisher.recoveries)):
        raise ReplicaBehind(f"{device.label} is an older file of subscription {publisher.subscription} (replica "
                            f"{mine.replnickname}; a newer file, replica {publisher.nickname}, has synced since): "
                            "its changes since then cannot be merged; start a new file: sparksync sync "
                            "--reinitialize", obj=publisher.subscription)
    return mine is not None and publisher.status == "active"


def unannounced(device: Replica, publisher: RemotePublisher) -> tuple[int, int] | None:
    """(baseline, snapshot generation) when the file holds an initialization of the subscription's current
    registration (its subid and replica nickname) that the publisher has not marked done: the device initialized it
    and the door was never told. None: the file holds something else (an earlier registration, another nickname)."""
    if publisher.status == "active":
        return None
    mine = store.select_one(device, SubscriptionRow, {"pubid": publisher.pubid, "name": publisher.subscription,
                                                      "role": Role.SUBSCRIBER})
    partner = store.select_one(device, SubscriptionRow, {"pubid": publisher.pubid, "role": Role.PUBLISHER})
    if mine is None or partner is None or str(mine.subid) != str(publisher.subid) or \
            int(mine.replnickname) != publisher.nickname:
        return None
    return int(partner.sentgen or 0), int(partner.recgen or 0)


def snapshot_files(manifest: dict[str, Any]) -> list[str]:
    """The files of the device's partition of a snapshot (its manifest): each one's path in the snapshot."""
    files = [f"{a['path']}/{f['name']}" for a in manifest["articles"] for f in a["files"] or ()]
    return files + [f"{manifest['contents_path']}/{f['name']}" for f in manifest["contents_files"] or ()]


@dataclass(frozen=True)
class Initialized:
    """A file initialized from a snapshot: its generations up to ``baseline`` are the snapshot's, which holds
    the publisher's generations up to ``snapshot_generation``; ``rows`` loaded."""

    baseline: int
    snapshot_generation: int
    rows: int


def initialize_from_snapshot(device: Replica, url: str, publisher: RemotePublisher, files: Received,
                             manifest: dict[str, Any], server: str) -> Initialized:
    """The file initialized from the snapshot in ``files`` (``snapshot_files`` of ``manifest``, downloaded)
    as a direct subscriber is, then bound to the subscription (``MSweb_device``: ``server``, the
    publication)."""
    name = publisher.subscription
    files.write(MANIFEST, json.dumps(manifest).encode("utf-8"))
    spec = SubscriberInit(
        subscription=name, publication=publisher.publication, url=url, label=name, subid=publisher.subid,
        replica_id=publisher.replica_id, replnickname=publisher.nickname, priority=float(publisher.priority or 0.0),
        subscriber_type=publisher.subscriber_type, host_name=publisher.host_name, pre_creation_cmd="drop",
        publisher_name=publisher.publisher, snapshot_dir=files.where("."), login=publisher.login,
        partition_id=publisher.partition_id, known_replicas=(str(publisher.replica_id),))
    result = initialize_subscriber(spec, files)
    if not result.ok:
        raise SparksyncError(f"{name}: initialization failed: {result.message}", obj=name)
    with device.transaction():
        store.install_table_set(device, WEB)
        store.install_table_set(device, DEVICE)
        store.delete_rows(device, "MSweb_device", {"id": 1})
        store.insert_row(device, "MSweb_device", {"id": 1, "server": server, "subscription": name,
                                                  "publication": publisher.publication, "pubid": publisher.pubid,
                                                  "bound_at": store.utcnow()})
    snap_gen = result.snapshot_generation if result.snapshot_generation is not None else manifest["snapshot_generation"]
    return Initialized(result.baseline_generation, int(snap_gen), result.rows)


def upgrade(device: Replica, added: Collection[str] = ()) -> bool:
    """The file's metadata upgraded to this release, and then its change tracking, in one transaction (a sync
    killed in between leaves the earlier release's file whole); ``added``: the artids whose rowguid column
    publishing added (the door's ``hello``): those of them still in their table move beside it, each row keeping its
    rowguid (``identity.key_rowguids``; a file upgraded by a release that did not know them). True when its change
    tracking changed."""
    if not store.outdated(device) and not unkeyed(device, added):
        return False                     # (no write transaction for nothing)
    with device.transaction():
        store.upgrade_metadata(device)
        return bool(upgrade_tracking(device, added))


def unkeyed(device: Replica, added: Collection[str]) -> list[str]:
    """The articles of ``added`` whose rowguid is still a column of their table here, and could leave it (no view,
    trigger or index of the application's own uses it: ``identity.key_rowguids`` refuses those, and says why)."""
    if not added or not device.dialect.capabilities.keyed_rowguids or store.metadata_version(device) is None:
        return []
    out = []
    for row in rowguid_columns(device, added):
        art = tracked_article(row)
        info = device.reflect(art.table)
        if info is not None and info.column(art.rowguid_column) is not None \
                and not device.dialect.column_users(device, art.table, art.rowguid_column):
            out.append(row.name)
    return out


def finish_recovery(device: Replica, state: FileState, publisher: RemotePublisher, report: Reporter) -> bool:
    """The file's step of a recovery the publisher made (``restored.interrupted``): its changes since its
    ``sentgen`` stamped as the new nickname's (``restored.restamp``). False: no recovery to finish."""
    if not interrupted(state, publisher.nickname, publisher.recoveries):
        return False
    name = publisher.subscription
    failpoints.hit("device.recovered", name)         # tests: recovered at the publisher, not yet here
    n = restamp(device, state.nickname, publisher.nickname, state.sentgen)
    report(f"{name}: recovered as replica {publisher.nickname} (was {state.nickname}): {n} change(s) made since "
           f"generation {state.sentgen} are uploaded as new ones; what the file lacks is downloaded again")
    return True


def prepare_upload(device: Replica, publisher: RemotePublisher, report: Reporter) -> ReplayBlocked | None:
    """The schema changes the file has not had replayed, its open generation closed (a generation of more
    than ``DEVICE_LEVEL`` changes renumbered into ones of that many). When the file holds values a change does
    not admit (a NULL under a new NOT NULL, a value a narrowing does not fit: ``fitting.not_admitted``), none is
    replayed: its writes go up under its old schema (the door maps them, a row that does not fit fails there
    naming its column), and the error returned names the rows its application must correct (the sync raises it
    once the upload is done)."""
    have = schema_version(device, publisher.pubid)
    newer = [c for c in publisher.schema_changes if int(c["schemaversion"]) > have]
    unfit = not_admitted(device, publisher.pubid, newer) if newer else []
    if not unfit and newer:
        for line in replay(device, publisher.pubid, publisher.publication, newer, publisher.nickname):
            report(f"{publisher.subscription}: schema change replayed: {line}")
    make_generation(device, publisher.nickname, level=DEVICE_LEVEL)
    if not unfit:
        return None
    said = "; ".join(str(u) for u in unfit)
    return ReplayBlocked(
        f"{publisher.subscription}: the publication's schema changes since version {have} cannot be made in this file: "
        f"{said}. Its writes are uploaded under its old schema (a row that does not fit fails at the publisher: "
        "'sparksync outbox' lists it); correct those rows and sync again", obj=publisher.subscription,
        rows=[f"{u.article}: {k}" for u in unfit for k in u.keys])


def made_under(device: Replica, publisher: RemotePublisher) -> int:
    """The publication's schema version the file's rows have the columns of (its upload says so: a publisher
    whose schema changed since maps it, ``older_schema.py``)."""
    return schema_version(device, publisher.pubid)


# -- upload ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Upload:
    """An upload's enumeration: the file's closed generations in (``start``, ``bound``] that the publisher
    does not have (``generations`` of them) in ``batches`` of whole generations, and the changes that failed
    at the publisher, sent again with the first batch."""

    device: Replica
    url: str
    publisher: RemotePublisher
    start: int
    bound: int
    generations: int
    batches: list[BatchInfo]
    where: dict[int, int]                # generation -> its batch
    articles: list[ArticleRow]
    retry: list[ReadPartition]

    def rows(self, b: BatchInfo) -> Any:
        """The change rows of batch ``b`` (an Arrow table); None: nothing to send (changes to send again
        whose rows are gone here)."""
        name, nick = self.publisher.subscription, self.publisher.nickname
        mine = [g for g, k in self.where.items() if k == b.seq] + \
            ([RETRY_GENERATION] if self.retry and b.seq == 0 else [])
        reads = (change_reads(self.url, name, self.device, self.articles, name, nick, b.lo, b.hi)
                 if b.hi > b.lo else [])
        reads += self.retry if b.seq == 0 else []
        table = _rows_of(read_changes(reads) if mine else None, mine)
        return None if b.hi == b.lo and not table.num_rows else table

    def sent(self, b: BatchInfo, stats: dict[str, dict[str, Any]], session: SubscriptionSession,
             conflicts: Sequence[Any] = (), refused_at: Sequence[tuple[int, str]] = ()) -> None:
        """Batch ``b`` applied at the publisher (``stats``: per article, what it did there; ``conflicts``: the fate
        of each change it did not simply apply): counted, the file's ``sentgen`` and its outbox recorded."""
        for article, st in stats.items():
            session.upload.setdefault(article, DirectionStats()).add(_stats(st))
        recorded(self.device, self.publisher.pubid, b.lo, b.hi, conflicts, refused_at)
        session.batches["upload"] = session.batches.get("upload", 0) + 1


def recorded(device: Replica, pubid: str, lo: int, hi: int, conflicts: Sequence[Any],
             refused_at: Sequence[tuple[int, str]] = ()) -> None:
    """The publisher's reply to the upload (lo, hi] recorded in one transaction: the file's ``sentgen`` (never
    lowered: a reply asked for after a cut connection is older than the uploads since) and the outbox's fates."""
    with device.transaction():
        mine = store.select_one(device, SubscriptionRow, {"pubid": pubid, "role": Role.PUBLISHER})
        if mine is not None and int(mine.sentgen or 0) <= hi:
            store.update(device, SubscriptionRow, {"sentgen": hi, "last_sync_date": store.utcnow()},
                         {"pubid": pubid, "role": Role.PUBLISHER})
        outbox.answered(device, pubid, lo, hi, list(conflicts), list(refused_at))


def plan_upload(device: Replica, url: str, publisher: RemotePublisher, per_batch: int) -> Upload:
    """What the file uploads, in batches of at most ``per_batch`` generations."""
    name, nick, pubid = publisher.subscription, publisher.nickname, publisher.pubid
    # The publisher's watermark of this device is what it has received: above the device's own record when
    # a reply was lost after the publisher committed (nothing is sent twice), below it when the publisher
    # was restored from a backup (sent again)
    start = int(publisher.recgen or 0)
    bound = enumeration_bound(device)
    gens = [g for g in generation_rows(device, start, bound) if publisher.publisher_nickname not in (g["nicknames"] or [])]
    batches, where = make_batches(gens, start, bound, per_batch, name, nick)
    articles = published_articles(device, pubid)
    retry = retries_of([(int(n), str(g)) for n, g in publisher.failed], publisher.publisher, device,
                       url, name, pubid, name, nick, start)
    if retry and not batches:            # only changes that failed at the publisher: sent again on their own
        batches, where = [BatchInfo(name, nick, 0, start, start, [])], {}
    return Upload(device, url, publisher, start, bound, len(gens), batches, where, articles, retry)


def _rows_of(table: Any, generations: list[int]) -> Any:
    """The change rows of ``generations`` (a read covers the batch's range: other generations in it are
    the publisher's own, which the publisher has)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table is None:
        return change_schema().empty_table()
    return table.filter(pc.is_in(table.column("generation"), pa.array(generations, pa.int64())))


def _stats(st: dict[str, Any]) -> DirectionStats:
    out = DirectionStats()
    for k, v in st.items():
        if hasattr(out, k):
            setattr(out, k, v)
    return out


# -- download -------------------------------------------------------------------------------------
def download_request(device: Replica, publisher: RemotePublisher, max_failed: int) -> tuple[int, list[tuple[int, str]]]:
    """What the download asks for: the publisher's changes after the file's watermark of them, and (at most
    ``max_failed``, [article nickname, rowguid] each) those that failed here, read again."""
    mine = store.select_one(device, SubscriptionRow, {"pubid": publisher.pubid, "role": Role.PUBLISHER})
    recgen = (mine.recgen if mine is not None else None) or 0
    failed = [(int(f.tablenick), str(f.rowguid)) for f in store.select(
        device, FailedChangeRow, {"source_nickname": publisher.publisher_nickname})][:max_failed]
    return int(recgen), failed


def _key(key: Any) -> tuple[int, str] | None:
    """A key range's bound as the download's metadata carries it ([tablenick, rowguid] or null)."""
    if key is None:
        return None
    if not (isinstance(key, list) and len(key) == 2 and isinstance(key[0], int) and isinstance(key[1], str)):
        raise ProtocolError(f"download: a key range bound is not [tablenick, rowguid]: {key!r}", obj="ranges")
    return int(key[0]), key[1]


def _positions(n: int) -> Any:
    """0, 1, ... n - 1 (int64), made in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.subtract(pc.cumulative_sum(pc.fill_null(pa.nulls(n, pa.int64()), 1)), 1)


def _last_appearances(keys, parts: int) -> Any:
    """Which of the download's rows (``keys``: their tablenick, rowguid and generation, in order; ``parts``: how many
    of its frames have rows) are applied: this
    device's frame, then the partition feed's segments, oldest first. A segment holds each row as the publisher
    had it when the segment was written: a row changed again, or that left the partition, later is in a later
    segment too, and only its last appearance is applied (what a read of every generation at once would give:
    the row's newest version, or its removal). The changes sent again (failed here before) are kept as they are.
    None: every row (one frame; or rows that all have rowguids of their own: a device that synced after each
    round, its own frame empty, one segment: counted, not grouped)."""
    import pyarrow.compute as pc

    if parts == 1 or not keys.num_rows:
        return None
    if pc.count_distinct(keys.column("rowguid")).as_py() == keys.num_rows:
        return None
    at = _positions(keys.num_rows)
    again = pc.equal(keys.column("generation"), RETRY_GENERATION)
    rest = keys.select(["tablenick", "rowguid"]).append_column("at", at).filter(pc.invert(again))
    last = rest.group_by(["tablenick", "rowguid"], use_threads=False).aggregate([("at", "max")]).column("at_max")
    return pc.or_(again, pc.is_in(at, value_set=last))


def _batch_of_rows(download: Download, meta: dict) -> Any:
    """Each row's batch (int32, in the download's order; -1: applied nowhere), read from the download's keys
    alone: by its generation and, for a generation cut by key, its key range; a row that is not its last
    appearance in none (``_last_appearances``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    where = {int(g): int(k) for g, k in meta.get("where", {}).items()}
    ranges = meta.get("ranges", [])
    for r in ranges:
        if not (isinstance(r, list) and len(r) == 4 and isinstance(r[0], int) and isinstance(r[3], int)):
            raise ProtocolError(f"download: a key range is not [generation, after, upto, batch]: {r!r}", obj="ranges")
    gens, seqs = pa.array(list(where), pa.int64()), pa.array(list(where.values()), pa.int32())
    found, parts = [], set()
    for part, keys in download.read(["tablenick", "rowguid", "generation"]):
        these = pc.fill_null(pc.take(seqs, pc.index_in(keys.column("generation"), value_set=gens)), -1)
        for g, after, upto, seq in ranges:
            # a generation bigger than a batch, cut by key: its rows whose (tablenick, rowguid) is in (after, upto]
            mask = pc.equal(keys.column("generation"), int(g))
            in_range = key_range_mask(keys, _key(after), _key(upto))
            these = pc.if_else(mask if in_range is None else pc.and_(mask, in_range), pa.scalar(int(seq), pa.int32()),
                               these)
        found.append(these)
        if keys.num_rows:
            parts.add(part)
    batch_of = pa.chunked_array(found, pa.int32()).combine_chunks()
    last = None
    if len(parts) > 1:                          # rows of several frames: the keys read again, to be grouped
        last = _last_appearances(_keys(download), len(parts))
        pa.default_memory_pool().release_unused()     # what the keys took, back to the system before the rows are read
    if last is None:
        return batch_of
    batch_of = pc.if_else(last, batch_of, pa.scalar(-1, pa.int32()))
    return batch_of.combine_chunks() if isinstance(batch_of, pa.ChunkedArray) else batch_of


def _keys(download: Download) -> Any:
    """The download's (tablenick, rowguid, generation), every row's, copied out of what was read: a column read is
    a slice of its record batch's body, every column of it (held, the download would be in memory again)."""
    import pyarrow as pa

    kept = [pa.table({c: pa.concat_arrays([keys.column(c).combine_chunks(), pa.array([], keys.column(c).type)])
                      for c in keys.column_names}) for _, keys in download.read(["tablenick", "rowguid", "generation"])]
    return pa.concat_tables(kept)


def _by_batch(download: Download, seqs, order: list[int]) -> Iterator[tuple[int, Any]]:
    """(seq, its rows) of each batch of ``order``, in that order, read again from ``download``: a batch as soon as
    the last of its rows (``seqs``) has been read and the batches before it were given, so what is held at once
    is the batches read and not given yet, not the download."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ends: dict[int, int] = {}
    if len(seqs):
        last = pa.table({"seq": seqs, "at": _positions(len(seqs))}).group_by(
            "seq", use_threads=False).aggregate([("at", "max")])
        ends = dict(zip(last.column("seq").to_pylist(), last.column("at_max").to_pylist()))
    wanted = frozenset(order)
    pending: dict[int, list] = {}
    i = read = 0
    empty = change_schema().empty_table()
    for _, table in download.read():
        these = seqs.slice(read, table.num_rows)
        read += table.num_rows
        for seq in pc.unique(these).to_pylist():
            if seq in wanted:
                pending.setdefault(seq, []).append(table.filter(pc.equal(these, seq)))
        while i < len(order) and ends.get(order[i], -1) < read:
            got = pending.pop(order[i], [])
            yield order[i], pa.concat_tables(got) if got else empty
            i += 1
    if read != len(seqs):
        raise ProtocolError(f"download: {read} row(s) read again of {len(seqs)}", obj="download")
    for seq in order[i:]:
        got = pending.pop(seq, [])
        yield seq, pa.concat_tables(got) if got else empty


def apply_download(device: Replica, url: str, publisher: RemotePublisher, download: Download,
                   session_id: str, session: SubscriptionSession, report: Reporter,
                   listener: notices.Listener | None = None) -> int | None:
    """The ``download`` (its frames, read back a record batch at a time: ``spooled.py``) applied here batch by
    batch (``merge.session.context.subscriber_half``), each batch's rows by their generation and, for a generation
    cut by key, their key range, each batch as soon as its rows are read; what each did counted in ``session``,
    the rows it changed listed there (``SubscriptionSession.note_changed``) and given to ``listener`` once it committed
    (``notices.py``). Returns the last generation applied (None: no batch)."""
    import pyarrow.compute as pc

    pubid, nick, name = publisher.pubid, publisher.nickname, publisher.subscription
    meta = download.metadata
    if meta.get("frames", 1) != len(download):
        raise ProtocolError(f"download: {len(download)} frame(s) arrived of {meta.get('frames')}", obj=name)
    batches = [BatchInfo(publisher.publisher, publisher.publisher_nickname, int(b["seq"]), int(b["lo"]), int(b["hi"]),
                         [int(n) for n in b["nicknames"]], retry=bool(b.get("retry")),
                         ends_within=int(b.get("ends_within") or 0)) for b in meta.get("batches", [])]
    seqs = _batch_of_rows(download, meta)
    report(f"download {name}: generations ({meta.get('start')}, {meta.get('bound')}], "
           f"{pc.sum(pc.greater_equal(seqs, 0)).as_py() or 0} change(s) in {len(batches)} batch(es)")
    if not batches:
        return None
    half = subscriber_half(device, url, name, nick, pubid, publisher.publication, publisher.publisher, batches,
                           session_id, publisher.partition_id)
    done = None
    tracked = {n: a.article for n, a in half.articles.items()}
    keep = listener is not None and notices.listening(device)
    names = {a.nickname: a.name for a in published_articles(device, pubid)}      # as the outbox names them
    by_seq = {b.seq: b for b in batches}
    for seq, rows in _by_batch(download, seqs, [b.seq for b in batches]):
        b = by_seq[seq]
        watch = notices.Watch(device, tracked, names, rows, session_id, b.seq, keep)
        outcome = half.apply(b, rows, watch.record, watch.planned)
        session.note_changed(watch.changes)
        failpoints.hit("device.after_download_batch", name)
        if keep:
            notices.deliver(device, listener)            # type: ignore[arg-type]
        elif listener is not None and watch.changes:
            listener(notices.ChangeBatch(session_id, b.seq, watch.row_changes()))
        if outcome.status == "error":
            raise ProtocolError(f"download batch {b.seq} at {name}: {outcome.message}", obj=name)
        for nick_, st in outcome.stats.items():
            session.download.setdefault(half.ctx.article_names.get(nick_, str(nick_)), DirectionStats()).add(st)
        session.batches["download"] = session.batches.get("download", 0) + (outcome.status == "applied")
        done = b.hi
    return done


# -- validation -----------------------------------------------------------------------------------
def digests(device: Replica, url: str, publisher: RemotePublisher, report: Reporter) -> dict[str, tuple[int, str]] | None:
    """What the file holds, as the publisher asked: each article's row count and checksum
    (``merge.maintenance.digest``), or None when changes are pending here (the publisher's digests would
    differ for a reason the next sync mends)."""
    pubid = publisher.pubid
    if unsent(device, pubid, publisher.publisher_nickname):
        return None
    t0 = time.perf_counter()
    found = replica_digests(device, url, pubid)
    report(f"{publisher.subscription}: digests of {len(found)} article(s), "
           f"{sum(d.rows for d in found.values())} row(s), in {time.perf_counter() - t0:.2f}s")
    return {k: (d.rows, d.checksum) for k, d in found.items()}
