"""Partition evaluation with precomputed partitions (seed 002): which partitions the changed rows of a
filtered publication belong to, kept at the publisher and read by enumeration.

* ``MSmerge_partition_groups``: one row per partition (a distinct set of parameter values). A partition
  is made from the publication's ``partitions`` at setup, or when a subscription needs one
  (``ensure_partitions``); its mappings are computed then, for every row, in one statement per article.
* ``MSmerge_current_partition_mappings``: each row of a filtered article with the partitions it belongs to.
* ``MSmerge_past_partition_mappings``: each time a row left a partition, with the generation it left in.

``evaluate`` keeps them up to date, set-based, for the generations closed since the last evaluation
(``sysmergepublications.partitions_evaluated``), one article at a time in nickname order (parents
before children): a deleted row leaves its partitions; a changed row leaves the partitions whose
filter no longer keeps it and enters the ones that now do; a row a subscriber changed outside its own
partition leaves that partition (so the subscriber loses it at download, SQL Server's behaviour with
overlapping partitions): the rows a subscriber sends are mapped to its partition when they are
applied at the publisher (``batch._BatchApplier.held_by_source``), and leave it here like any other.
**Realignment**: the join-filter children of the rows whose membership changed are moved into one
new closed generation (with their own children, down the chain) and evaluated in the same pass, so a
parent and its whole subtree realign in one generation.

The filters are rendered with the parameters as columns of the partitions table (``partition_column``),
so one statement evaluates every partition at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sparksync import failpoints
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError
from sparksync.filters import partition_column
from sparksync.merge.partitions.scheme import PartitionScheme
from sparksync.merge.session.changes import ALL_PARTITIONS
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.generations import enumeration_bound, new_generation
from sparksync.merge.tracking.pending import flush
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata import store
from sparksync.metadata.records import (
    ArticleRow,
    GenerationRow,
    GenStatus,
    PartitionOptions,
    PublicationRow,
    Role,
    SubscriptionRow,
)
from sparksync.metadata.schema import JSON

PARTITION_ALIAS = "pg"
SETTINGS = ("host_name", "login")


def evaluated_at_sync(articles: list[ArticleRow], scheme: PartitionScheme, precomputed: bool) -> frozenset[int]:
    """Nicknames of the filtered articles whose membership is evaluated at sync time instead of kept in
    mappings: every filtered article with SetupBelongs (``precomputed`` False); with precomputed
    partitions, the ones with ``partition_options = 3`` (one subscription per partition: seed 002 uses
    no mapping tables for them) whose join-filter descendants have 3 too. An article with 3 above a
    child of another option (SQL Server's canonical device topology: employees by login, their
    customers and orders below) keeps mappings like option 2: a mapped child's membership is realigned
    from its parent's mappings."""
    filtered = {a.name: a for a in articles if scheme.articles[a.name].filtered}
    if not precomputed:
        return frozenset(a.nickname for a in filtered.values())
    mapped = {n for n, a in filtered.items() if a.partition_options is not PartitionOptions.NON_OVERLAPPING_SINGLE}
    grew = True
    while grew:                      # the parents of mapped articles are mapped, up every chain
        parents = {link.parent for n in mapped for link in scheme.articles[n].joins if link.parent in filtered}
        grew = not parents <= mapped
        mapped |= parents
    return frozenset(a.nickname for n, a in filtered.items() if n not in mapped)


class PartitionOverlap(ConfigurationError):
    """A row of a non-overlapping article (partition_options 2 or 3) belongs to two partitions."""

    code = "partition_overlap"


@dataclass(frozen=True)
class Partition:
    partition_id: int
    host_name: str | None
    login: str | None

    @property
    def params(self) -> dict[str, str | None]:
        return {"host_name": self.host_name, "login": self.login}

    def describe(self) -> str:
        return ", ".join(f"{k} = {v!r}" for k, v in self.params.items() if v is not None) or "(no parameters)"


@dataclass
class Evaluation:
    """What one ``evaluate`` did."""

    generations: tuple[int, int] = (0, 0)        # (after, upto]
    entered: int = 0                             # (row, partition) mappings added
    left: int = 0                                # ... and removed (rows that left a partition)
    realigned: int = 0                           # join-filter children moved into the realignment generation
    realignment_generation: int | None = None
    articles: list[str] = field(default_factory=list)


