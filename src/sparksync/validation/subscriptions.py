"""Validation of subscriptions (SQL Server's ``sp_validatemergesubscription`` and
``sp_publication_validation``), and repair of merge subscriptions.

For each subscription and article, the rows the subscriber should hold (a merge subscription: its
partition of the publisher's rows, every row of an unfiltered article, matched by rowguid; a
transactional one: the rows of the article's row filter, its published columns, matched by primary
key) against the rows it holds:

* **row counts**, counted by each database;
* with ``checksum``, an order-independent **checksum** of the published columns, computed on Spark
  from both sides: one job reads, for every article, the publisher once per partition of the
  subscriptions being validated and every subscriber, hashes each row (``xxhash64`` of the values typed by the
  article's schema, so a SQLite and a PostgreSQL replica of the same data agree) and sums the hashes;
  a full outer join on what matches a row names the rows that differ: *missing* (at the publisher, in the
  partition, not at the subscriber), *extra* (at the subscriber only) and *changed*.

**Repair** (beyond SQL Server, which can only reinitialize): the rows that differ are written at the
subscriber from the publisher (publisher wins), as changes received from the publisher (never
uploaded back), and the extra rows removed with their metadata, in one transaction per subscriber;
parents before children. Only for a subscription with nothing pending either way (a difference may
otherwise be a change the next merge delivers). Applications keep writing meanwhile: inside that
transaction the rows are locked, then looked at again, and a row changed at the subscriber since
validation (not uploaded yet, or in a version the publisher's row does not include) is left as it is,
reported in ``skipped`` (the next merge uploads it); a row and its lineage are read from the
publisher by one statement.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparksync.config import Topology
from sparksync.dialects import connect, dialect_for_url
from sparksync.dialects.model import Column, from_table_dict
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, NotInitialized, SparksyncError
from sparksync.filters import parse_filter
from sparksync.merge.maintenance import validations
from sparksync.merge.partitions.evaluation import partitions as partitions_of
from sparksync.merge.partitions.scheme import PartitionScheme, scheme_of
from sparksync.merge.tracking import identity
from sparksync.merge.tracking import pending as pending_log
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import PublicationRow, SubscriptionRow
from sparksync.names import TableName
from sparksync.progress import Reporter, silent
from sparksync.rows import decode, row_key
from sparksync.status import gather_status
from sparksync.transactional.distribution import database as dst
from sparksync.types import Kind
from sparksync.validation.reads import READ_ERROR, SIDE, SideRead, read_frame, tasks_of
from sparksync.validation.report import (
    CHANGED,
    EXTRA,
    MAX_LISTED,
    MISSING,
    ArticleValidation,
    RowDifference,
    SubscriptionValidation,
    ValidationReport,
)


@dataclass
class _Target:
    """One subscription being validated: its replica, its partition, its articles' tables there."""

    result: SubscriptionValidation
    url: str
    params: dict[str, str | None] | None         # None: every row (unfiltered publication)
    tables: dict[str, TableName | str] = field(default_factory=dict)     # a table, or a relation's SQL


@dataclass
class _Check:
    """One article to compare at its subscriptions: its published columns, what matches a row on both
    sides (``identity``: the rowguid of a merge article; None: the primary key), and the publisher's
    query of the rows a subscription should hold."""

    article: str
    columns: list[Column]
    primary_key: list[str]
    identity: str | None
    publisher_sql: Callable[[_Target], str]
    targets: list[_Target]


