"""A merge session's apply side, made in one place: what every apply of a batch needs to know of the session
(``ApplyContext``: the publication's articles, their rules and filters, the replicas), of its destination
(``DestinationInfo``) and of the destination's articles (``ArticleAt``).

The merge agent makes each direction's context and destinations here (both ends local: the apply runs in
Spark tasks or in its own process, ``stream.py``, ``in_driver.py``). A session with one end remote is run by
halves (``Half``): the web door runs the publisher's half of a device's upload (``publisher_half``), the device
runs its own half of the download against the remote publisher (``subscriber_half``). Nothing outside this
package builds these objects (an import-linter contract says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sparksync.config import PublicationConfig
from sparksync.dialects.replica import Replica
from sparksync.merge.apply import rehearsal
from sparksync.merge.apply.batch import apply_batch
from sparksync.merge.apply.classify import ArticleAt, StagedWork
from sparksync.merge.apply.decide import ArticleRules
from sparksync.merge.apply.handling import Handling
from sparksync.merge.apply.outcome import BatchOutcome
from sparksync.merge.partitions.evaluation import evaluated_at_sync
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.session.changes import ALL_PARTITIONS, by_article
from sparksync.merge.session.links import article_rules, session_replicas
from sparksync.merge.session.plan import ApplyContext, BatchInfo, DestinationInfo
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, PublicationRow

__all__ = ["BatchOutcome", "Half", "articles_at", "destination", "publisher_half", "session_context", "subscriber_half",
           "upload_batch"]


def session_context(replica: Replica, pubid: str, upload: bool, session_id: str, publication: str,
                    rules: dict[int, ArticleRules] | None = None, articles: list[ArticleRow] | None = None,
                    defer_conflicts: bool = False) -> ApplyContext:
    """The context of one direction of a session applied at ``replica`` (its own metadata of publication
    ``pubid``): ``rules`` the articles' resolvers (the publisher's, ``links.article_rules``; a device decides
    no conflict: column tracking only), ``defer_conflicts`` (a device: a local write that raced the download is
    kept, not decided)."""
    articles = published_articles(replica, pubid) if articles is None else articles
    scheme = scheme_of(articles)
    prow = store.select_one(replica, PublicationRow, {"pubid": pubid})
    filtered = frozenset(a.nickname for a in articles if scheme.articles[a.name].filtered)
    at_sync = evaluated_at_sync(articles, scheme, prow.precomputed if prow is not None else True)
    return ApplyContext(
        pubid=pubid, upload=upload, session_id=session_id, publication=publication,
        rules=rules if rules is not None else {a.nickname: ArticleRules(a.nickname, bool(a.column_tracking))
                                               for a in articles},
        replicas=session_replicas(replica, pubid), destinations={},
        article_names={a.nickname: a.name for a in articles}, filtered=filtered, mapped=filtered - at_sync,
        refused_out_of_partition=frozenset(a.nickname for a in articles
                                           if a.nickname in filtered and a.refuses_out_of_partition),
        defer_conflicts=defer_conflicts)


def destination(name: str, url: str, nickname: int, is_publisher: bool, pubid: str, log_here: bool,
                log_remote: bool = False, partition_id: int = 0) -> DestinationInfo:
    """A destination of a direction: its batches are added per source as the plan makes them."""
    return DestinationInfo(name=name, url=url, nickname=nickname, is_publisher=is_publisher, watermark={"pubid": pubid},
                           batches={}, log_conflicts_here=log_here, log_conflicts_remote=log_remote,
                           partition_id=partition_id)


def articles_at(replica: Replica, pubid: str, articles: list[ArticleRow] | None = None) -> dict[int, ArticleAt]:
    """Each article of ``pubid`` at ``replica`` by its nickname, with its processing group."""
    rows = published_articles(replica, pubid) if articles is None else articles
    return {a.nickname: ArticleAt(tracked_article(a), a.processing_group) for a in rows}


@dataclass
class Half:
    """One end of a session whose other end is remote: the batches of one source applied at this replica,
    each in one transaction with its watermark (``merge.apply.batch.apply_batch``)."""

    replica: Replica
    ctx: ApplyContext
    dest: DestinationInfo
    articles: dict[int, ArticleAt]

    def apply(self, batch: BatchInfo, rows, record: Callable[[Replica, BatchOutcome], None] | None = None,
              planned: Callable[[Replica, list[StagedWork]], None] | None = None,
              handlings: dict[int, Handling] | None = None) -> BatchOutcome:
        """Apply ``rows`` (change rows of ``batch``, an Arrow table) here; ``record``: what the caller writes in
        the batch's transaction, just before the watermark; ``planned``: what it reads once the batch is staged and
        classified, before anything is written; ``handlings``: its handlers as ``rehearse`` left them."""
        changes = by_article(rows) if rows is not None and rows.num_rows else {}
        return apply_batch(self.replica, self.ctx, self.dest, batch, changes, self.articles, record, planned,
                           handlings)

    def rehearse(self, batch: BatchInfo, rows) -> dict[int, Handling]:
        """The handler calls of ``rows``' apply made now, outside any write lock (``merge.apply.rehearsal``): the
        articles' handlers, their answers kept, for ``apply``."""
        changes = by_article(rows) if rows is not None and rows.num_rows else {}
        return rehearsal.rehearsed(self.replica, self.ctx, self.dest, batch, changes, self.articles)


def publisher_half(pub: Replica, publisher: str, publisher_url: str, publication: PublicationConfig, base_dir: str,
                   pubid: str, source: str, source_nick: int, session_id: str,
                   batch: BatchInfo) -> Half:
    """The publisher's half of a remote subscriber's upload (a web device, ``source``): its batch applied at the
    publisher with the publication's rules, conflicts decided and logged here."""
    articles = published_articles(pub, pubid)
    ctx = session_context(pub, pubid, True, session_id, publication.name,
                          article_rules(publication, pub, articles, base_dir), articles)
    dest = destination(publisher, publisher_url, 1, True, pubid, log_here=True)
    dest.batches[source] = [batch]
    ctx.destinations[publisher] = dest
    return Half(pub, ctx, dest, articles_at(pub, pubid, articles))


def subscriber_half(replica: Replica, url: str, name: str, nickname: int, pubid: str, publication: str,
                    publisher: str, batches: list[BatchInfo], session_id: str, partition_id: int | None) -> Half:
    """A remote publisher's download applied at this subscriber (a web device ``name``): its batches from
    ``publisher``, no conflict decided here (a local write that raced the download is kept and goes up at the
    next sync, where the publisher decides)."""
    ctx = session_context(replica, pubid, False, session_id, publication, defer_conflicts=True)
    dest = destination(name, url, nickname, False, pubid, log_here=False, partition_id=int(partition_id or 0))
    dest.batches[publisher] = batches
    ctx.destinations[name] = dest
    return Half(replica, ctx, dest, articles_at(replica, pubid))


def upload_batch(source: str, source_nick: int, lo: int, hi: int, retry: bool, partition_id: int | None) -> BatchInfo:
    """A remote subscriber's upload of its generations (lo, hi] as one batch (and the changes it sends again)."""
    return BatchInfo(source, source_nick, 0, lo, hi, [source_nick], retry=retry,
                     partition_id=partition_id or ALL_PARTITIONS)