def partitions(replica: Replica, pubid: str) -> list[Partition]:
    return [Partition(int(r["partition_id"]), r["host_name"], r["login"])
            for r in store.select_rows(replica, "MSmerge_partition_groups", {"pubid": pubid},
                                       order_by=("partition_id",))]


def partition_values(scheme: PartitionScheme, host_name: str | None, login: str | None,
                     who: str) -> dict[str, str | None]:
    """The parameter values that identify a subscription's partition: only the settings the
    publication's filters read (a login is no part of a partition filtered by HOST_NAME() alone).
    A setting the filters read and the subscription does not give is an error naming it."""
    used = set().union(*(scheme.parameters(a) for a in scheme.articles))
    given = {"host_name": host_name, "login": login}
    missing = sorted(k for k in used if given[k] is None)
    if missing:
        fn = {"host_name": "HOST_NAME()", "login": "SUSER_SNAME()"}
        raise ConfigurationError(f"{who}: the publication's filters call "
                                 f"{', '.join(fn[k] for k in missing)}; give it {' and '.join(missing)}", obj=who)
    return {k: (given[k] if k in used else None) for k in SETTINGS}


def ensure_partitions(replica: Replica, pubid: str, scheme: PartitionScheme, articles: list[ArticleRow],
                      wanted: list[dict[str, str | None]], mappings: bool = True) -> list[Partition]:
    """The partitions of ``wanted`` (parameter values from ``partition_values``), in that order; the
    ones that do not exist yet are made, and (``mappings``: precomputed partitions) their mappings
    computed for every row in one statement per article. Inside a transaction at the publisher."""
    flush(replica)                  # the mappings are computed from the tracking metadata
    existing = {tuple(p.params.items()): p for p in partitions(replica, pubid)}
    new: list[Partition] = []
    next_id = int(replica.scalar(f"SELECT coalesce(max(partition_id), 0) FROM "
                                 f"{replica.meta('MSmerge_partition_groups')}") or 0) + 1
    out = []
    for values in wanted:
        key = tuple({k: values.get(k) for k in SETTINGS}.items())
        if key not in existing:
            existing[key] = Partition(next_id, values.get("host_name"), values.get("login"))
            new.append(existing[key])
            store.insert_row(replica, "MSmerge_partition_groups", {
                "partition_id": next_id, "pubid": pubid, **existing[key].params, "created_at": store.utcnow()})
            next_id += 1
        out.append(existing[key])
    if not new or not mappings:
        return out
    d, groups = replica.dialect, replica.meta("MSmerge_partition_groups")
    gpm = replica.meta("MSmerge_generation_partition_mappings")
    at_sync = evaluated_at_sync(articles, scheme, True)
    prow = store.select_one(replica, PublicationRow, {"pubid": pubid})
    assert prow is not None
    if prow.partitions_evaluated is None:
        # the mappings made here are computed from the rows as they are: generations closed until now
        # need no evaluation (their changes of unfiltered articles go to every partition)
        bound = enumeration_bound(replica)
        store.update(replica, PublicationRow, {"partitions_evaluated": bound}, {"pubid": pubid})
        unfiltered = ", ".join(str(a.nickname) for a in articles
                               if not scheme.articles[a.name].filtered or a.nickname in at_sync)
        if unfiltered:
            replica.execute(
                f"INSERT INTO {gpm} (pubid, generation, partition_id, changecount) SELECT {d.uuid_param()}, "
                f"x.generation, {ALL_PARTITIONS}, count(*) FROM (SELECT generation FROM "
                f"{replica.meta('MSmerge_contents')} WHERE tablenick IN ({unfiltered}) UNION ALL SELECT generation "
                f"FROM {replica.meta('MSmerge_tombstone')} WHERE tablenick IN ({unfiltered})) AS x "
                f"WHERE x.generation <= {int(bound)} GROUP BY x.generation", [pubid])
    ids = ", ".join(str(p.partition_id) for p in new)
    for a in articles:
        if not scheme.articles[a.name].filtered:
            continue
        if a.nickname in at_sync:           # no mappings: checked as they are
            check_non_overlapping(replica, scheme, a, mapped=False)
            continue
        art = tracked_article(a)
        joined = scheme.with_partitions(d, a.name, "m", groups, PARTITION_ALIAS, _as_columns())
        replica.execute(
            f"INSERT INTO {replica.meta('MSmerge_current_partition_mappings')} (tablenick, rowguid, partition_id) "
            f"SELECT {'' if joined.unique else 'DISTINCT '}{int(art.nickname)}, m.{d.quote(art.rowguid_column)}, "
            f"{PARTITION_ALIAS}.partition_id FROM {identity.rows_sql(d, art)} AS m {joined.joins} "
            f"WHERE {PARTITION_ALIAS}.partition_id IN ({ids})")
        if a.non_overlapping:
            check_non_overlapping(replica, scheme, a)
    # the generations that changed the new partitions' rows (a subscription whose watermark is older
    # than the partition must not skip them)
    replica.execute(
        f"INSERT INTO {gpm} (pubid, generation, partition_id, changecount) SELECT {d.uuid_param()}, c.generation, "
        f"cm.partition_id, count(*) FROM {replica.meta('MSmerge_current_partition_mappings')} cm "
        f"JOIN {replica.meta('MSmerge_contents')} c ON c.tablenick = cm.tablenick AND c.rowguid = cm.rowguid "
        f"WHERE cm.partition_id IN ({ids}) GROUP BY c.generation, cm.partition_id", [pubid])
    return out