def validate(topology: Topology, spark_factory, publication: str | None = None,
             subscriptions: list[str] | None = None, checksum: bool = False,
             report: Reporter = silent) -> ValidationReport:
    """Validate the merge subscriptions of ``publication`` (or of every merge publication), or only
    the named ones. ``spark_factory`` is called only when checksums are computed."""
    subs = _selected(topology, publication, subscriptions)
    out = ValidationReport(checksum=checksum)
    spark_factory = functools.cache(spark_factory)        # one session, started when first needed
    status = functools.cache(functools.partial(gather_status, topology))   # pending changes, read once
    work: list[_Check] = []
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        for pub_name in dict.fromkeys(s.publication for s in subs):
            mine = [s for s in subs if s.publication == pub_name]
            if topology.publication(pub_name).kind == "merge":
                store.require_metadata(pub)
                results, checks = _merge_checks(topology, pub, pub_name, mine, status())
            else:
                results, checks = _transactional_checks(topology, pub, pub_name, mine, status())
            out.subscriptions += results
            live = [c for c in checks if c.targets]
            if live:
                report(f"validate {pub_name}: {len({id(t) for c in live for t in c.targets})} subscription(s), "
                       f"{len(live)} article(s)" + (", with checksums (Spark)" if checksum else ", row counts"))
                work += live
        _compare(topology, pub, work, checksum, spark_factory, report)    # every publication's articles at once
        _record(pub, out)
    return out


def _record(pub: Replica, out: ValidationReport) -> None:
    """Each merge subscription's result, as its last validation (``status`` and the monitor read it): a
    difference with changes pending either way is inconclusive (the next merge may deliver it)."""
    prows = {p.name: p.pubid for p in store.select(pub, PublicationRow)}
    for s in out.subscriptions:
        if s.kind != "merge" or s.error is not None or s.publication not in prows:
            continue
        result = validations.PASSED if s.ok else validations.INCONCLUSIVE if s.pending else validations.FAILED
        differs = [f"{a.article} ({a.publisher_rows} row(s) at the publisher, {a.subscriber_rows} there"
                   + (", other values" if a.publisher_rows == a.subscriber_rows else "") + ")"
                   for a in s.articles if not a.ok]
        message = ("differs: " + "; ".join(differs)) if differs else ""
        if result == validations.INCONCLUSIVE:
            message = f"{message}; changes were pending either way"
        validations.record(pub, validations.Validation(s.subscription, prows[s.publication], result, "validate",
                                                       {a.article: [a.publisher_rows, a.subscriber_rows, a.ok]
                                                        for a in s.articles}, message))


def _selected(topology: Topology, publication: str | None, names: list[str] | None) -> list:
    if publication is not None:
        topology.publication(publication)            # an unknown one is named
    if names:
        subs = [topology.subscription(n) for n in names]
        for s in subs:
            if publication is not None and s.publication != publication:
                raise ConfigurationError(f"subscription {s.name} is not a subscription of {publication}", obj=s.name)
        return subs
    pubs = [publication] if publication else [p.name for p in topology.publications]
    return [s for p in pubs for s in topology.subscriptions_of(p)]


def _merge_checks(topology: Topology, pub: Replica, name: str, subs: list,
                  status: dict) -> tuple[list[SubscriptionValidation], list[_Check]]:
    """A merge publication: each subscription against its partition of the publisher's rows, matched by
    rowguid; its pending changes counted (a difference may be one the next merge delivers)."""
    prow = store.select_one(pub, PublicationRow, {"name": name})
    if prow is None:
        raise NotInitialized(f"publication {name} is not published; run 'sparksync setup'", obj=name)
    pending_log.flush(pub)
    pubid = prow.pubid
    articles = published_articles(pub, pubid)
    scheme = scheme_of(articles)
    groups = {p.partition_id: p for p in partitions_of(pub, pubid)}
    registered = {r.name: r for r in store.select(pub, SubscriptionRow, {"pubid": pubid})}
    pending = {s["name"]: s for s in status["subscriptions"] if s.get("publication") == name}
    targets: list[_Target] = []
    results = []
    for s in subs:
        res = SubscriptionValidation(s.name, name)
        results.append(res)
        r = registered.get(s.name)
        if r is None or not r.active:
            res.error = f"subscription {s.name} is not initialized; run 'sparksync setup'"
            continue
        st = pending.get(s.name, {})
        res.pending_upload, res.pending_download = st.get("pending_upload"), st.get("pending_download")
        params = None
        if scheme.filtered and r.partition_id is not None:
            params = groups[r.partition_id].params
            res.partition = ", ".join(f"{k} = {v!r}" for k, v in params.items() if v is not None) or "(none)"
        url = topology.subscriber_url(s)
        try:
            with connect(url, s.name) as sub:
                store.require_metadata(sub)
                pending_log.flush(sub)        # rows inserted here a moment ago have their rowguids
                # each article's rows with their rowguids, as this replica keeps them
                tables: dict[str, TableName | str] = {a.name: identity.rows_sql(sub.dialect, tracked_article(a))
                                                      for a in published_articles(sub, pubid)}
        except SparksyncError as e:
            res.error = e.message
            continue
        targets.append(_Target(res, url, params, tables))
    checks = []
    for a in articles:
        art = tracked_article(a)
        for t in targets:
            if a.name not in t.tables:
                t.result.error = (f"article {a.name} is not published at {t.result.subscription}; "
                                  "run 'sparksync setup'")
        checks.append(_Check(a.name, list(art.info.columns), list(art.info.primary_key), art.rowguid_column,
                             functools.partial(_partition_rows, pub, scheme, art, a.name), targets))
    return results, checks


