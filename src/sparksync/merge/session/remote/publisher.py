"""The publisher's half of a merge session whose subscriber is remote (a web device), without HTTP: what the web
door (``web/server/door.py``) asks of the publisher for a device's sync, in the session's own terms.

* ``registration``: the subscription as the publisher has it registered.
* ``apply_upload``: one range of the subscriber's closed generations applied at the publisher with the merge
  agent's apply (``merge.session.context.publisher_half``), in one transaction with its watermark and the reply
  (``MSweb_uploads``): the same upload again gets that reply, the same range with another body is refused
  (``UploadConflict``; but a range of no generation, (lo, lo], holds only the device's failed changes sent again,
  whose rows move from sync to sync: a new upload each time), and so is a range that does not follow what the
  publisher has; changes to rows outside the subscriber's partition are taken out and logged (``trust.py``).
* ``close_and_evaluate``: the publication-wide work before downloads (the publisher's open generation closed,
  partition mappings brought up to it), done once for every subscriber that waits for it.
* ``download_start``: where a download starts (the common watermark of the two ends), read up to closed
  generations only (``downloads.py`` plans and reads it).
* ``schema_changes``, ``failed_changes``: the schema changes the subscriber replays, and its changes that failed
  at the publisher, which it sends again.
* ``check``: at start, the publication's resolvers load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sparksync import failpoints
from sparksync.config import PublicationConfig, Topology
from sparksync.dialects.replica import Replica
from sparksync.errors import NotInitialized, ProtocolError, SparksyncError, UploadConflict
from sparksync.merge.apply.handling import check_handlers
from sparksync.merge.conflicts.resolvers import check_resolvers
from sparksync.merge.partitions.evaluation import evaluate, evaluated_at_sync, partitions
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.publish.schema_changes import pending
from sparksync.merge.session.changes import ALL_PARTITIONS, RETRY_GENERATION
from sparksync.merge.session.context import BatchOutcome, Half, publisher_half, upload_batch
from sparksync.merge.session.enumeration import min_watermark
from sparksync.merge.session.remote import older_schema
from sparksync.merge.session.remote.fates import failing, fates, positions
from sparksync.merge.session.remote.frames import UploadArticle, check_upload
from sparksync.merge.session.remote.trust import foreign_rows, log_refused, without
from sparksync.merge.tracking.activity import Probe as Probe
from sparksync.merge.tracking.activity import probe as tracking_probe
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import make_generation
from sparksync.merge.tracking.pending import reading_closed
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, FailedChangeRow, PublicationRow, Role, SubscriptionRow
from sparksync.rows import RowCodec


@dataclass(frozen=True)
class ReceivedUpload:
    """A remote subscriber's changes of its generations (lo, hi] as it sent them: ``rows``, the change rows read
    from its frame (an Arrow table, checked here before anything is written), ``digest``, its body's (the same
    range sent again is told apart by it), ``what``, how a refusal names the upload."""

    subscription: str
    lo: int
    hi: int
    rows: Any
    digest: str
    what: str
    metadata: dict | None = None       # its frame's: the publication's schema version it was made under


@dataclass(frozen=True)
class _Prepared:
    """An upload read and checked, ready to apply (``PublisherHalf._prepare``)."""

    half: Half
    checked: Any                       # the change rows to apply (an Arrow table)
    nickname: int                      # the device's replica nickname
    refused_at: list[list]             # [position in the upload, reason] of each change refused by partition


@dataclass(frozen=True)
class DownloadStart:
    """Where a remote subscriber's download starts: its registration, and ``start``, the lower of the publisher's
    ``sentgen`` toward it and the subscriber's own ``recgen``."""

    publication: PublicationRow
    registration: SubscriptionRow
    start: int

    @property
    def partition_id(self) -> int:
        """The subscriber's partition (``ALL_PARTITIONS``: an unfiltered subscription)."""
        return int(self.registration.partition_id or ALL_PARTITIONS)


