"""Enumeration: the reads of a session's changes, planned on the driver. Each replica's changes in a range of
generations (per article, cut into ranges every core can read), the rows that left a partition, and the
failed changes read again; and the generation batches they are applied in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sparksync.dialects.replica import Replica
from sparksync.merge.partitions.evaluation import member_sql, partition_generations
from sparksync.merge.partitions.scheme import PartitionScheme
from sparksync.merge.partitions.setupbelongs import belongs_reads, not_belongs_read
from sparksync.merge.session.changes import (
    ALL_PARTITIONS,
    COMPENSATING_COLV,
    OP_REMOVE,
    REALIGN_GENERATION,
    REMOVE_GENERATION,
    RETRY_GENERATION,
    change_read,
)
from sparksync.merge.session.plan import BatchInfo
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.articles import published_articles
from sparksync.merge.tracking.generations import generation_rows
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import ArticleRow, FailedChangeRow
from sparksync.spark.partitioning import split_ranges
from sparksync.spark.reads import ReadPartition

RETRY_CHUNK = 1000            # failed changes re-read per partition (rowguids bound in one IN list)

def _compensating(t: str) -> str:
    """A delete's column versions, read from its tombstone (``t``: its alias and a dot): the compensating delete's
    marker (``changes.COMPENSATING_COLV``), else none."""
    return f"CASE WHEN {t}type = 6 THEN '{COMPENSATING_COLV}' END"


Key = tuple[int, str]     # (tablenick, rowguid): the order of a generation's changes (keyset enumeration)
KeyCut = Callable[[int, list[int]], list[Key | None]]    # (generation, ranks) -> the keys at those ranks


@dataclass(frozen=True)
class KeyRange:
    """The changes of ``generation`` whose key is in (``after``, ``upto``] (None: no bound on that side)
    go in batch ``seq``: a generation bigger than a batch is cut by key, not renumbered."""

    generation: int
    after: Key | None
    upto: Key | None
    seq: int


def make_batches(generations: list[dict], start: int, bound: int, per_batch: int, source: str,
                 source_nick: int) -> tuple[list[BatchInfo], dict[int, int]]:
    """Generation batches of at most ``per_batch`` whole generations covering (start, bound].

    Returns the batches and generation -> batch number. The last batch's upper bound is ``bound``,
    so the watermark passes generations the partner already had.
    """
    batches, where, _ = plan_batches(generations, start, bound, per_batch, source, source_nick)
    return batches, where


def plan_batches(generations: list[dict], start: int, bound: int, per_batch: int, source: str, source_nick: int,
                 threshold: int = 0, cut: KeyCut | None = None,
                 ) -> tuple[list[BatchInfo], dict[int, int], list[KeyRange]]:
    """Batches covering (start, bound] of at most ``per_batch`` units, a unit being a generation or, with
    ``threshold``, ``threshold`` changes of a bigger one (generation leveling without renumbering: a
    generation of 100,000 changes is 100 units). A batch boundary that falls inside a generation cuts it
    by key: ``cut(generation, ranks)`` gives the key of the change at each 1-based rank of the
    generation's (tablenick, rowguid) order (None past its end).

    Returns the batches, generation -> batch for generations in one batch, and the key ranges of the
    generations cut across batches. A batch that ends inside a generation records the generation before
    it as its watermark (``hi``) and is applied until that generation is wholly received (``ends_within``);
    the last batch's upper bound is ``bound``, so the watermark passes generations the partner already had.
    """
    if bound <= start:
        return [], {}, []
    units: list[tuple[dict, int, int]] = []          # (generation row, unit index in it, its units)
    for g in generations:
        n = int(g.get("changecount") or 0)
        k = -(-n // threshold) if threshold and n > threshold else 1
        units += [(g, i, k) for i in range(k)]
    chunks = [units[i:i + per_batch] for i in range(0, len(units), per_batch)] or [[]]
    batches: list[BatchInfo] = []
    where: dict[int, int] = {}
    cuts: dict[int, list[tuple[int, int]]] = {}      # generation -> (rank after which a batch ends, that batch)
    lo = start
    for k, chunk in enumerate(chunks):
        ends_within = 0
        if k == len(chunks) - 1:
            hi = bound
        else:
            g, i, n = chunk[-1]
            hi = int(g["generation"]) if i == n - 1 else int(g["generation"]) - 1
            if i < n - 1:
                ends_within = int(g["generation"])
                cuts.setdefault(ends_within, []).append(((i + 1) * threshold, k))
        gens = list({int(g["generation"]): g for g, _, _ in chunk}.values())
        nicks = sorted({int(x) for g in gens for x in (g["nicknames"] or [])})
        batches.append(BatchInfo(source, source_nick, k, lo, max(hi, lo), nicks, ends_within=ends_within))
        for g, i, n in chunk:
            if n == 1 or (i == n - 1 and int(g["generation"]) not in cuts):
                where[int(g["generation"])] = k
            elif i == n - 1:                       # the last part of a generation cut before
                cuts[int(g["generation"])].append((0, k))
        lo = max(hi, lo)
    ranges: list[KeyRange] = []
    for gen, ends in cuts.items():
        assert cut is not None, "a generation is cut by key only with a cut function"
        ranks = [r for r, _ in ends if r]
        keys = cut(gen, ranks)
        after: Key | None = None
        for (_, seq), key in zip(ends, [*keys, None]):
            ranges.append(KeyRange(gen, after, key, seq))
            if key is None:     # its end (or fewer changes than counted at closing): the later batches get none
                break
            after = key
    return batches, where, ranges


def keyset_cut(replica: Replica) -> KeyCut:
    """``plan_batches``' cut for ``replica``: the keys at the given ranks of a generation's changes (its
    contents and tombstone rows in (tablenick, rowguid) order; a row is in one of them, not both)."""
    contents, tomb, p = replica.meta("MSmerge_contents"), replica.meta("MSmerge_tombstone"), replica.p
    known: dict[tuple[int, int], Key | None] = {}     # every link of a source cuts its generations alike

    def cut(generation: int, ranks: list[int]) -> list[Key | None]:
        wanted = [r for r in ranks if (generation, r) not in known]
        if wanted:
            found = _keys_at(generation, wanted)
            known.update({(generation, r): found.get(r) for r in wanted})
        return [known[(generation, r)] for r in ranks]

    def _keys_at(generation: int, ranks: list[int]) -> dict[int, Key]:
        return {int(n): (int(nick), str(guid)) for n, nick, guid in replica.query(
            f"SELECT n, tablenick, rowguid FROM (SELECT tablenick, rowguid, row_number() OVER "
            f"(ORDER BY tablenick, rowguid) AS n FROM (SELECT tablenick, rowguid FROM {contents} WHERE generation = {p} "
            f"UNION ALL SELECT tablenick, rowguid FROM {tomb} WHERE generation = {p}) AS u) AS x "
            f"WHERE n IN ({', '.join(str(int(r)) for r in ranks)})", [generation, generation])}
    return cut


@dataclass
class LinkPlan:
    """One link's part of a direction (a source to one destination): the source's generations the
    destination gets, their batches, and which batch each generation's changes go in (``where``: the
    changes sent again, the rows that left the destination's partition and SetupBelongs realignments
    under their own generations, when the link has them)."""

    generations: list[dict]
    batches: list[BatchInfo]
    where: dict[int, int]
    ranges: list[KeyRange] = field(default_factory=list)   # generations cut across batches, by key


def plan_link(source: Replica, pubid: str, source_name: str, source_nick: int, dest_nickname: int,
              dest_partition: int, start: int, bound: int, per_batch: int, partitions: PartitionRead | None,
              retry: bool = False, threshold: int = 0,
              cut: KeyCut | None = None) -> LinkPlan:
    """The source's closed generations in (start, bound] that the destination (``dest_nickname``) does not
    already have, of its partition (a precomputed filtered publication's generation mappings), cut into
    batches of ``per_batch`` generations (with ``threshold``: of ``per_batch`` units of ``threshold``
    changes, a big generation cut by key, ``plan_batches``; ``cut``: by default ``keyset_cut(source)``);
    ``retry``: changes that failed at the destination are sent again, in the first batch (one batch of
    no generations when there are no others). The merge agent
    plans each link of a direction with it, and the web door each device's download."""
    gens = [g for g in generation_rows(source, start, bound) if dest_nickname not in (g["nicknames"] or [])]
    if partitions is not None and partitions.precomputed and dest_partition != ALL_PARTITIONS:
        gens = generations_of_partition(source, pubid, dest_partition, start, gens, partitions.evaluated)
    batches, where, ranges = plan_batches(gens, start, bound, per_batch, source_name, source_nick, threshold,
                                          cut or (keyset_cut(source) if threshold else None))
    if retry:
        if not batches:
            batches = [BatchInfo(source_name, source_nick, 0, start, start, [])]
        batches[0].retry = True
        where[RETRY_GENERATION] = batches[0].seq
    if partitions is not None and dest_partition != ALL_PARTITIONS and batches:
        # rows that left its partition: removed in its first batch, whatever generations it has
        where[REMOVE_GENERATION] = batches[0].seq
        if partitions.at_sync:           # descendants of changed rows: after their parents, last batch
            where[REALIGN_GENERATION] = batches[-1].seq
    return LinkPlan(gens, batches, where, ranges)


def min_watermark(a: int | None, b: int | None) -> int:
    vals = [v for v in (a, b) if v is not None]
    return min(vals) if vals else 0


def change_reads(replica_url: str, label: str, replica: Replica, articles: list[ArticleRow], source: str,
                  source_nick: int, lo: int, hi: int, parts: int = 1,
                  partitions: PartitionRead | None = None) -> list[ReadPartition]:
    """Partitions reading one replica's changes in generations (lo, hi]: per article (``articles``: the
    replica's ``published_articles`` rows), upserts and
    deletes, each cut into up to ``parts`` generation ranges of about the same size (so every core
    reads, ``split_ranges``); a partition with nothing to read is left out (each one costs a Spark task).
    ``partitions`` (a filtered publication's download): a filtered article's upserts are read once per
    partition of the run they belong to (current partition mappings), its deletes only for the
    partitions the row was in (past partition mappings)."""
    d = replica.dialect
    p = d.capabilities.paramstyle
    contents, tomb = replica.meta("MSmerge_contents"), replica.meta("MSmerge_tombstone")
    current, past = replica.meta("MSmerge_current_partition_mappings"), replica.meta("MSmerge_past_partition_mappings")

    def counts(table: str, nick: int) -> list[tuple[int, int]]:
        return [(int(g), int(n)) for g, n in replica.query(
            f"SELECT generation, count(*) FROM {table} WHERE tablenick = {int(nick)} AND generation > {p} "
            f"AND generation <= {p} GROUP BY generation ORDER BY generation", [lo, hi])]

    out = []
    for a in articles:
        art = tracked_article(a)
        cols = [[c.name, c.type.to_dict()] for c in art.info.columns]
        select = ", ".join(identity.column_sql(d, art, "t", c.name) for c in art.info.columns)
        base = {"source": source, "source_nick": source_nick, "tablenick": art.nickname,
                "key": list(art.info.primary_key)}
        filtered = partitions is not None and art.nickname in partitions.filtered
        if filtered and partitions is not None and art.nickname in partitions.at_sync:
            # evaluated at sync time: upserts are read by setupbelongs.belongs_reads; deletes go to every subscriber
            deletes = counts(tomb, art.nickname)
            for a_lo, a_hi in (split_ranges(deletes, lo, hi, parts) if deletes else []):
                out.append(change_read(
                    replica_url, f"SELECT generation, rowguid, lineage, {_compensating('')} FROM {tomb} "
                    f"WHERE tablenick = "
                    f"{int(art.nickname)} AND generation > {p} AND generation <= {p}", [a_lo, a_hi], [],
                    f"{label}/{a.name} deletes", {**base, "op": "delete"}))
            continue
        upserts = counts(contents, art.nickname)
        mapped, mapped_del, part_col = "", "", ""
        if filtered:
            assert partitions is not None
            ids = partitions.in_list()
            mapped = (f"JOIN {current} cm ON cm.tablenick = c.tablenick AND cm.rowguid = c.rowguid "
                      f"AND cm.partition_id IN ({ids}) ")
            # a delete goes to every partition of the run the row was ever in (not only the one it left
            # in the tombstone's generation: a delete that won a conflict later is written again)
            mapped_del = (f"JOIN {past} pm ON pm.tablenick = t.tablenick AND pm.rowguid = t.rowguid "
                          f"AND pm.partition_id IN ({ids}) ")
            part_col = ", cm.partition_id"
            base = {**base, "partitioned": True}
        for a_lo, a_hi in (split_ranges(upserts, lo, hi, parts) if upserts else []):
            out.append(change_read(
                replica_url,
                f"SELECT c.generation, c.rowguid, c.lineage, c.colv{part_col}, {select} FROM {contents} c "
                f"{identity.join_rows(d, art, 't', 'c.rowguid')} {mapped}"
                f"WHERE c.tablenick = {int(art.nickname)} AND c.generation > {p} AND c.generation <= {p}",
                [a_lo, a_hi], cols, f"{label}/{a.name} changes", {**base, "op": "upsert"}))
        deletes = counts(tomb, art.nickname)
        for a_lo, a_hi in (split_ranges(deletes, lo, hi, parts) if deletes else []):
            out.append(change_read(
                replica_url,
                f"SELECT {'DISTINCT ' if filtered else ''}t.generation, t.rowguid, t.lineage, "
                f"{_compensating('t.')}{part_col.replace('cm.', 'pm.')} FROM {tomb} t "
                f"{mapped_del}WHERE t.tablenick = {int(art.nickname)} AND t.generation > {p} AND t.generation <= {p}",
                [a_lo, a_hi], [], f"{label}/{a.name} deletes", {**base, "op": "delete"}))
    return out


@dataclass(frozen=True)
class PartitionRead:
    """What a filtered publication's download reads: the partitions of the run's subscriptions, the
    nicknames of the filtered articles, and how membership is known: the partition mappings
    (precomputed) or evaluated by the reads themselves (``at_sync``: every filtered article with
    SetupBelongs, those with partition_options = 3 otherwise; ``setupbelongs.py``)."""

    ids: tuple[int, ...]
    filtered: frozenset[int]
    precomputed: bool = True
    scheme: PartitionScheme | None = None
    at_sync: frozenset[int] = frozenset()     # filtered articles evaluated at sync time (no mappings)
    evaluated: int = 0                        # the highest generation whose partition mappings are made

    def in_list(self) -> str:
        return ", ".join(str(int(i)) for i in self.ids)


def removal_reads(replica_url: str, label: str, replica: Replica, articles: list[ArticleRow], source: str,
                   source_nick: int, lo: int, hi: int, partitions: PartitionRead) -> list[ReadPartition]:
    """Rows that left a partition of the run in generations (lo, hi] and are in it no more (past
    mappings without a current one; deleted rows go as deletes): removed at that partition's
    subscribers (``OP_REMOVE``). Not subject to the generations a subscriber already has: a row a
    subscriber changed out of its partition is removed from it. SetupBelongs: the belongs and
    not-belongs reads of ``setupbelongs.py`` instead."""
    p = replica.p
    current, past = replica.meta("MSmerge_current_partition_mappings"), replica.meta("MSmerge_past_partition_mappings")
    tomb = replica.meta("MSmerge_tombstone")
    by_name = {a.name: a for a in articles}
    out = []
    for a in articles:
        nick = a.nickname
        if nick not in partitions.filtered:
            continue
        if nick in partitions.at_sync:
            assert partitions.scheme is not None
            base = {"source": source, "source_nick": source_nick, "tablenick": nick,
                    "key": list(tracked_article(a).info.primary_key)}
            out += belongs_reads(replica_url, label, replica, partitions.scheme, a, by_name, base,
                                 partitions.in_list(), lo, hi)
            out.append(not_belongs_read(replica_url, label, replica, partitions.scheme, a, by_name, base,
                                        partitions.in_list(), lo, hi))
            continue
        base = {"source": source, "source_nick": source_nick, "tablenick": nick, "op": OP_REMOVE,
                "generation": REMOVE_GENERATION, "partitioned": True}
        out.append(change_read(
            replica_url,
            f"SELECT DISTINCT pm.generation, pm.rowguid, '{{}}', NULL, pm.partition_id FROM {past} pm "
            f"WHERE pm.tablenick = {nick} AND pm.generation > {p} AND pm.generation <= {p} "
            f"AND pm.partition_id IN ({partitions.in_list()}) "
            f"AND NOT EXISTS (SELECT 1 FROM {current} cm WHERE cm.tablenick = pm.tablenick "
            f"AND cm.rowguid = pm.rowguid AND cm.partition_id = pm.partition_id) "
            f"AND NOT EXISTS (SELECT 1 FROM {tomb} t WHERE t.tablenick = pm.tablenick AND t.rowguid = pm.rowguid)",
            [lo, hi], [], f"{label}/{a.name} partition removals", base))
    return out


def generations_of_partition(replica: Replica, pubid: str, partition_id: int, start: int, gens: list[dict],
                           evaluated: int) -> list[dict]:
    """Of ``gens``, the ones with changes for the partition (generation partition mappings); a
    generation above ``evaluated`` (not evaluated yet) is kept."""
    if not gens:
        return gens
    mine = partition_generations(replica, pubid, partition_id, start, int(gens[-1]["generation"]))
    return [g for g in gens if int(g["generation"]) in mine or int(g["generation"]) > evaluated]


def retry_reads(destination: Replica, dest_name: str, source: Replica, source_url: str, label: str, pubid: str,
                 source_name: str, source_nick: int, start: int, partition: int | None = None,
                 partitions: PartitionRead | None = None) -> list[ReadPartition]:
    """Changes that failed at ``destination`` before and sit in generations it has passed: read them
    again from the source, for that destination only (newer ones come with the normal batches); a row
    of a filtered article only while it is in the destination's ``partition`` (by its mappings, or
    evaluated for an article evaluated at sync time)."""
    failed = store.select(destination, FailedChangeRow, {"source_nickname": source_nick})
    return retries_of([(f.tablenick, f.rowguid) for f in failed], dest_name, source, source_url, label, pubid,
                      source_name, source_nick, start, partition, partitions)


def retries_of(failed: list[tuple[int, str]], dest_name: str, source: Replica, source_url: str, label: str,
               pubid: str, source_name: str, source_nick: int, start: int, partition: int | None = None,
               partitions: PartitionRead | None = None, guarded: bool = False) -> list[ReadPartition]:
    """``retry_reads`` of the changes ``failed`` ((tablenick, rowguid) each) at a destination the source
    cannot open (a web device: it says which of the publisher's changes failed there, and the publisher
    which of the device's). ``guarded`` (what the destination lists is not trusted: the web door): a deleted
    row of a filtered article is read only if it was in the destination's partition (never where that
    cannot be known: membership evaluated at sync time), so a forged list learns nothing of other partitions."""
    if not failed:
        return []
    by_nick: dict[int, list[str]] = {}
    for nick, guid in failed:
        by_nick.setdefault(int(nick), []).append(str(guid))
    rows = {a.nickname: a for a in published_articles(source, pubid)}
    parts = []
    for nick, guids in by_nick.items():
        if nick not in rows:
            continue
        art = tracked_article(rows[nick])
        member = was_member = None
        if partitions is not None and partition is not None and nick in partitions.filtered:
            if nick in partitions.at_sync:
                assert partitions.scheme is not None
                member = member_sql(source, partitions.scheme, rows[nick], "c.rowguid", str(int(partition)))
                was_member = "1 = 0" if guarded else None    # a deleted row's membership cannot be evaluated
            else:
                member = (f"EXISTS (SELECT 1 FROM {source.meta('MSmerge_current_partition_mappings')} cm WHERE "
                          f"cm.tablenick = c.tablenick AND cm.rowguid = c.rowguid AND cm.partition_id = {int(partition)})")
                was_member = (f"EXISTS (SELECT 1 FROM {source.meta('MSmerge_past_partition_mappings')} pm WHERE "
                              f"pm.tablenick = t.tablenick AND pm.rowguid = t.rowguid AND pm.partition_id = "
                              f"{int(partition)})") if guarded else None
        base = {"source": source_name, "source_nick": source_nick, "tablenick": nick, "target": dest_name,
                "key": list(art.info.primary_key)}
        for i in range(0, len(guids), RETRY_CHUNK):   # a driver binds at most so many parameters
            parts += _retry_partitions(source, source_url, label, art, guids[i:i + RETRY_CHUNK], start, base, member,
                                       was_member)
    return parts


def _retry_partitions(source: Replica, source_url: str, label: str, art, guids: list[str], start: int,
                      base: dict, member: str | None = None, was_member: str | None = None) -> list[ReadPartition]:
    """The upserts and the deletes of ``guids`` (one article) at the source, in generations up to
    ``start``; ``member``: a condition on the contents row ``c`` an upsert must meet (its partition);
    ``was_member``: on the tombstone ``t`` a delete must meet (the row was in the partition): a row of
    another partition is read for nobody, whatever a destination lists as failed."""
    d = source.dialect
    p = d.capabilities.paramstyle
    nick = int(art.nickname)
    inlist = ", ".join([d.uuid_param()] * len(guids))
    cols = [[c.name, c.type.to_dict()] for c in art.info.columns]
    select = ", ".join(identity.column_sql(d, art, "t", c.name) for c in art.info.columns)
    return [
        change_read(
            source_url, f"SELECT c.generation, c.rowguid, c.lineage, c.colv, {select} "
            f"FROM {source.meta('MSmerge_contents')} c {identity.join_rows(d, art, 't', 'c.rowguid')} "
            f"WHERE c.tablenick = {nick} AND c.rowguid IN ({inlist}) AND c.generation <= {p}"
            + (f" AND {member}" if member else ""),
            [*guids, start], cols, f"{label}/{art.table} retries", {**base, "op": "upsert"}),
        change_read(
            source_url, f"SELECT t.generation, t.rowguid, t.lineage, {_compensating('t.')} "
            f"FROM {source.meta('MSmerge_tombstone')} t "
            f"WHERE t.tablenick = {nick} AND t.rowguid IN ({inlist}) AND t.generation <= {p}"
            + (f" AND {was_member}" if was_member else ""),
            [*guids, start], [], f"{label}/{art.table} retried deletes", {**base, "op": "delete"}),
    ]