def _transactional_checks(topology: Topology, pub: Replica, name: str, subs: list,
                          status: dict) -> tuple[list[SubscriptionValidation], list[_Check]]:
    """A transactional publication: each active subscription against the publisher's published rows
    (row filter) and columns (column filter), matched by primary key."""
    tx = status.get("transactional") or {"publications": [], "subscriptions": []}
    unread = sum(int(x.get("log_rows") or 0) for x in tx["publications"] if x.get("name") == name)
    waiting = {x["name"]: x.get("pending_transactions") for x in tx["subscriptions"]}
    with connect(topology.distributor_url, "distributor") as dist:
        p = dst.require_publication(dist, name)
        active = {x.subscription for x in dst.subscriptions(dist, p.publication_id) if x.active}
    articles = [a for a in p.articles if a.active]
    targets, results = [], []
    for s in subs:
        res = SubscriptionValidation(s.name, name, kind="transactional")
        results.append(res)
        if s.name not in active:
            res.error = f"subscription {s.name} is not initialized; run 'sparksync setup'"
            continue
        # transactions not delivered yet: queued at the distributor, or still in the publisher's capture log
        res.pending_upload, res.pending_download = 0, int(waiting.get(s.name) or 0) + unread
        url = topology.subscriber_url(s)
        d = dialect_for_url(url)
        targets.append(_Target(res, url, None, {a.name: d.destination_table(TableName(a.source_schema,
                                                                                         a.source_table))
                                                for a in articles}))
    checks = []
    for a in articles:
        info = from_table_dict(a.table_schema)
        where = ""
        if a.filter:
            where = " WHERE " + parse_filter(a.filter, info.column_names, a.name).sql_for(
                pub.dialect.capabilities.sql, info.columns)
        d = pub.dialect
        sql = (f"SELECT {', '.join(d.quote(c.name) for c in info.columns)} FROM "
               f"{d.table_sql(TableName(a.source_schema, a.source_table))}{where}")
        checks.append(_Check(a.name, list(info.columns), list(info.primary_key), None,
                             functools.partial(_same_rows, sql), targets))
    return results, checks


def _same_rows(sql: str, _target: _Target) -> str:
    """Every transactional subscription holds the same rows: one query for all."""
    return sql


def _compare(topology: Topology, pub: Replica, checks: list[_Check], checksum: bool, spark_factory,
             report: Reporter = silent) -> None:
    for c in checks:
        c.targets = [t for t in c.targets if t.result.error is None]
    checks = [c for c in checks if c.targets]
    if not checksum:
        _counts(pub, checks)
        return
    try:
        _checksums(spark_factory(), topology, checks, report)
    except SparksyncError as e:
        for t in {id(t): t for c in checks for t in c.targets}.values():
            t.result.error = e.message


def _partition_rows(pub: Replica, scheme: PartitionScheme, art: TrackedArticle, name: str, target: _Target) -> str:
    """The publisher's rows of article ``name`` a merge subscription should hold: its partition's."""
    return _publisher_sql(pub, scheme, art, name, target.params)


