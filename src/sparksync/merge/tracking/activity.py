"""The publisher's tracking *mark*: one read of everything a web door's round acts on, so that a round with
nothing to do is known without doing it.

A round (``web/server/door.py``) flushes the tracking log, closes the open generation if it holds changes,
settles closed generations, evaluates partitions up to them and extends the partition feed up to the evaluated
bound. Each of those starts from something this mark reads: an entry in the log (``MSmerge_pending``), a row
of an article inserted without a rowguid (the flush gives it one), a change stamped with the open generation,
a closed generation not yet settled, the highest generation (a closed one, or one received from a replica's
upload, or another door's or agent's round), and the publication's evaluation watermark and schema version;
where the changes are read from PostgreSQL's log, whether it holds a change of an article not read yet
(``dialects/postgres/log_capture.unread``). Two equal marks taken one after the other mean that nothing was
committed, flushed, closed, settled or evaluated in between: a round that completed after the first one left
nothing for a round after the second.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparksync.dialects.replica import Replica
from sparksync.merge.tracking.pending import LOG, has_log
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, GenStatus, PublicationRow


@dataclass(frozen=True)
class Probe:
    """The statement that reads a publication's mark (made by :func:`probe`, kept while the articles are)."""

    publication: str
    sql: str
    params: tuple
    log: bool = False           # the changes are read from the server's log (PostgreSQL): its mark too

    def read(self, replica: Replica) -> tuple:
        """The mark now (one round trip; two where changes are read from the server's log). It reads the log too,
        so ``replica`` may read tracking metadata."""
        row = replica.query(self.sql, list(self.params))
        mark = tuple(row[0]) if row else ()
        return mark + (replica.dialect.log_mark(replica),) if self.log else mark


def probe(replica: Replica, publication: str) -> Probe | None:
    """The probe of ``publication``'s mark at the publisher ``replica`` (None: no tracking log to read, or
    no such publication: such a publisher's rounds always run)."""
    if not has_log(replica):
        return None
    prow = store.select_one(replica, PublicationRow, {"name": publication})
    if prow is None:
        return None
    d, p = replica.dialect, replica.p
    m = d.metadata_table_sql
    closed = f"genstatus > {GenStatus.OPEN:d}"
    top_closed = f"(SELECT coalesce(max(generation), 0) FROM {m('MSmerge_genhistory')} WHERE {closed})"
    parts = [
        f"(SELECT coalesce(max(generation), 0) FROM {m('MSmerge_genhistory')})",
        f"(SELECT count(*) FROM {m('MSmerge_genhistory')} WHERE {closed} AND settled = 0)",
        f"(SELECT count(*) FROM (SELECT 1 FROM {m(LOG)} LIMIT 1) AS x)",
        f"(SELECT count(*) FROM (SELECT 1 FROM {m('MSmerge_contents')} WHERE generation > {top_closed} LIMIT 1) AS x)",
        f"(SELECT count(*) FROM (SELECT 1 FROM {m('MSmerge_tombstone')} WHERE generation > {top_closed} LIMIT 1) AS x)",
        f"(SELECT coalesce(partitions_evaluated, 0) FROM {m('sysmergepublications')} WHERE name = {p})",
        f"(SELECT coalesce(schema_version, 0) FROM {m('sysmergepublications')} WHERE name = {p})",
    ]
    params: list = [publication, publication]
    seen: set[str] = set()
    for row in store.select(replica, ArticleRow, order_by=("nickname",)):
        article = tracked_article(row)
        table = d.table_sql(article.table)
        if table in seen:
            continue
        seen.add(table)
        if article.keyed:               # its own log: a row inserted is an entry there
            parts.append(f"(SELECT count(*) FROM (SELECT 1 FROM {m(article.log_table)} LIMIT 1) AS x)")
        else:
            parts.append(f"(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {d.quote(article.rowguid_column)} "
                         "IS NULL LIMIT 1) AS x)")
    # the count of articles: one added or dropped changes the probe itself
    parts.append(f"(SELECT count(*) FROM {m('sysmergearticles')})")
    return Probe(publication, "SELECT " + ", ".join(parts), tuple(params), d.captures_from_log(replica))
