"""Validation of merge subscriptions (SQL Server's ``sp_validatemergesubscription``), and repair.

For each subscription and article, the rows the subscriber should hold (its partition of the
publisher's rows: every row of an unfiltered article) against the rows it holds:

* **row counts**, counted by each database;
* with ``checksum``, an order-independent **checksum** of the published columns, computed on Spark
  from both sides: one job reads, for every article, the publisher once per partition of the
  subscriptions being validated and every subscriber, hashes each row (``xxhash64`` of the values typed by the
  article's schema, so a SQLite and a PostgreSQL replica of the same data agree) and sums the hashes;
  a full outer join on the rowguid names the rows that differ: *missing* (at the publisher, in the
  partition, not at the subscriber), *extra* (at the subscriber only) and *changed*.

**Repair** (beyond SQL Server, which can only reinitialize): the rows that differ are written at the
subscriber from the publisher (publisher wins), as changes received from the publisher (never
uploaded back), and the extra rows removed with their metadata, in one transaction per subscriber;
parents before children. Only for a subscription with nothing pending either way (a difference may
otherwise be a change the next merge delivers).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from ..config import Topology
from ..dialects import connect, dialect_for_url
from ..dialects.replica import Replica
from ..errors import ConfigurationError, NotInitialized, ReplicaDamaged, SparksyncError
from ..metadata import store
from ..progress import Reporter, silent
from ..rows import row_key
from ..spark.datasource import ReadPartition, ReadPlan
from ..types import Kind, SqlType, arrow_converter
from .evaluation import partitions as partitions_of
from .generations import new_generation
from .partitions import PartitionScheme, scheme_of
from .tracking import TrackedArticle, agent_writes, published_articles, tracked_article, write_row_with_lineage

SIDE = "sparksync_side"
MAX_LISTED = 10_000          # differing rows collected per article (more: reinitialize)
MISSING, EXTRA, CHANGED = "missing", "extra", "changed"


class RepairRefused(SparksyncError):
    """A subscription cannot be repaired now (changes pending, too many differences)."""

    code = "repair_refused"


@dataclass
class RowDifference:
    kind: str                 # missing | extra | changed
    rowguid: str
    key: str                  # the row's primary key, e.g. id=4

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "rowguid": self.rowguid, "key": self.key}


@dataclass
class ArticleValidation:
    article: str
    publisher_rows: int
    subscriber_rows: int
    publisher_checksum: str | None = None       # decimal: the sum of the rows' hashes
    subscriber_checksum: str | None = None
    differences: list[RowDifference] = field(default_factory=list)
    more: bool = False                           # more rows differ than were listed

    @property
    def ok(self) -> bool:
        return (self.publisher_rows == self.subscriber_rows and self.publisher_checksum == self.subscriber_checksum
                and not self.differences)

    def count(self, kind: str) -> int:
        return sum(1 for d in self.differences if d.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        return {"article": self.article, "ok": self.ok, "publisher_rows": self.publisher_rows,
                "subscriber_rows": self.subscriber_rows, "publisher_checksum": self.publisher_checksum,
                "subscriber_checksum": self.subscriber_checksum,
                **{k: self.count(k) for k in (MISSING, EXTRA, CHANGED)},
                "differences": [d.to_dict() for d in self.differences], "more": self.more}


@dataclass
class SubscriptionValidation:
    subscription: str
    publication: str
    partition: str | None = None                 # its partition's parameters (filtered publications)
    articles: list[ArticleValidation] = field(default_factory=list)
    error: str | None = None                     # it could not be validated (unreachable, not initialized)
    pending_upload: int | None = None
    pending_download: int | None = None
    repaired: int = 0                            # rows written or removed by a repair

    @property
    def ok(self) -> bool:
        return self.error is None and all(a.ok for a in self.articles)

    @property
    def pending(self) -> bool:
        return bool(self.pending_upload) or bool(self.pending_download)

    def to_dict(self) -> dict[str, Any]:
        return {"subscription": self.subscription, "publication": self.publication, "ok": self.ok,
                "partition": self.partition, "error": self.error, "pending_upload": self.pending_upload,
                "pending_download": self.pending_download, "repaired": self.repaired,
                "articles": [a.to_dict() for a in self.articles]}


@dataclass
class ValidationReport:
    subscriptions: list[SubscriptionValidation] = field(default_factory=list)
    checksum: bool = False

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.subscriptions)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checksum": self.checksum,
                "subscriptions": [s.to_dict() for s in self.subscriptions]}


@dataclass
class _Target:
    """One subscription being validated: its replica, its partition, its articles' tables there."""

    result: SubscriptionValidation
    url: str
    nickname: int
    params: dict[str, str | None] | None         # None: every row (unfiltered publication)
    tables: dict[str, TrackedArticle] = field(default_factory=dict)


