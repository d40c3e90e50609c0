"""The door is the trust boundary: a device changes only rows of its partition and rows it created.

An uploaded change of a filtered article to a row that is not in the device's partition is never applied:
it is taken out of the upload and logged as a refused change (``MSmerge_conflicts_info``, a failed-change
conflict of the device, with the reason). Not in its partition means: the row is at the publisher and, as
the publisher has it now, outside the partition (a rowguid of another partition, guessed or forged); or the
row is nowhere in the partition and the change says it is not the device's own creation (its lineage
names another replica) — whether the row is in another partition, was deleted
there, or exists nowhere, the answer is the same, so an upload never tells a device which rowguids exist
elsewhere. A row deleted at the publisher while it was in the partition (its tombstone and past mapping)
goes on to the apply (an update-delete conflict). A row the publisher does not have, changed by its
creator only, is one the device created: its insert is applied and then follows the article's
``partition_options`` like any subscriber's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sparksync.dialects.replica import Replica, in_chunks
from sparksync.merge.conflicts.model import ConflictRecord, failed_type, log_conflict
from sparksync.merge.partitions.evaluation import partitions
from sparksync.merge.partitions.scheme import PartitionScheme
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.pending import flush_rows
from sparksync.merge.tracking.tracked import tracked_article
from sparksync.metadata.records import ArticleRow


@dataclass(frozen=True)
class Refused:
    tablenick: int
    rowguid: str
    op: str


def foreign_rows(pub: Replica, pubid: str, scheme: PartitionScheme, articles: list[ArticleRow], partition_id: int | None,
                 table, source_nick: int, mapped: frozenset[int]) -> list[Refused]:
    """The changes of ``table`` (uploaded change rows of replica ``source_nick``) to rows not in the partition;
    ``mapped``: the filtered articles whose partition mappings are kept (precomputed partitions)."""
    import pyarrow.compute as pc

    if not partition_id or not scheme.filtered or not table.num_rows:
        return []
    part = next((p for p in partitions(pub, pubid) if p.partition_id == int(partition_id)), None)
    if part is None:
        return []
    d = pub.dialect
    out: list[Refused] = []
    nicks = table.column("tablenick")
    for a in articles:
        cond = scheme.condition(d, a.name, "m", part.params)
        if cond is None:
            continue
        mine = table.filter(pc.equal(nicks, a.nickname))
        if not mine.num_rows:
            continue
        ops = dict(zip(mine.column("rowguid").to_pylist(), mine.column("op").to_pylist()))
        claims = dict(zip(mine.column("rowguid").to_pylist(), mine.column("lineage").to_pylist()))
        for chunk in in_chunks(list(ops)):
            inlist = ", ".join([d.uuid_param()] * len(chunk))
            flush_rows(pub, a.nickname, inlist, chunk)     # a delete committed a moment ago has its tombstone
            present, inside = membership(pub, a, cond, chunk)
            was_here = _deleted_in_partition(pub, a.nickname, int(part.partition_id), inlist, chunk,
                                             a.nickname in mapped)
            for g in chunk:
                if str(g).lower() in inside or str(g).lower() in was_here:
                    continue
                if str(g).lower() in present or _claims_others(claims[g], source_nick):
                    out.append(Refused(a.nickname, str(g), str(ops[g])))
    return out


def membership(pub: Replica, a: ArticleRow, cond: str, rowguids: list[str]) -> tuple[set[str], set[str]]:
    """Of ``rowguids`` (at most a chunk) of article ``a``: those the publisher holds, and those of them in the
    partition whose rows ``cond`` (``PartitionScheme.condition`` on alias ``m``) holds for."""
    d = pub.dialect
    art = tracked_article(a)
    rg = d.quote(art.rowguid_column)
    present, inside = set(), set()
    for g, member in pub.query(f"SELECT m.{rg}, CASE WHEN {cond} THEN 1 ELSE 0 END FROM {identity.rows_sql(d, art)} AS m "
                               f"WHERE m.{rg} IN ({', '.join([d.uuid_param()] * len(rowguids))})", rowguids):
        present.add(str(g).lower())
        if member:
            inside.add(str(g).lower())
    return present, inside


def _deleted_in_partition(pub: Replica, nick: int, partition_id: int, inlist: str, chunk: list, mapped: bool) -> set[str]:
    """Of ``chunk``, the rows deleted at the publisher that were in the partition (a tombstone and, where
    mappings are kept, a past mapping of the partition; else any tombstone: where membership is evaluated at
    sync time, a deleted row's cannot be)."""
    tomb, past = pub.meta("MSmerge_tombstone"), pub.meta("MSmerge_past_partition_mappings")
    was = (f" AND EXISTS (SELECT 1 FROM {past} pm WHERE pm.tablenick = t.tablenick AND pm.rowguid = t.rowguid "
           f"AND pm.partition_id = {int(partition_id)})") if mapped else ""
    return {str(g).lower() for (g,) in pub.query(f"SELECT t.rowguid FROM {tomb} t WHERE t.tablenick = {int(nick)} AND "
                                         f"t.rowguid IN ({inlist}){was}", chunk)}


def _claims_others(lineage, source_nick: int) -> bool:
    """The change says the row has a history beyond its sender's (a row it did not create)."""
    try:
        return any(int(k) != int(source_nick) for k in json.loads(lineage or "{}"))
    except (ValueError, TypeError, AttributeError):
        return True


def without(table, refused: list[Refused]):
    """``table`` without the refused changes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not refused:
        return table
    keys = pa.array([f"{r.tablenick}:{r.rowguid}" for r in refused], pa.string())
    own = pc.binary_join_element_wise(pc.cast(table.column("tablenick"), pa.string()), table.column("rowguid"), ":")
    return table.filter(pc.invert(pc.is_in(own, value_set=keys)))


def log_refused(pub: Replica, pubid: str, publication: str, articles: list[ArticleRow], refused: list[Refused],
                device: str, describe: str, session_id: str) -> list[ConflictRecord]:
    """Each refused change as a failed-change conflict of the device, at the publisher (returned, logged)."""
    by_nick = {a.nickname: a for a in articles}
    out = []
    for r in refused:
        art = tracked_article(by_nick[r.tablenick])
        op = "delete" if r.op == "delete" else "update"
        rec = ConflictRecord(failed_type(True, op), r.tablenick, r.rowguid, "refused",
                             f"{op} refused: the row is not in the partition of {device} ({describe}); a web device "
                             "changes only rows of its partition and rows it created", origin=device, winner="")
        log_conflict(pub, pubid, publication, art, rec, device, True, session_id)
        out.append(rec)
    return out