def partition_generations(replica: Replica, pubid: str, partition_id: int, after: int, upto: int) -> set[int]:
    """The evaluated generations in (after, upto] with changes for ``partition_id`` (its own or every
    partition's): the ones a download to that partition enumerates."""
    p = replica.p
    return {int(g) for (g,) in replica.query(
        f"SELECT DISTINCT generation FROM {replica.meta('MSmerge_generation_partition_mappings')} "
        f"WHERE pubid = {replica.dialect.uuid_param()} AND partition_id IN ({int(partition_id)}, {ALL_PARTITIONS}) "
        f"AND generation > {p} AND generation <= {p}", [pubid, int(after), int(upto)])}


class _Evaluator:
    """One evaluation pass (see the module doc), inside one publisher transaction."""

    def __init__(self, replica: Replica, pubid: str, scheme: PartitionScheme, articles: list[ArticleRow],
                 publisher_nick: int, lo: int, hi: int):
        self.r, self.d, self.pubid, self.scheme = replica, replica.dialect, pubid, scheme
        self.articles, self.publisher_nick = articles, publisher_nick
        self.lo, self.hi = lo, hi
        self.result = Evaluation((lo, hi))
        self.realign: int | None = None
        m = replica.meta
        self.contents, self.tomb = m("MSmerge_contents"), m("MSmerge_tombstone")
        self.current, self.past = m("MSmerge_current_partition_mappings"), m("MSmerge_past_partition_mappings")
        self.groups, self.scratch = m("MSmerge_partition_groups"), m("MSmerge_partition_changes")
        self.by_name = {a.name: a for a in articles}
        self.at_sync = evaluated_at_sync(articles, scheme, True)
        # articles some join filter starts from: only their membership changes are noted for realignment
        self.parents = {link.parent for x in scheme.articles.values() for link in x.joins}

    def in_range(self, col: str) -> str:
        rng = f"({col} > {int(self.lo)} AND {col} <= {int(self.hi)})"
        return f"({rng} OR {col} = {int(self.realign)})" if self.realign is not None else rng

    def member(self, name: str, rowguid_sql: str, partition_sql: str) -> str:
        return member_sql(self.r, self.scheme, self.by_name[name], rowguid_sql, partition_sql)

    def run(self) -> Evaluation:
        r = self.r
        r.execute(f"DELETE FROM {self.scratch}")
        for a in self.articles:             # nickname order: parents before their join-filter children
            if not self.scheme.articles[a.name].filtered:
                continue
            if a.nickname not in self.at_sync:
                self.result.articles.append(a.name)
                self.realign_children(a)
                self.evaluate_article(a)
            self.check_overlap(a)
        if self.realign is not None:
            store.update(r, GenerationRow, {"changecount": self.result.realigned}, {"generation": self.realign})
        self.record_generations()
        return self.result

    def record_generations(self) -> None:
        """``MSmerge_generation_partition_mappings`` for the generations of this pass: per generation,
        the partitions its changes reach (upserts of rows in a partition, deletes of rows that were ever
        in one, rows that left one) and ``ALL_PARTITIONS`` for changes of unfiltered articles. Written
        again when a generation is evaluated again (the realignment generation)."""
        d, gpm = self.d, self.r.meta("MSmerge_generation_partition_mappings")
        # articles evaluated at sync time count as unfiltered here: their changes may concern any partition
        filtered = [a.nickname for a in self.articles if self.scheme.articles[a.name].filtered
                    and a.nickname not in self.at_sync]
        unfiltered = [a.nickname for a in self.articles if a.nickname not in filtered]
        parts = []
        if filtered:
            f = ", ".join(str(n) for n in filtered)
            parts += [
                f"SELECT c.generation, c.tablenick, c.rowguid, cm.partition_id FROM {self.contents} c CROSS JOIN "
                f"{self.current} cm WHERE c.tablenick IN ({f}) AND {self.in_range('c.generation')} "
                f"AND cm.tablenick = c.tablenick AND cm.rowguid = c.rowguid",
                f"SELECT t.generation, t.tablenick, t.rowguid, pm.partition_id FROM {self.tomb} t CROSS JOIN "
                f"{self.past} pm WHERE t.tablenick IN ({f}) AND {self.in_range('t.generation')} "
                f"AND pm.tablenick = t.tablenick AND pm.rowguid = t.rowguid",
                f"SELECT pm.generation, pm.tablenick, pm.rowguid, pm.partition_id FROM {self.past} pm "
                f"WHERE pm.tablenick IN ({f}) AND {self.in_range('pm.generation')}"]
        if unfiltered:
            u = ", ".join(str(n) for n in unfiltered)
            parts += [f"SELECT x.generation, x.tablenick, x.rowguid, {ALL_PARTITIONS} FROM {t} x "
                      f"WHERE x.tablenick IN ({u}) AND {self.in_range('x.generation')}"
                      for t in (self.contents, self.tomb)]
        self.r.execute(f"DELETE FROM {gpm} WHERE pubid = {d.uuid_param()} AND {self.in_range('generation')}",
                       [self.pubid])
        if parts:
            self.r.execute(
                f"INSERT INTO {gpm} (pubid, generation, partition_id, changecount) "
                f"SELECT {d.uuid_param()}, y.generation, y.partition_id, count(*) FROM "
                f"({' UNION '.join(parts)}) AS y GROUP BY y.generation, y.partition_id", [self.pubid])

    def realign_children(self, a: ArticleRow) -> None:
        """Move the rows of ``a`` joined to parent rows whose membership changed in this pass into the
        realignment generation (a row never changed has no contents row yet: it gets one)."""
        d, nick = self.d, a.nickname
        child = tracked_article(a)
        for link in self.scheme.articles[a.name].joins:
            parent_row = self.by_name[link.parent]
            parent = tracked_article(parent_row)
            if not self.scheme.articles[link.parent].filtered:
                continue
            clause = link.filter.render(d.capabilities.sql, "ch", "par")
            moved = (f"SELECT ch.{d.quote(child.rowguid_column)} AS g FROM {identity.rows_sql(d, child)} AS ch "
                     f"JOIN {identity.rows_sql(d, parent)} AS par ON {clause} "
                     f"JOIN {self.scratch} AS s ON s.tablenick = {int(parent.nickname)} "
                     f"AND s.rowguid = par.{d.quote(parent.rowguid_column)}")
            if not self.r.scalar(f"SELECT count(*) FROM ({moved}) AS x"):
                continue
            if self.realign is None:
                self.realign = new_generation(self.r, GenStatus.CLOSED, [self.publisher_nick], self.pubid)
                self.result.realignment_generation = self.realign
            cur = self.r.execute(f"UPDATE {self.contents} SET generation = {int(self.realign)} "
                                 f"WHERE tablenick = {nick} AND rowguid IN ({moved})")
            n = max(getattr(cur, "rowcount", 0), 0)
            cur = self.r.execute(
                f"INSERT INTO {self.contents} (tablenick, rowguid, generation, lineage, colv) "
                f"SELECT DISTINCT {nick}, x.g, {int(self.realign)}, {d.json_literal('{}')}, "
                f"CAST(NULL AS {d.render_type(JSON)}) "
                f"FROM ({moved}) AS x WHERE NOT EXISTS (SELECT 1 FROM {self.contents} c "
                f"WHERE c.tablenick = {nick} AND c.rowguid = x.g)")
            self.result.realigned += n + max(getattr(cur, "rowcount", 0), 0)

    def evaluate_article(self, a: ArticleRow) -> None:
        r, nick = self.r, a.nickname
        name = a.name
        cur = self.current
        # Each statement starts from the generations' changes (CROSS JOIN keeps SQLite's planner from
        # starting from every mapping of the article), then finds their mappings by key.
        # 1. deleted rows leave every partition, in their tombstone's generation
        tombs = f"SELECT t.rowguid FROM {self.tomb} t WHERE t.tablenick = {nick} AND {self.in_range('t.generation')}"
        deleted = (f"SELECT cm.tablenick, cm.rowguid, cm.partition_id, t.generation FROM {self.tomb} t "
                   f"CROSS JOIN {cur} cm WHERE t.tablenick = {nick} AND {self.in_range('t.generation')} "
                   f"AND cm.tablenick = t.tablenick AND cm.rowguid = t.rowguid")
        self._note_changed(name, f"SELECT x.tablenick, x.rowguid FROM ({deleted}) AS x")
        self.result.left += self._insert_past(deleted)
        r.execute(f"DELETE FROM {cur} WHERE tablenick = {nick} AND rowguid IN ({tombs})")
        # 2. changed rows leave the partitions whose filter no longer keeps them ...
        changed = (f"SELECT c.rowguid FROM {self.contents} c WHERE c.tablenick = {nick} "
                   f"AND {self.in_range('c.generation')}")
        left = (f"SELECT cm.tablenick, cm.rowguid, cm.partition_id, c.generation FROM {self.contents} c "
                f"CROSS JOIN {cur} cm WHERE c.tablenick = {nick} AND {self.in_range('c.generation')} "
                f"AND cm.tablenick = c.tablenick AND cm.rowguid = c.rowguid "
                f"AND NOT {self.member(name, 'cm.rowguid', 'cm.partition_id')}")
        self._note_changed(name, f"SELECT x.tablenick, x.rowguid FROM ({left}) AS x")
        self.result.left += self._insert_past(left)
        r.execute(f"DELETE FROM {cur} AS cm WHERE cm.tablenick = {nick} AND cm.rowguid IN ({changed}) "
                  f"AND NOT {self.member(name, 'cm.rowguid', 'cm.partition_id')}")
        # ... and enter the ones that now keep them
        art = tracked_article(a)
        joined = self.scheme.with_partitions(self.d, name, "m", self.groups, PARTITION_ALIAS, _as_columns())
        entered = (f"SELECT {'' if joined.unique else 'DISTINCT '}{nick} AS tablenick, c.rowguid, "
                   f"{PARTITION_ALIAS}.partition_id FROM {self.contents} c "
                   f"{identity.join_rows(self.d, art, 'm', 'c.rowguid')} "
                   f"{joined.joins} WHERE {PARTITION_ALIAS}.pubid = {self.d.uuid_param()} "
                   f"AND c.tablenick = {nick} AND {self.in_range('c.generation')} "
                   f"AND NOT EXISTS (SELECT 1 FROM {cur} cm WHERE cm.tablenick = c.tablenick "
                   f"AND cm.rowguid = c.rowguid AND cm.partition_id = {PARTITION_ALIAS}.partition_id)")
        self._note_changed(name, f"SELECT x.tablenick, x.rowguid FROM ({entered}) AS x", [self.pubid])
        c = r.execute(f"INSERT INTO {cur} (tablenick, rowguid, partition_id) {entered}", [self.pubid])
        self.result.entered += max(getattr(c, "rowcount", 0), 0)

    def check_overlap(self, a: ArticleRow) -> None:
        """A non-overlapping article (partition_options 2 or 3): none of its changed rows may be in two
        partitions (an error naming the row, not silent duplication)."""
        if a.non_overlapping:
            changed = (f"SELECT c.rowguid FROM {self.contents} c WHERE c.tablenick = {a.nickname} "
                       f"AND {self.in_range('c.generation')}")
            check_non_overlapping(self.r, self.scheme, a, changed, mapped=a.nickname not in self.at_sync)

    def _insert_past(self, select: str, params: list | None = None) -> int:
        past = self.past
        c = self.r.execute(
            f"INSERT INTO {past} (tablenick, rowguid, partition_id, generation) SELECT DISTINCT y.* FROM ({select}) "
            f"AS y WHERE NOT EXISTS (SELECT 1 FROM {past} pm WHERE pm.tablenick = y.tablenick AND pm.rowguid = y.rowguid "
            f"AND pm.partition_id = y.partition_id AND pm.generation = y.generation)", params or [])
        return max(getattr(c, "rowcount", 0), 0)

    def _note_changed(self, name: str, select: str, params: list | None = None) -> None:
        """Remember rows of article ``name`` whose membership changes, for the realignment of their
        join-filter children (nothing to remember for an article no join filter starts from)."""
        if name not in self.parents:
            return
        s = self.scratch
        self.r.execute(f"INSERT INTO {s} (tablenick, rowguid) SELECT DISTINCT z.tablenick, z.rowguid FROM ({select}) "
                       f"AS z WHERE NOT EXISTS (SELECT 1 FROM {s} q WHERE q.tablenick = z.tablenick "
                       f"AND q.rowguid = z.rowguid)", params or [])



