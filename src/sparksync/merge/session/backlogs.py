"""Many subscriptions' backlogs at the publisher at once, for ``status`` of a fleet: what ``backlog.pending_download``
counts for each, read in a few grouped queries whatever the number of subscriptions, then answered for each from
memory (a count of the generations after its watermark, less those it sent itself).

``pending_download`` of one subscription is about ten queries; 10,000 devices made the monitor's page take
seconds. The counts are the same, by construction: what each query of ``count_after`` and ``count_for_partition``
counts above a watermark is read once above the lowest watermark, grouped by generation (and partition), so that
the count above any higher watermark is a suffix of it (``tests/merge/test_backlogs.py`` holds the two equal on
random metadata, on both dialects).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from sparksync.dialects.replica import Replica
from sparksync.merge.session.backlog import lower, split
from sparksync.merge.tracking import pending
from sparksync.metadata.records import ArticleRow, GenStatus, SubscriptionRow


@dataclass
class Generations:
    """Changes counted per generation: how many lie above a watermark, and the lowest generation holding one,
    leaving out some generations (those a subscription sent itself)."""

    counts: dict[int, int] = field(default_factory=dict)
    _sorted: list[int] | None = None
    _suffix: list[int] | None = None

    def add(self, generation: int, n: int) -> None:
        self.counts[generation] = self.counts.get(generation, 0) + n
        self._sorted = None

    def _index(self) -> tuple[list[int], list[int]]:
        if self._sorted is None:
            self._sorted = sorted(self.counts)
            suffix = [0] * (len(self._sorted) + 1)
            for i in range(len(self._sorted) - 1, -1, -1):
                suffix[i] = suffix[i + 1] + self.counts[self._sorted[i]]
            self._suffix = suffix
        assert self._suffix is not None
        return self._sorted, self._suffix

    def after(self, watermark: int, skip: frozenset[int] = frozenset()) -> tuple[int, int | None]:
        gens, suffix = self._index()
        i = bisect_right(gens, watermark)
        if not skip:                          # most devices: nothing of theirs above their watermark
            return suffix[i], (gens[i] if suffix[i] else None)
        n = suffix[i] - sum(self.counts.get(g, 0) for g in skip if g > watermark)
        lowest = next((g for g in gens[i:] if g not in skip), None) if n else None
        return n, lowest


@dataclass
class Left:
    """Rows that left a partition (its past mappings, with no current one): per row the generations it left in.
    Counted as ``count_for_partition`` counts them: each row once if it left after the watermark."""

    newest: list[int] = field(default_factory=list)         # per row, the generation it last left in, sorted
    every: list[int] = field(default_factory=list)          # every generation a row left in, sorted

    def after(self, watermark: int) -> tuple[int, int | None]:
        n = len(self.newest) - bisect_right(self.newest, watermark)
        i = bisect_right(self.every, watermark)
        return n, (self.every[i] if n and i < len(self.every) else None)


@dataclass
class Logged:
    """The log's rows (changed since the last flush), each with the highest generation the metadata gives it:
    one counts for a watermark unless the metadata already has it changed after it."""

    newest: list[int] = field(default_factory=list)        # sorted; -1: the metadata has none
    extra: int = 0                                          # counted whatever the watermark (rows without a rowguid)

    def after(self, watermark: int | None) -> int:
        if watermark is None:
            return len(self.newest) + self.extra
        return bisect_right(self.newest, watermark) + self.extra


class Backlogs:
    """``pending_download`` of every registration of one publication, from one read (``read``)."""

    def __init__(self, open_generation: int | None):
        self.open_generation = open_generation
        self.whole = Generations()
        self.mapped: dict[int, Generations] = defaultdict(Generations)
        self.left: dict[int, Left] = defaultdict(Left)
        self.logged_whole = Logged()
        self.logged_mapped: dict[int, Logged] = defaultdict(Logged)
        self.received: dict[int, list[int]] = defaultdict(list)
        self.filtered = False

    @classmethod
    def of_publication(cls, pub: Replica, arts: list[ArticleRow], scheme, regs: Iterable[SubscriptionRow]) -> Backlogs:
        """``read`` for a publication's articles (``scheme`` as ``pending_download`` takes it: None when its
        partitions are not precomputed)."""
        return cls.read(pub, *split(arts, scheme), regs)

    @classmethod
    def read(cls, pub: Replica, whole: list[int], filtered: list[int], regs: Iterable[SubscriptionRow]) -> Backlogs:
        """What the publisher has above the lowest watermark of ``regs``: every change of the articles ``whole``,
        and of the articles ``filtered`` those of each partition (``backlog.split``)."""
        regs = list(regs)
        out = cls(pub.dialect.current_open_generation(pub))
        if not regs:
            return out
        out.filtered = bool(filtered)
        floor = min(int(r.sentgen or 0) for r in regs)
        p = pub.p
        gh = pub.meta("MSmerge_genhistory")
        for source, generation in pub.query(f"SELECT source_nickname, generation FROM {gh} WHERE genstatus = "
                                            f"{GenStatus.RECEIVED:d} AND generation > {p}", [floor]):
            if source is not None:
                out.received[int(source)].append(int(generation))
        out._read_logged(pub, whole, filtered)
        if whole:
            nicks = ", ".join(str(int(n)) for n in whole)
            for t in ("MSmerge_contents", "MSmerge_tombstone"):
                for g, n in pub.query(f"SELECT generation, count(*) FROM {pub.meta(t)} WHERE tablenick IN ({nicks}) "
                                      f"AND generation > {p} GROUP BY generation", [floor]):
                    out.whole.add(int(g), int(n))
        if filtered:
            out._read_partitions(pub, filtered, floor)
        return out

    def _read_logged(self, pub: Replica, whole: list[int], filtered: list[int]) -> None:
        rows = pending.logged(pub, whole + filtered)
        wanted, seen = set(whole), set()
        mapped = set(filtered)
        for tablenick, rowguid, partition_id, newest in rows:
            at = -1 if newest is None else newest
            if tablenick in wanted and (tablenick, rowguid) not in seen:
                seen.add((tablenick, rowguid))
                self.logged_whole.newest.append(at)
            if tablenick in mapped and partition_id is not None:
                self.logged_mapped[partition_id].newest.append(at)
        self.logged_whole.newest.sort()
        for logged in self.logged_mapped.values():
            logged.newest.sort()
        if whole and pending.has_log(pub):
            self.logged_whole.extra = pending.unkeyed(pub, wanted)

    def _read_partitions(self, pub: Replica, filtered: list[int], floor: int) -> None:
        p = pub.p
        nicks = ", ".join(str(int(n)) for n in filtered)
        cur, past = pub.meta("MSmerge_current_partition_mappings"), pub.meta("MSmerge_past_partition_mappings")
        for pid, g, n in pub.query(
                f"SELECT cm.partition_id, x.generation, count(*) FROM {pub.meta('MSmerge_contents')} x JOIN {cur} cm "
                f"ON cm.tablenick = x.tablenick AND cm.rowguid = x.rowguid WHERE x.tablenick IN ({nicks}) "
                f"AND x.generation > {p} GROUP BY cm.partition_id, x.generation", [floor]):
            self.mapped[int(pid)].add(int(g), int(n))
        rows: dict[int, dict[str, int]] = defaultdict(dict)
        every: dict[int, list[int]] = defaultdict(list)
        for pid, rowguid, g in pub.query(
                f"SELECT x.partition_id, x.rowguid, x.generation FROM {past} x WHERE x.tablenick IN ({nicks}) "
                f"AND x.generation > {p} AND NOT EXISTS (SELECT 1 FROM {cur} cm WHERE cm.tablenick = x.tablenick "
                "AND cm.rowguid = x.rowguid AND cm.partition_id = x.partition_id)", [floor]):
            key, g = str(rowguid), int(g)
            rows[int(pid)][key] = max(g, rows[int(pid)].get(key, g))
            every[int(pid)].append(g)
        for pid, newest in rows.items():
            self.left[pid] = Left(sorted(newest.values()), sorted(every[pid]))

    def of(self, reg: SubscriptionRow) -> tuple[int, int | None]:
        """``pending_download(pub, arts, scheme, reg)``: the changes it has yet to receive, and the lowest
        generation holding one."""
        after = reg.sentgen
        mark = int(after or 0)
        skip = frozenset(g for g in self.received.get(int(reg.replnickname), ()) if g > mark) \
            if reg.replnickname is not None else frozenset()
        n, lowest = self.whole.after(mark, skip)
        logged = self.logged_whole.after(after)
        n += logged
        if logged:
            lowest = lower(lowest, self.open_generation)
        if self.filtered and reg.partition_id is not None:
            pid = int(reg.partition_id)
            ups, g1 = self.mapped[pid].after(mark, skip) if pid in self.mapped else (0, None)
            gone, g2 = self.left[pid].after(mark) if pid in self.left else (0, None)
            logged = self.logged_mapped[pid].after(after) if pid in self.logged_mapped else 0
            n += ups + gone + logged
            lowest = lower(lowest, lower(g1, g2))
            if logged:
                lowest = lower(lowest, self.open_generation)
        return n, lowest