def validate(topology: Topology, spark_factory, publication: str | None = None,
             subscriptions: list[str] | None = None, checksum: bool = False,
             report: Reporter = silent) -> ValidationReport:
    """Validate the merge subscriptions of ``publication`` (or of every merge publication), or only
    the named ones. ``spark_factory`` is called only when checksums are computed."""
    subs = _selected(topology, publication, subscriptions)
    out = ValidationReport(checksum=checksum)
    spark_factory = functools.cache(spark_factory)        # one session, started when first needed
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        store.require_metadata(pub)
        for pub_name in dict.fromkeys(s.publication for s in subs):
            out.subscriptions += _publication(topology, pub, pub_name, [s for s in subs if s.publication == pub_name],
                                              checksum, spark_factory, report)
    return out


def _selected(topology: Topology, publication: str | None, names: list[str] | None) -> list:
    if publication is not None and topology.publication(publication).kind != "merge":
        raise ConfigurationError(f"publication {publication} is transactional: validate checks merge "
                                 "subscriptions (transactional replicas are compared by 'sparksync demo' and "
                                 "reinitialized by 'sparksync setup')", obj=publication)
    if names:
        subs = [topology.subscription(n) for n in names]
        for s in subs:
            if topology.publication(s.publication).kind != "merge":
                raise ConfigurationError(f"subscription {s.name} is transactional: validate checks merge "
                                         "subscriptions", obj=s.name)
            if publication is not None and s.publication != publication:
                raise ConfigurationError(f"subscription {s.name} is not a subscription of {publication}", obj=s.name)
        return subs
    pubs = [publication] if publication else [p.name for p in topology.publications_of_kind("merge")]
    return [s for p in pubs for s in topology.subscriptions_of(p)]


def _publication(topology: Topology, pub: Replica, name: str, subs: list, checksum: bool, spark_factory,
                 report: Reporter) -> list[SubscriptionValidation]:
    from ..status import gather_status

    prows = store.select_rows(pub, "sysmergepublications", {"name": name})
    if not prows:
        raise NotInitialized(f"publication {name} is not published; run 'sparksync setup'", obj=name)
    pubid = prows[0]["pubid"]
    articles = published_articles(pub, pubid)
    scheme = scheme_of(articles)
    groups = {p.partition_id: p for p in partitions_of(pub, pubid)}
    registered = {r["name"]: r for r in store.select_rows(pub, "sysmergesubscriptions", {"pubid": pubid})}
    pending = {s["name"]: s for s in gather_status(topology)["subscriptions"] if s.get("publication") == name}
    targets: list[_Target] = []
    results = []
    for s in subs:
        res = SubscriptionValidation(s.name, name)
        results.append(res)
        r = registered.get(s.name)
        if r is None or r["status"] != 1:
            res.error = f"subscription {s.name} is not initialized; run 'sparksync setup'"
            continue
        st = pending.get(s.name, {})
        res.pending_upload, res.pending_download = st.get("pending_upload"), st.get("pending_download")
        params = None
        if scheme.filtered and r.get("partition_id") is not None:
            part = groups[int(r["partition_id"])]
            params = part.params
            res.partition = ", ".join(f"{k} = {v!r}" for k, v in params.items() if v is not None) or "(none)"
        url = topology.resolve_url(s.database)
        try:
            with connect(url, s.name) as sub:
                store.require_metadata(sub)
                tables = {a["name"]: tracked_article(a) for a in published_articles(sub, pubid)}
        except SparksyncError as e:
            res.error = e.message
            continue
        targets.append(_Target(res, url, int(r["replnickname"]), params, tables))
    if not targets:
        return results
    report(f"validate {name}: {len(targets)} subscription(s), {len(articles)} article(s)"
           + (", with checksums (Spark)" if checksum else ", row counts"))
    work: list[tuple[TrackedArticle, str, list[_Target]]] = []
    for a in articles:
        missing = [t for t in targets if a["name"] not in t.tables]
        for t in missing:
            t.result.error = f"article {a['name']} is not published at {t.result.subscription}; run 'sparksync setup'"
        work.append((tracked_article(a), a["name"], [t for t in targets if t not in missing]))
    if not checksum:
        for art, article, live in work:
            try:
                _count_article(topology, pub, scheme, art, article, [t for t in live if t.result.error is None])
            except SparksyncError as e:
                for t in live:
                    t.result.error = f"article {article}: {e.message}"
        return results
    live_targets = [t for t in targets if t.result.error is None]
    work = [(art, article, [t for t in live if t in live_targets]) for art, article, live in work]
    try:
        _checksums(spark_factory(), topology, pub, scheme, [w for w in work if w[2]])
    except SparksyncError as e:
        for t in live_targets:
            t.result.error = e.message
    return results


