"""The door is the trust boundary: a device changes only rows of its partition and rows it created.

An uploaded change of a filtered article whose row is at the publisher and, as the publisher has it now,
outside the device's partition (a rowguid of another partition, guessed or forged) is never applied: it
is taken out of the upload and logged as a refused change (``MSmerge_conflicts_info``, a failed-change
conflict of the device, with the reason). A row the publisher does not have is one the device created:
its insert is applied and then follows the article's ``partition_options`` like any subscriber's.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparksync.dialects.replica import Replica, in_chunks
from sparksync.merge.conflicts.model import ConflictRecord, failed_type, log_conflict
from sparksync.merge.partitions.evaluation import partitions
from sparksync.merge.partitions.scheme import PartitionScheme
from sparksync.merge.tracking.articles import tracked_article
from sparksync.metadata.records import ArticleRow


@dataclass(frozen=True)
class Refused:
    tablenick: int
    rowguid: str
    op: str


def foreign_rows(pub: Replica, pubid: str, scheme: PartitionScheme, articles: list[ArticleRow], partition_id: int | None,
                 table) -> list[Refused]:
    """The changes of ``table`` (uploaded change rows) to rows the publisher holds outside the partition."""
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
        art = tracked_article(a)
        rg = d.quote(art.rowguid_column)
        for chunk in in_chunks(list(ops)):
            for (g,) in pub.query(f"SELECT m.{rg} FROM {d.table_sql(art.table)} AS m WHERE m.{rg} IN "
                                  f"({', '.join([d.uuid_param()] * len(chunk))}) AND NOT ({cond})", chunk):
                out.append(Refused(a.nickname, str(g), str(ops.get(str(g), "upsert"))))
    return out


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
                device: str, describe: str, session_id: str) -> None:
    """Each refused change as a failed-change conflict of the device, at the publisher."""
    by_nick = {a.nickname: a for a in articles}
    for r in refused:
        art = tracked_article(by_nick[r.tablenick])
        op = "delete" if r.op == "delete" else "update"
        rec = ConflictRecord(failed_type(True, op), r.tablenick, r.rowguid, "refused",
                             f"{op} refused: the row is not in the partition of {device} ({describe}); a web device "
                             "changes only rows of its partition and rows it created", origin=device, winner="")
        log_conflict(pub, pubid, publication, art, rec, device, True, session_id)