def _publisher_sql(pub: Replica, scheme: PartitionScheme, art: TrackedArticle, name: str,
                   params: dict[str, str | None] | None) -> str:
    d = pub.dialect
    cols = [c.name for c in art.info.columns]
    if params is not None and scheme.articles[name].filtered:
        return scheme.members_sql(d, name, cols, params, identity.rows_sql(d, art))
    return f"SELECT {', '.join(d.quote(c) for c in cols)} FROM {identity.rows_sql(d, art)}"


def _counts(pub: Replica, checks: list[_Check]) -> None:
    """Row counts: the publisher's once per article and partition, each subscriber's over one
    connection (an unreachable one is its own error)."""
    expected: dict[tuple[int, Any], int] = {}
    targets = {id(t): t for c in checks for t in c.targets}
    for t in targets.values():
        mine = [(j, c) for j, c in enumerate(checks) if any(x is t for x in c.targets)]
        key = tuple(sorted(t.params.items())) if t.params is not None else None
        for j, c in mine:
            if (j, key) not in expected:
                expected[(j, key)] = int(pub.scalar(f"SELECT count(*) FROM ({c.publisher_sql(t)}) AS x") or 0)
        try:
            with connect(t.url, t.result.subscription) as sub:
                found = [int(sub.scalar(f"SELECT count(*) FROM {_relation(sub.dialect, t.tables[c.article])} AS x")
                             or 0)
                         for _, c in mine]
        except SparksyncError as e:
            t.result.error = e.message
            continue
        t.result.articles += [ArticleValidation(c.article, expected[(j, key)], n) for (j, c), n in zip(mine, found)]


def _relation(d, table: TableName | str) -> str:
    return table if isinstance(table, str) else d.table_sql(table)


def _side_reads(topology: Topology, j: int, c: _Check, side_of: dict[int, int]) -> tuple[list[SideRead], list]:
    """Article ``j``'s reads: the publisher once per partition of the targets (negative sides), each
    subscriber (side ``side_of[id(target)]``); and the (subscriber side, publisher side) pairs."""
    cols = [[x.name, x.type.to_dict()] for x in c.columns]
    reads: list[SideRead] = []
    pub_side: dict[Any, int] = {}
    pairs = []
    for t in c.targets:
        key = tuple(sorted(t.params.items())) if t.params is not None else None
        if key not in pub_side:
            pub_side[key] = -1 - len(pub_side)
            reads.append(SideRead(j, pub_side[key], c.article, topology.publisher_url, c.publisher_sql(t),
                                  topology.publisher.name, cols, c.primary_key, c.identity))
        d = dialect_for_url(t.url)
        select = ", ".join(d.quote(x.name) for x in c.columns)
        side = side_of[id(t)]
        sql = f"SELECT {select} FROM {_relation(d, t.tables[c.article])} AS x"
        reads.append(SideRead(j, side, c.article, t.url, sql, t.result.subscription, cols, c.primary_key, c.identity))
        pairs.append((side, pub_side[key]))
    return reads, pairs