def check_non_overlapping(replica: Replica, scheme: PartitionScheme, a: ArticleRow, rowguids_sql: str | None = None,
                          mapped: bool = True) -> None:
    """Raise PartitionOverlap naming the first rows of article ``a`` (of ``rowguids_sql``, or all) that
    are in more than one partition: by the mappings, or (``mapped`` False: an article evaluated at sync
    time) by evaluating its filters against every partition."""
    art = tracked_article(a)
    d = replica.dialect
    cur, groups = replica.meta("MSmerge_current_partition_mappings"), replica.meta("MSmerge_partition_groups")
    if mapped:
        members = (f"SELECT cm.rowguid AS g, cm.partition_id FROM {cur} cm WHERE cm.tablenick = {int(art.nickname)}"
                   + (f" AND cm.rowguid IN ({rowguids_sql})" if rowguids_sql else ""))
    else:
        joined = scheme.with_partitions(d, a.name, "m", groups, PARTITION_ALIAS, _as_columns())
        rg = f"m.{d.quote(art.rowguid_column)}"
        members = (f"SELECT DISTINCT {rg} AS g, {PARTITION_ALIAS}.partition_id FROM {identity.rows_sql(d, art)} AS m "
                   f"{joined.joins} WHERE {PARTITION_ALIAS}.pubid = {d.uuid_param()}"
                   + (f" AND {rg} IN ({rowguids_sql})" if rowguids_sql else ""))
    params = [] if mapped else [a.pubid]
    # partitions as the article sees them: by the parameters its filters read (two subscriptions that
    # differ only in a login the article does not read are in one partition of it)
    used = sorted(scheme.parameters(a.name)) or ["host_name"]
    value = " || '|' || ".join(f"coalesce(pg.{p}, '')" for p in used)
    rows = replica.query(f"SELECT x.g FROM ({members}) AS x JOIN {groups} pg ON pg.partition_id = x.partition_id "
                         f"GROUP BY x.g HAVING count(DISTINCT {value}) > 1", params)
    if not rows:
        return
    names = {p.partition_id: p.describe() for p in partitions(replica, a.pubid)}
    found = []
    for (guid,) in rows[:3]:
        pids = sorted(int(p) for (p,) in replica.query(f"SELECT x.partition_id FROM ({members}) AS x WHERE x.g = "
                                                       f"{d.uuid_param()}", [*params, guid]))
        key = replica.query_one(f"SELECT {', '.join(d.quote(k) for k in art.info.primary_key)} FROM "
                                f"{identity.rows_sql(d, art)} WHERE {d.quote(art.rowguid_column)} = {d.uuid_param()}",
                                [guid])
        where = ", ".join(f"{k}={v}" for k, v in zip(art.info.primary_key, key or ())) or str(guid)
        found.append(f"row {where} is in partitions " + " and ".join(f"{p} ({names.get(p, '?')})" for p in pids))
    raise PartitionOverlap(f"article {a.name} has partition_options = {a.partition_options} (non-overlapping "
                           f"partitions) but {len(rows)} row(s) belong to more than one partition: "
                           + "; ".join(found) + "; change the rows or the filter (nothing was merged)",
                           obj=a.name)