def _publisher_sql(pub: Replica, scheme: PartitionScheme, art: TrackedArticle, name: str,
                   params: dict[str, str | None] | None) -> str:
    d = pub.dialect
    cols = [c.name for c in art.info.columns]
    if params is not None and scheme.articles[name].filtered:
        return scheme.members_sql(d, name, cols, params)
    return f"SELECT {', '.join(d.quote(c) for c in cols)} FROM {d.table_sql(art.table)}"


def _count_article(topology: Topology, pub: Replica, scheme: PartitionScheme, art: TrackedArticle, name: str,
                   targets: list[_Target]) -> None:
    counts: dict[Any, int] = {}
    for t in targets:
        key = tuple(sorted((t.params or {}).items())) if t.params is not None else None
        if key not in counts:
            counts[key] = int(pub.scalar(f"SELECT count(*) FROM ({_publisher_sql(pub, scheme, art, name, t.params)}) "
                                         f"AS x") or 0)
        try:
            with connect(t.url, t.result.subscription) as sub:
                n = int(sub.scalar(f"SELECT count(*) FROM {sub.dialect.table_sql(t.tables[name].table)}") or 0)
        except SparksyncError as e:
            t.result.error = e.message
            continue
        t.result.articles.append(ArticleValidation(name, counts[key], n))


def _hashed(spark, topology: Topology, pub: Replica, scheme: PartitionScheme, art: TrackedArticle, name: str,
            targets: list[_Target], side_of: dict[int, int]):
    """One article's rows from every side, as (side, k: rowguid, h: hash of the row, pk: its key as
    JSON): the publisher read once per partition of ``targets`` (negative sides), each subscriber
    (side ``side_of[id(target)]``). Returns the frame and the (subscriber side, publisher side) pairs."""
    from pyspark.sql import functions as F

    cols = list(art.info.columns)
    columns = [[SIDE, SqlType(Kind.INTEGER).to_dict()]] + [[c.name, c.type.to_dict()] for c in cols]
    reads: list[ReadPartition] = []
    pub_side: dict[Any, int] = {}
    pairs = []
    for t in targets:
        key = tuple(sorted(t.params.items())) if t.params is not None else None
        if key not in pub_side:
            pub_side[key] = -1 - len(pub_side)
            sql = _publisher_sql(pub, scheme, art, name, t.params)
            reads.append(ReadPartition(topology.publisher_url, f"SELECT {pub_side[key]} AS s, x.* FROM ({sql}) AS x",
                                       [], columns, label=topology.publisher.name, key=list(art.info.primary_key)))
        d = dialect_for_url(t.url)
        select = ", ".join(d.quote(c.name) for c in cols)
        side = side_of[id(t)]
        reads.append(ReadPartition(t.url, f"SELECT {side} AS s, {select} FROM {d.table_sql(t.tables[name].table)}",
                                   [], columns, label=t.result.subscription, key=list(art.info.primary_key)))
        pairs.append((side, pub_side[key]))
    plan = ReadPlan(reads)
    df = spark.read.format("sparksync").schema(plan.spark_schema()).option("plan", plan.to_json()).load()
    names = [f"c{k}" for k in range(len(cols))]           # positional: a column may be called anything
    df = df.toDF(SIDE, *names)
    at = {c.name: names[i] for i, c in enumerate(cols)}
    pk = F.to_json(F.struct(*[F.col(at[k]).alias(k) for k in art.info.primary_key]))
    return df.select(F.col(SIDE), F.col(at[art.rowguid_column]).cast("string").alias("k"),
                     F.xxhash64(*[F.col(n) for n in names]).alias("h"), pk.alias("pk")), pairs