def _checksums(spark, topology: Topology, work: list[_Check], report: Reporter = silent) -> None:
    """Checksums and differing rows of every article of ``work`` (every publication validated) for its
    targets: every side's rows read once and kept (:mod:`.validation_read`), then a Spark job per
    result (the reads that failed, the sums, the differing rows), each subscriber's rows joined (full
    outer, on article and rowguid or key) with the publisher's rows of its partition."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not work:
        return
    side_of: dict[int, int] = {}
    for c in work:
        for t in c.targets:
            side_of.setdefault(id(t), len(side_of))
    reads, pairs = [], []
    for j, c in enumerate(work):
        art_reads, art_pairs = _side_reads(topology, j, c, side_of)
        reads += art_reads
        pairs += [(j, sub, pside) for sub, pside in art_pairs]
    tasks = len(tasks_of(reads))
    report(f"checksums: reading {len(reads)} article cop{'y' if len(reads) == 1 else 'ies'} from "
           f"{len({r.url for r in reads})} database(s) in {tasks} Spark task(s)")
    # read once (the two results below would each read every replica again), released after
    read = read_frame(spark, reads).select(
        "a", SIDE, READ_ERROR, "k", F.xxhash64("row").alias("h"), "pk").persist(StorageLevel.MEMORY_AND_DISK)
    try:
        failed = {(int(r["a"]), int(r[SIDE])): r[READ_ERROR] for r in
                  read.where(F.col(READ_ERROR).isNotNull()).select("a", SIDE, READ_ERROR).collect()}
        report(f"checksums: read{f' ({len(failed)} read(s) failed)' if failed else ''}; comparing each "
               "subscriber with its partition of the publisher's rows")
        hashed = read.where(F.col(READ_ERROR).isNull()) if failed else read
        pair_df = spark.createDataFrame(pairs, "pa INT, sub INT, pub INT")
        expected = hashed.join(F.broadcast(pair_df), (hashed["a"] == pair_df["pa"]) & (hashed[SIDE] == pair_df["pub"])) \
            .select(hashed["a"], F.col("sub"), F.col("k"), F.col("h").alias("eh"), F.col("pk").alias("epk"))
        actual = hashed.where(F.col(SIDE) >= 0).select(F.col("a"), F.col(SIDE).alias("sub"), F.col("k"),
                                                       F.col("h").alias("ah"), F.col("pk").alias("apk"))
        joined = expected.join(actual, ["a", "sub", "k"], "full_outer")
        dec = "decimal(20,0)"
        sums = {(int(r["a"]), int(r["sub"])): r for r in joined.groupBy("a", "sub").agg(
            F.count("eh").alias("en"), F.count("ah").alias("an"),
            F.sum(F.col("eh").cast(dec)).alias("es"), F.sum(F.col("ah").cast(dec)).alias("as_")).collect()}
        kind = (F.when(F.col("ah").isNull(), F.lit(MISSING)).when(F.col("eh").isNull(), F.lit(EXTRA))
                .otherwise(F.lit(CHANGED)))
        ranked = Window.partitionBy("a", "sub").orderBy("kind", "k")
        diffs = (joined.where(F.col("eh").isNull() | F.col("ah").isNull() | (F.col("eh") != F.col("ah")))
                 .select("a", "sub", "k", kind.alias("kind"), F.coalesce("epk", "apk").alias("pk"))
                 .withColumn("n", F.row_number().over(ranked)).where(F.col("n") <= MAX_LISTED + 1).collect())
    finally:
        read.unpersist()
    found: dict[tuple[int, int], list[RowDifference]] = {}
    for r in sorted(diffs, key=lambda r: (r["a"], r["sub"], r["n"])):
        matched_by_rowguid = work[int(r["a"])].identity is not None
        found.setdefault((int(r["a"]), int(r["sub"])), []).append(
            RowDifference(r["kind"], r["k"] if matched_by_rowguid else "", _key_text(work[int(r["a"])], r["pk"])))
    pub_side_of = {(j, sub): pside for j, sub, pside in pairs}
    for j, c in enumerate(work):
        name = c.article
        for t in c.targets:
            side = side_of[id(t)]
            error = failed.get((j, side)) or failed.get((j, pub_side_of[(j, side)]))
            if error is not None:          # this side's rows, or its partition's at the publisher: unread
                t.result.error = t.result.error or error
                continue
            s = sums.get((j, side))
            rows = found.get((j, side_of[id(t)]), [])
            t.result.articles.append(ArticleValidation(
                name, int(s["en"]) if s else 0, int(s["an"]) if s else 0,
                str(s["es"] if s and s["es"] is not None else 0), str(s["as_"] if s and s["as_"] is not None else 0),
                rows[:MAX_LISTED], len(rows) > MAX_LISTED))


def _key_text(c: _Check, pk: str | None) -> str:
    """'OrderID=100' from a row's encoded key."""
    kinds = {x.name: x.type.kind for x in c.columns}
    values: list[Any] = [int(v) if v is not None and kinds[k] in (Kind.SMALLINT, Kind.INTEGER, Kind.BIGINT) else v
                         for k, v in zip(c.primary_key, decode(pk))]
    return row_key(c.primary_key, c.primary_key, values) if pk else ""


# -- repair -----------------------------------------------------------------------------------------