def member_sql(replica: Replica, scheme: PartitionScheme, a: ArticleRow, rowguid_sql: str, partition_sql: str) -> str:
    """SQL that is true when the row ``rowguid_sql`` of article ``a`` (a ``sysmergearticles`` row) belongs
    to the partition ``partition_sql`` (both SQL expressions of the enclosing query)."""
    d, art = replica.dialect, tracked_article(a)
    cond = scheme.condition(d, a.name, "m", _as_columns())
    return (f"EXISTS (SELECT 1 FROM {identity.rows_sql(d, art)} AS m JOIN {replica.meta('MSmerge_partition_groups')} "
            f"AS {PARTITION_ALIAS} ON {PARTITION_ALIAS}.partition_id = {partition_sql} "
            f"WHERE m.{d.quote(art.rowguid_column)} = {rowguid_sql} AND {cond})")


def _as_columns() -> dict:
    """The parameters as columns of the partitions table (every partition evaluated at once)."""
    return {k: partition_column(PARTITION_ALIAS, k) for k in SETTINGS}


def evaluate(replica: Replica, pubid: str, scheme: PartitionScheme, articles: list[ArticleRow],
             publisher_nick: int = 1) -> Evaluation:
    """Bring the partition mappings up to the enumeration bound (see the module doc). Returns what it
    did; ``realignment_generation`` set means rows were moved into a generation above the open one
    (close generations again, then evaluate again, before enumerating)."""
    with replica.transaction():
        flush(replica)              # (what it records goes to the open generation, above the bound)
        prow = store.select_one(replica, PublicationRow, {"pubid": pubid})
        assert prow is not None
        lo = prow.partitions_evaluated or 0
        hi = enumeration_bound(replica)
        if hi <= lo or not scheme.filtered:
            return Evaluation((lo, lo))
        result = _Evaluator(replica, pubid, scheme, articles, publisher_nick, lo, hi).run()
        store.update(replica, PublicationRow, {"partitions_evaluated": hi}, {"pubid": pubid})
        failpoints.hit("partitions.before_commit")
    return result