def _checksums(spark, topology: Topology, pub: Replica, scheme: PartitionScheme,
               work: list[tuple[TrackedArticle, str, list[_Target]]]) -> None:
    """Checksums and differing rows of every article of ``work`` for its targets, in one Spark job per
    result (two): the articles' hashed rows in one frame, each subscriber's joined (full outer, on
    article and rowguid) with the publisher's rows of its partition."""
    from functools import reduce

    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not work:
        return
    side_of: dict[int, int] = {}
    for _, _, targets in work:
        for t in targets:
            side_of.setdefault(id(t), len(side_of))
    frames, pairs = [], []
    for j, (art, name, targets) in enumerate(work):
        frame, art_pairs = _hashed(spark, topology, pub, scheme, art, name, targets, side_of)
        frames.append(frame.withColumn("a", F.lit(j)))
        pairs += [(j, sub, pside) for sub, pside in art_pairs]
    hashed = reduce(lambda x, y: x.unionByName(y), frames)
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
    found: dict[tuple[int, int], list[RowDifference]] = {}
    for r in sorted(diffs, key=lambda r: (r["a"], r["sub"], r["n"])):
        found.setdefault((int(r["a"]), int(r["sub"])), []).append(RowDifference(r["kind"], r["k"], _key_text(r["pk"])))
    for j, (_, name, targets) in enumerate(work):
        for t in targets:
            s = sums.get((j, side_of[id(t)]))
            rows = found.get((j, side_of[id(t)]), [])
            t.result.articles.append(ArticleValidation(
                name, int(s["en"]) if s else 0, int(s["an"]) if s else 0,
                str(s["es"] if s and s["es"] is not None else 0), str(s["as_"] if s and s["as_"] is not None else 0),
                rows[:MAX_LISTED], len(rows) > MAX_LISTED))


def _key_text(pk_json: str | None) -> str:
    import json

    if not pk_json:
        return ""
    values = json.loads(pk_json)
    return row_key(list(values), list(values), list(values.values()))


# -- repair -----------------------------------------------------------------------------------------

def repair(topology: Topology, report_: ValidationReport, progress: Reporter = silent) -> ValidationReport:
    """Write the rows that differ at each subscriber of ``report_`` (a checksum validation) from the
    publisher; remove its extra rows. Returns ``report_`` with ``repaired`` counted."""
    if not report_.checksum:
        raise ConfigurationError("repair needs the rows that differ: validate with --checksum")
    todo = [s for s in report_.subscriptions if not s.ok and s.error is None]
    for s in todo:
        if s.pending:
            raise RepairRefused(f"subscription {s.subscription} has changes not merged yet ({s.pending_upload or 0} "
                                f"to upload, {s.pending_download or 0} to download): run 'sparksync merge' first, "
                                "then validate again", obj=s.subscription)
        if any(a.more for a in s.articles):
            raise RepairRefused(f"subscription {s.subscription}: more than {MAX_LISTED} rows of an article differ; "
                                "reinitialize it instead", obj=s.subscription)
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        for s in todo:
            progress(f"repair {s.subscription}: {sum(len(a.differences) for a in s.articles)} row(s)")
            s.repaired = _repair_one(topology, pub, s)
    return report_


