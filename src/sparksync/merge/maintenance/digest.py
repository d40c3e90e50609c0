"""A replica's digest of a partition: per article, its row count and an order-independent checksum of its
rows, computed in the process that reads them (no Spark, no Java), the same on a device and at the
publisher, so that a device can say what it holds in a few numbers and the publisher check them.

Each row is typed by the article's columns (the conversion every read makes, so a SQLite and a PostgreSQL
replica of the same rows agree), encoded as one canonical text (``rows.encode``), hashed (BLAKE2b, 64
bits); the checksum is the sum of the hashes modulo 2^64. ``sparksync validate --checksum`` computes its
own checksums on Spark and lists the rows that differ; a digest says only whether the partition is the
same, at a cost that grows with its rows (measured by ``bench/web_sync.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sparksync.dialects.replica import Replica
from sparksync.errors import ValueUnreadable
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.rows import encode
from sparksync.spark.reads import ReadPartition, stream_rows
from sparksync.types import ValueError_, digest_arrow, rows_to_record_batch

MODULUS = 1 << 64


@dataclass(frozen=True)
class Digest:
    """One article's rows at one replica."""

    rows: int
    checksum: str                    # decimal: the sum of the rows' 64-bit hashes, modulo 2^64

    def to_list(self) -> list:
        return [self.rows, self.checksum]


def _digest(url: str, label: str, sql: str, article) -> Digest:
    import pyarrow as pa

    columns = [(c.name, c.type) for c in article.info.columns]
    typed = pa.schema([pa.field(n, digest_arrow(t)) for n, t in columns])
    key = list(article.info.primary_key)
    read = ReadPartition(url, sql, [], [[n, t.to_dict()] for n, t in columns], label=label, key=key)
    n = total = 0
    for rows in stream_rows(read):
        try:
            batch = rows_to_record_batch(rows, columns, typed, f"{label}, article {article.table}", key)
        except ValueError_ as e:
            raise ValueUnreadable(f"the rows cannot be digested: {e}", obj=str(article.table)) from None
        for text in encode(batch.columns).to_pylist():
            total += int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        n += batch.num_rows
    return Digest(n, str(total % MODULUS))


def replica_digests(replica: Replica, url: str, pubid: str) -> dict[str, Digest]:
    """Every article of publication ``pubid`` as ``replica`` holds it (a device holds only its partition)."""
    out = {}
    for a in published_articles(replica, pubid):
        art = tracked_article(a)
        d = replica.dialect
        sql = f"SELECT {', '.join(d.quote(c.name) for c in art.info.columns)} FROM {identity.rows_sql(d, art)}"
        out[a.name] = _digest(url, replica.label, sql, art)
    return out


def partition_digests(pub: Replica, url: str, pubid: str, params: dict[str, str | None] | None) -> dict[str, Digest]:
    """Every article of publication ``pubid`` at the publisher, of the partition of ``params`` (None: every row)."""
    articles = published_articles(pub, pubid)
    scheme = scheme_of(articles)
    out = {}
    for a in articles:
        art = tracked_article(a)
        cols = [c.name for c in art.info.columns]
        if params is not None and scheme.articles[a.name].filtered:
            sql = scheme.members_sql(pub.dialect, a.name, cols, params, identity.rows_sql(pub.dialect, art))
        else:
            sql = f"SELECT {', '.join(pub.dialect.quote(c) for c in cols)} FROM {identity.rows_sql(pub.dialect, art)}"
        out[a.name] = _digest(url, pub.label, sql, art)
    return out