def describe_partitions(replica: Replica, pubid: str, articles: list[ArticleRow], scheme: PartitionScheme,
                        counts_known: bool = True, registered: Iterable[SubscriptionRow] | None = None) -> list[dict]:
    """Each partition of a publication: its parameters, its subscriptions, and how many rows of each
    filtered article it holds (current mappings: as of the last evaluation; None for an article
    evaluated at sync time, which has no mappings: every one with SetupBelongs, ``counts_known`` False,
    and those with partition_options = 3). ``registered``: the publication's registrations when the caller
    has read them (read here otherwise)."""
    subs: dict[int, list[str]] = {}
    if registered is None:
        registered = store.select(replica, SubscriptionRow, {"pubid": pubid, "role": Role.SUBSCRIBER})
    for s in registered:
        if s.role is Role.SUBSCRIBER and s.partition_id is not None:
            subs.setdefault(s.partition_id, []).append(s.name)
    counts: dict[tuple[int, int], int] = {}
    at_sync = evaluated_at_sync(articles, scheme, counts_known)
    nicks = [a.nickname for a in articles if scheme.articles[a.name].filtered
             and a.nickname not in at_sync]
    if nicks:
        for pid, nick, n in replica.query(
                f"SELECT partition_id, tablenick, count(*) FROM {replica.meta('MSmerge_current_partition_mappings')} "
                f"WHERE tablenick IN ({', '.join(str(x) for x in nicks)}) GROUP BY partition_id, tablenick"):
            counts[(int(pid), int(nick))] = int(n)
    out = []
    for p in partitions(replica, pubid):
        out.append({"partition_id": p.partition_id, "host_name": p.host_name, "login": p.login,
                    "subscriptions": sorted(subs.get(p.partition_id, [])),
                    "rows": {a.name: counts.get((p.partition_id, a.nickname), 0)
                             if a.nickname not in at_sync else None
                             for a in articles if scheme.articles[a.name].filtered}})
    return out