def _repair_one(topology: Topology, pub: Replica, s: SubscriptionValidation) -> int:
    prow = store.select_rows(pub, "sysmergepublications", {"name": s.publication})[0]
    pubid = prow["pubid"]
    pub_articles = {a["name"]: a for a in published_articles(pub, pubid)}
    pub_nick = _nickname(pub)
    cfg = topology.subscription(s.subscription)
    done = 0
    with connect(topology.resolve_url(cfg.database), s.subscription) as sub:
        sub_articles = {a["name"]: tracked_article(a) for a in published_articles(sub, pubid)}
        sub_nick = _nickname(sub)
        order = sorted(s.articles, key=lambda a: int(pub_articles[a.article]["nickname"]))
        with sub.transaction(), agent_writes(sub):
            gen = new_generation(sub, 2, [pub_nick, sub_nick], pubid, pub_nick)
            for a in reversed(order):                     # children first: their parents may go
                extra = [d.rowguid for d in a.differences if d.kind == EXTRA]
                done += _remove(sub, sub_articles[a.article], extra)
            for a in order:                               # parents first
                art = tracked_article(pub_articles[a.article])
                for d in a.differences:
                    if d.kind == EXTRA:
                        continue
                    row, lineage, colv = _publisher_row(pub, art, d.rowguid)
                    if row is None:                       # deleted at the publisher since validation
                        done += _remove(sub, sub_articles[a.article], [d.rowguid])
                        continue
                    write_row_with_lineage(sub, sub_articles[a.article], row, lineage, gen, colv)
                    done += 1
            store.update_rows(sub, "MSmerge_genhistory", {"changecount": done}, {"generation": gen})
    return done


def _nickname(replica: Replica) -> int:
    ident = store.replica_identity(replica)
    if ident is None:
        raise ReplicaDamaged(f"{replica.label}: its replica identity is missing; run 'sparksync setup'",
                             obj=replica.label)
    return int(ident.nickname)


def _publisher_row(pub: Replica, art: TrackedArticle, rowguid: str) -> tuple[dict | None, dict, Any]:
    import json

    d = pub.dialect
    cols = list(art.info.columns)
    row = pub.query_one(f"SELECT {', '.join(d.quote(c.name) for c in cols)} FROM {d.table_sql(art.table)} "
                        f"WHERE {d.quote(art.rowguid_column)} = {d.uuid_param()}", [rowguid])
    if row is None:
        return None, {}, None
    meta = pub.query_one(f"SELECT lineage, colv FROM {pub.meta('MSmerge_contents')} WHERE tablenick = "
                         f"{int(art.nickname)} AND rowguid = {d.uuid_param()}", [rowguid])
    lineage = json.loads(meta[0]) if meta and isinstance(meta[0], str) else (meta[0] if meta and meta[0] else {})
    colv = (json.loads(meta[1]) if isinstance(meta[1], str) else meta[1]) if meta else None
    return {c.name: arrow_converter(c.type)(v) for c, v in zip(cols, row)}, lineage, colv


def _remove(sub: Replica, art: TrackedArticle, rowguids: list[str]) -> int:
    """Rows the subscriber should not hold: gone with their metadata (not a delete: nothing to upload)."""
    d, n = sub.dialect, 0
    for i in range(0, len(rowguids), 500):
        chunk = rowguids[i:i + 500]
        inlist = ", ".join([d.uuid_param()] * len(chunk))
        cur = sub.execute(f"DELETE FROM {d.table_sql(art.table)} WHERE {d.quote(art.rowguid_column)} IN ({inlist})",
                          chunk)
        n += max(getattr(cur, "rowcount", 0), 0)
        for table in ("MSmerge_contents", "MSmerge_tombstone", "MSmerge_failed_changes"):
            sub.execute(f"DELETE FROM {sub.meta(table)} WHERE tablenick = {int(art.nickname)} AND rowguid IN ({inlist})",
                        chunk)
    return n
