"""Generations: open -> closed (sp_MSmakegeneration), settling, and the enumeration bound.

A change is stamped with the replica's open generation. ``make_generation`` closes it and opens the
next. On PostgreSQL several transactions write at once, so a closed generation is only *settled*
(safe to enumerate) once no transaction that wrote into it is still running: writers hold the
generation's advisory lock in shared mode until they end, and settling takes it exclusively.
Enumeration never goes past the lowest open or unsettled generation, so a transaction that was in
flight while its generation was closed is delivered once it commits, never skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparksync import failpoints
from sparksync.dialects.protocols import MergeHooks
from sparksync.dialects.replica import Replica
from sparksync.merge.tracking.open_generation import ensure_open_generation, insert_open, max_generation
from sparksync.merge.tracking.pending import flush
from sparksync.metadata import store
from sparksync.metadata.records import GenerationRow, GenStatus


@dataclass
class MakeGenerationResult:
    closed: list[int] = field(default_factory=list)      # closed and settled by this call
    unsettled: list[int] = field(default_factory=list)   # closed, still waiting for writers
    open_generation: int = 0
    changes: int = 0


def _gh(replica: Replica) -> str:
    return replica.meta("MSmerge_genhistory")


CLOSED = f"genstatus > {GenStatus.OPEN:d}"      # SQL: a closed generation (made here or received)


def next_generation(replica: Replica) -> int:
    """A generation number above every existing one and the open one (inside a transaction, which then
    numbers generations alone until it ends: ``MergeHooks.lock_generation_numbers``)."""
    replica.dialect.lock_generation_numbers(replica)
    return max(max_generation(replica), int(replica.dialect.current_open_generation(replica) or 0)) + 1


def new_generation(replica: Replica, genstatus: GenStatus, nicknames: list[int], pubid: str,
                    source_nick: int | None = None, source_gen: int | None = None) -> int:
    """A closed generation numbered above every existing one and the open one: a batch's received
    changes (RECEIVED, known to ``nicknames``), or resolutions to send back (CLOSED)."""
    g = next_generation(replica)
    store.insert(replica, GenerationRow(
        generation=g, guidsrc=store.new_guid(), pubid=pubid, genstatus=genstatus, settled=1,
        nicknames=sorted(set(nicknames)), changecount=0, coldate=store.utcnow(),
        source_nickname=source_nick, source_generation=source_gen))
    return g


def count_changes(replica: Replica, generation: int) -> tuple[int, int]:
    p = replica.p
    c = replica.scalar(f"SELECT count(*) FROM {replica.meta('MSmerge_contents')} WHERE generation = {p}", [generation])
    t = replica.scalar(f"SELECT count(*) FROM {replica.meta('MSmerge_tombstone')} WHERE generation = {p}", [generation])
    return int(c or 0), int(t or 0)


def _renumber(replica: Replica, generation: int, first_new: int, level: int, n_contents: int, n_tomb: int) -> list[int]:
    """Split ``generation`` into generations of at most ``level`` changes, SQL Server's way (a web
    device's generations, whose upload requests carry whole generations). The first chunk keeps
    ``generation``; the others get ``first_new``, ``first_new + 1``, ... Returns the numbers used."""
    p = replica.p
    c_chunks, t_chunks = -(-n_contents // level), -(-n_tomb // level)
    numbers = [generation] + [first_new + i for i in range(max(c_chunks + t_chunks - 1, 0))]

    def renumber(table: str, chunk_offset: int) -> None:
        # chunk k of this table -> numbers[chunk_offset + k]; number = generation for chunk index 0
        t = replica.meta(table)
        replica.execute(
            f"UPDATE {t} AS m SET generation = CASE WHEN r.chunk + {p} = 0 THEN {p} "
            f"ELSE {p} + r.chunk + {p} - 1 END "
            f"FROM (SELECT tablenick, rowguid, (row_number() OVER (ORDER BY tablenick, rowguid) - 1) / {p} AS chunk "
            f"      FROM {t} WHERE generation = {p}) AS r "
            f"WHERE m.tablenick = r.tablenick AND m.rowguid = r.rowguid AND m.generation = {p}",
            [chunk_offset, generation, first_new, chunk_offset, level, generation, generation])

    if c_chunks + t_chunks > 1:
        renumber("MSmerge_contents", 0)
        renumber("MSmerge_tombstone", c_chunks if n_contents else 0)
    return numbers


def _close(replica: Replica, generation: int, genstatus: GenStatus, nickname: int, level: int = 0) -> list[int]:
    """Close a claimed generation and record its change count. Returns the closed numbers.

    A big generation is not split here (SQL Server renumbers its changes into generations of at most
    the leveling threshold, a write of every change): the merge agent's enumeration cuts it by key into
    batches of that many changes (``merge.session.enumeration.plan_batches``). ``level``: renumber it
    into generations of at most that many changes instead (a web device)."""
    n_c, n_t = count_changes(replica, generation)
    numbers = [generation]
    if level:
        first_new = max(max_generation(replica), replica.dialect.current_open_generation(replica) or 0) + 1
        numbers = _renumber(replica, generation, first_new, level, n_c, n_t)
    now = store.utcnow()
    for g in numbers:
        c, t = count_changes(replica, g) if len(numbers) > 1 else (n_c, n_t)
        if store.select_one(replica, GenerationRow, {"generation": g}) is not None:
            store.update(replica, GenerationRow, {"genstatus": genstatus, "settled": 1, "changecount": c + t,
                                                  "coldate": now}, {"generation": g})
        else:
            store.insert(replica, GenerationRow(generation=g, guidsrc=store.new_guid(), pubid=None, nicknames=[nickname],
                                                genstatus=genstatus, settled=1, changecount=c + t, coldate=now))
    return numbers


def make_generation(replica: Replica, nickname: int, level: int = 0) -> MakeGenerationResult:
    """Close the open generation if it holds changes (sp_MSmakegeneration), then settle older ones.
    ``level``: renumber a generation of more changes into generations of at most that many (``_close``)."""
    failpoints.hit("generation.make", replica.label)     # tests: just before this replica's write lock is needed
    flush(replica)          # what applications changed goes to the open generation before it is closed
    d: MergeHooks = replica.dialect
    result = MakeGenerationResult()
    # Settle older generations first: renumbering one of them (``level``) numbers its chunks above the
    # open generation, and closing (or moving) the open generation next lets the bound pass them.
    settled, _ = settle_generations(replica, nickname, level)
    result.closed.extend(settled)
    with replica.transaction():
        d.lock_generation_numbers(replica)
        g = ensure_open_generation(replica, nickname)
        if d.try_claim_generation(replica, g):
            n_c, n_t = count_changes(replica, g)
            if n_c + n_t:
                closed = _close(replica, g, GenStatus.CLOSED, nickname, level)
                result.closed.extend(closed)
                result.changes += n_c + n_t
                new_open = max(max_generation(replica), g) + 1
                insert_open(replica, new_open, nickname)
                d.set_open_generation(replica, new_open)
            elif max_generation(replica) > g:
                # Empty, but closed generations sit above it (leveled late, or received): move the open
                # generation above them so the enumeration bound can pass them.
                store.delete(replica, GenerationRow, {"generation": g})
                new_open = max_generation(replica) + 1
                insert_open(replica, new_open, nickname)
                d.set_open_generation(replica, new_open)
        else:
            # Writers are still in flight: close it for new changes now, settle it once they end.
            store.update(replica, GenerationRow,
                         {"genstatus": GenStatus.CLOSED, "settled": 0, "coldate": store.utcnow()}, {"generation": g})
            result.unsettled.append(g)
            new_open = max(max_generation(replica), g) + 1
            insert_open(replica, new_open, nickname)
            d.set_open_generation(replica, new_open)
    result.unsettled = [int(g) for (g,) in replica.query(
        f"SELECT generation FROM {_gh(replica)} WHERE {CLOSED} AND settled = 0 ORDER BY generation")]
    result.open_generation = int(d.current_open_generation(replica) or 0)
    return result


def settle_generations(replica: Replica, nickname: int, level: int = 0) -> tuple[list[int], list[int]]:
    """Settle closed generations whose writers have all ended. Returns (settled now, still unsettled)."""
    settled: list[int] = []
    pending: list[int] = []
    rows = replica.query(f"SELECT generation, genstatus FROM {_gh(replica)} WHERE {CLOSED} AND settled = 0 "
                         "ORDER BY generation")
    for g, status in rows:
        with replica.transaction():
            replica.dialect.lock_generation_numbers(replica)
            if replica.dialect.try_claim_generation(replica, int(g)):
                settled.extend(_close(replica, int(g), GenStatus(status), nickname, level))
            else:
                pending.append(int(g))
    return settled, pending


def enumeration_bound(replica: Replica) -> int:
    """The highest generation that may be enumerated: below every open or unsettled generation."""
    d: MergeHooks = replica.dialect
    open_g = int(d.current_open_generation(replica) or 1)
    unsettled = replica.scalar(f"SELECT min(generation) FROM {_gh(replica)} WHERE {CLOSED} AND settled = 0")
    lowest = min(open_g, int(unsettled)) if unsettled is not None else open_g
    return lowest - 1


def generation_rows(replica: Replica, after: int, upto: int) -> list[dict]:
    """Closed generations in (after, upto], oldest first."""
    p = replica.p
    cols = ("generation", "genstatus", "changecount", "nicknames")
    rows = replica.query(
        f"SELECT generation, genstatus, changecount, nicknames FROM {_gh(replica)} "
        f"WHERE {CLOSED} AND generation > {p} AND generation <= {p} ORDER BY generation", [after, upto])
    out = []
    for r in rows:
        d = dict(zip(cols, r))
        d["nicknames"] = store.from_db(store.Kind.JSON, d["nicknames"])
        out.append(d)
    return out


@dataclass
class Waiting:
    """A closed generation that cannot be settled yet, and the transactions it waits for."""

    generation: int
    writers: list[dict]          # {"pid", "seconds" (transaction age), "state", "application"}

    def describe(self) -> str:
        if not self.writers:
            return f"generation {self.generation} waits for a transaction that wrote into it"
        who = ", ".join(f"pid {w['pid']} ({w['state']}, transaction open {w['seconds']:.0f}s"
                        + (f", {w['application']}" if w.get("application") else "") + ")" for w in self.writers)
        return f"generation {self.generation} waits for open transaction(s): {who}"


def waiting_writers(replica: Replica, generations: list[int]) -> list[Waiting]:
    """For each unsettled generation: the transactions still holding it (enumeration cannot pass it
    until they end: commit safety). Empty where the database has one writer at a time."""
    return [Waiting(g, replica.dialect.generation_writers(replica, g)) for g in generations]