class PublisherHalf:
    """The publisher's half of the merge sessions of ``topology``'s remote subscribers. ``max_retries``: the most
    failed changes a subscriber is told of at once, and so may send again in one upload."""

    def __init__(self, topology: Topology, max_retries: int):
        self.topology = topology
        self.max_retries = max_retries

    def check(self, publication: PublicationConfig) -> None:
        """At start: every resolver of the publication loads (not at a subscriber's first upload)."""
        check_resolvers(self.topology, publication)
        check_handlers(self.topology, publication)

    @staticmethod
    def registration(pub: Replica, publication: str, subscription: str) -> tuple[PublicationRow, SubscriptionRow]:
        """(the publication's row, the subscription's registration) at the publisher."""
        found = store.select_joined(pub, PublicationRow, SubscriptionRow, "pubid", {"name": publication},
                                    {"name": subscription, "role": Role.SUBSCRIBER})
        if found is None:
            raise NotInitialized(f"subscription {subscription} is not registered at the publisher; the operator runs "
                                 "'sparksync setup'", obj=subscription)
        return found

    def schema_changes(self, pub: Replica, pubid: str) -> list[dict]:
        """The publication's schema changes, in order, as JSON values (the subscriber replays those it lacks)."""
        return json.loads(json.dumps(pending(pub, pubid, 0), default=str))

    def rowguids_added(self, pub: Replica, pubid: str) -> list[str]:
        """The artids of the publication's articles whose rowguid column publishing added: a device keeps their
        rowguids beside its tables (``identity.py``), one of an earlier release moves them there."""
        return [a.artid for a in store.select(pub, ArticleRow, {"pubid": pubid}) if a.rowguid_added]

    def failed_changes(self, pub: Replica, nickname: int) -> list[list]:
        """[tablenick, rowguid] of the changes of replica ``nickname`` that failed at the publisher (at most
        ``max_retries``): the subscriber sends them again."""
        rows = store.select(pub, FailedChangeRow, {"source_nickname": nickname})
        return [[f.tablenick, str(f.rowguid)] for f in rows[:self.max_retries]]

    # -- upload ---------------------------------------------------------------------------------------
    def apply_upload(self, pub: Replica, publication: PublicationConfig, upload: ReceivedUpload) -> dict:
        """Apply ``upload`` at the publisher in one transaction with its watermark and its reply (a transient
        failure rolls it back whole: the caller tries it again). Returns the reply (``UploadReply``'s fields).
        Where the publisher has one writer for the whole database (SQLite) and an article has a business logic
        handler, the upload is rehearsed first, before the write lock is taken (``merge.apply.rehearsal``)."""
        name, lo, hi = upload.subscription, upload.lo, upload.hi
        replies: list[dict] = []
        handlings = self._rehearsed(pub, publication, upload)
        with pub.transaction():
            ready = self._prepare(pub, publication, upload)
            if isinstance(ready, dict):
                return ready
            half, checked = ready.half, ready.checked
            tracked = {n: a.article for n, a in half.articles.items()}
            device = half.ctx.replicas.name(ready.nickname)

            def reply_of(outcome: BatchOutcome) -> dict:
                told = fates(pub, [c.record for c in outcome.conflicts], tracked, half.ctx.article_names,
                             device, failing(pub, ready.nickname, checked), outcome.replaced)
                return _reply(lo, hi, outcome, half.ctx.article_names, ready.refused_at, told)

            def record(replica: Replica, outcome: BatchOutcome) -> None:
                replies.append(reply_of(outcome))
                store.insert_row(replica, "MSweb_uploads", {
                    "subscription": name, "lo": lo, "hi": hi, "digest": upload.digest,
                    "reply": json.dumps(replies[0]), "applied_at": store.utcnow()})

            outcome = half.apply(half.dest.batches[name][0], checked, record, handlings=handlings)
            if not replies:
                replies.append(reply_of(outcome))
        failpoints.hit("door.after_upload_commit", name)     # tests: committed, the door has not replied yet
        return replies[0]

    def _rehearsed(self, pub: Replica, publication: PublicationConfig, upload: ReceivedUpload) -> dict | None:
        """The upload's handler calls made before the write lock is taken (its articles' ``Handling`` each, their
        answers kept), where that is needed (``rehearsal.needed``); None: the apply makes its own."""
        if pub.dialect.capabilities.concurrent_writers or not any(a.business_logic for a in publication.articles):
            return None
        pub.execute("BEGIN")               # deferred: the upload read as the apply will read it, nothing locked
        try:
            ready = self._prepare(pub, publication, upload, rehearsal=True)
        except SparksyncError:             # said by the apply, under the lock
            return None
        finally:
            pub.rollback()
        if isinstance(ready, dict):
            return None
        return ready.half.rehearse(ready.half.dest.batches[upload.subscription][0], ready.checked)

    def _prepare(self, pub: Replica, publication: PublicationConfig, upload: ReceivedUpload,
                 rehearsal: bool = False) -> _Prepared | dict:
        """What the apply of ``upload`` needs, read in the caller's transaction: the rows checked, mapped from an
        older schema, those of other partitions refused (logged, unless ``rehearsal``), the publisher's half; or
        the reply already given to the same upload."""
        name, lo, hi, what = upload.subscription, upload.lo, upload.hi, upload.what
        prow, reg = self.registration(pub, publication.name, name)
        if not reg.active:
            raise NotInitialized(f"subscription {name} is not initialized yet", obj=name)
        # one upload of a subscription at a time, whatever process serves it
        locked = pub.query_one(f"SELECT recgen FROM {pub.meta('sysmergesubscriptions')} WHERE subid = "
                               f"{pub.dialect.uuid_param()}{pub.dialect.row_lock_clause()}", [reg.subid])
        prior = store.select_rows(pub, "MSweb_uploads", {"subscription": name, "lo": lo, "hi": hi})
        if prior and prior[0]["digest"] == upload.digest:
            reply = prior[0]["reply"]
            return json.loads(reply) if isinstance(reply, str) else reply
        if prior and lo < hi:
            raise UploadConflict(f"{what}: these generations were uploaded before with other changes; "
                                 "nothing was applied", obj=name)
        if prior:       # (lo, lo]: no generation, only the device's failed changes sent again; what they hold moves
            #             from sync to sync (a column added since, a row the publisher sent meanwhile): a new upload
            store.delete_rows(pub, "MSweb_uploads", {"subscription": name, "lo": lo, "hi": hi})
        have = int((locked[0] if locked else None) or 0)
        if lo > have:
            raise UploadConflict(f"{what}: the publisher has this device's changes up to generation {have}; "
                                 f"upload from there", expected_lo=have, obj=name)
        articles = published_articles(pub, prow.pubid)
        scheme = scheme_of(articles)
        at_sync = evaluated_at_sync(articles, scheme, prow.precomputed)
        filtered = frozenset(a.nickname for a in articles if scheme.articles[a.name].filtered)
        retries = frozenset((int(n), str(g)) for n, g in self.failed_changes(pub, reg.replnickname))
        rows = upload.rows
        made_under = older_schema.schema_version_of(upload.metadata or {}, prow.schema_version or 0, what)
        if made_under is not None and made_under < (prow.schema_version or 0):
            rows = older_schema.mapped(pub, rows, pending(pub, prow.pubid, made_under), articles)
        checked = check_upload(rows, {a.nickname: UploadArticle(a.nickname, a.name, _codec(a))
                                             for a in articles}, lo, hi, name, reg.replnickname,
                               reg.partition_id or ALL_PARTITIONS, what, retries)
        retried = bool(checked.num_rows) and RETRY_GENERATION in set(checked.column("generation").to_pylist())
        if lo == hi and not retried:
            raise ProtocolError(f"{what}: an empty range carries only changes sent again", obj=name)
        session_id = store.new_guid()
        refused = foreign_rows(pub, prow.pubid, scheme, articles, reg.partition_id, checked, reg.replnickname,
                               filtered - at_sync)
        refused_at: list[list] = []
        if refused:
            if not rehearsal:
                part = next(p for p in partitions(pub, prow.pubid) if p.partition_id == reg.partition_id)
                logged = log_refused(pub, prow.pubid, publication.name, articles, refused, name, part.describe(),
                                     session_id)
                at = positions(upload.rows)
                refused_at = [[at[(r.tablenick, str(r.rowguid).lower())], rec.reason_text]
                              for r, rec in zip(refused, logged)]
            checked = without(checked, refused)
        half = publisher_half(pub, self.topology.publisher.name, self.topology.publisher_url, publication,
                              str(self.topology.base_dir), prow.pubid, name, reg.replnickname, session_id,
                              upload_batch(name, reg.replnickname, lo, hi, retried, reg.partition_id))
        return _Prepared(half, checked, reg.replnickname, refused_at)

    @staticmethod
    def upload_reply(pub: Replica, subscription: str, lo: int, hi: int) -> dict | None:
        """The reply the publisher gave to the upload of ``subscription``'s generations (lo, hi], as it gave it;
        None: it applied no such upload (the device's outbox asks after a reply it did not receive)."""
        prior = store.select_rows(pub, "MSweb_uploads", {"subscription": subscription, "lo": lo, "hi": hi})
        if not prior:
            return None
        reply = prior[0]["reply"]
        return json.loads(reply) if isinstance(reply, str) else reply

    # -- download -------------------------------------------------------------------------------------
    def close_and_evaluate(self, pub: Replica, publication: str) -> None:
        """Close the publisher's open generation and bring the publication's partition mappings up to it (a
        realignment closes and evaluates once more), so a download sees every change committed before it."""
        prow = store.select_one(pub, PublicationRow, {"name": publication})
        if prow is None:
            return
        make_generation(pub, 1)
        articles = published_articles(pub, prow.pubid)
        scheme = scheme_of(articles)
        if scheme.filtered and prow.precomputed:
            for _ in range(2):
                ev = evaluate(pub, prow.pubid, scheme, articles)
                if ev.realignment_generation is None:
                    break
                make_generation(pub, 1)

    @staticmethod
    def probe(pub: Replica, publication: str) -> Probe | None:
        """What reads the publisher's tracking mark for ``publication`` (``merge/tracking/activity.py``): two equal
        marks, one after the other, say a round in between would have had nothing to do."""
        return tracking_probe(pub, publication)

    def download_start(self, pub: Replica, publication: str, subscription: str, recgen: int) -> DownloadStart:
        """Where subscription ``subscription``'s download starts, its own watermark being ``recgen``; ``pub``
        then reads closed generations only (up to the round's head, which its flush and close bounded)."""
        reading_closed(pub)
        prow, reg = self.registration(pub, publication, subscription)
        if not reg.active:
            raise NotInitialized(f"subscription {subscription} is not initialized yet", obj=subscription)
        return DownloadStart(prow, reg, min_watermark(reg.sentgen, int(recgen)))


def _codec(a: ArticleRow) -> RowCodec:
    return RowCodec([(c.name, c.type) for c in tracked_article(a).info.columns])


def _reply(lo: int, hi: int, outcome: BatchOutcome, names: dict[int, str], refused: list[list], told: list[dict]
           ) -> dict:
    """What the device is told of its upload: what it did per article, and the fate of each change it did not
    simply apply (``fates.py``, said without the database's own words); a change to a row outside its partition
    by its position in the upload only (``refused_at``: the same answer whether the row is elsewhere or
    nowhere, ``trust.py``)."""
    return {"lo": lo, "hi": hi, "status": outcome.status, "message": _for_device(outcome.message),
            "refused": len(refused), "refused_at": refused,
            "stats": {names.get(n, str(n)): vars(st) for n, st in outcome.stats.items()}, "conflicts": told,
            "notes": list(outcome.notes)}     # what business logic handlers logged: the door's history, not the device


def _for_device(message: str) -> str:
    return message.split(": ", 1)[0] if message else message
