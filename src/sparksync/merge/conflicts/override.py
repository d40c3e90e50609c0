"""Conflict override (SQL Server's conflict viewer): a logged conflict is resolved again after the fact.

``keep = "winner"`` confirms the resolution the merge agent made: nothing changes but the conflict's
``resolution``. ``keep = "loser"`` makes the losing version the winner: it is written at the publisher
as a new change by the application's path (the tracking triggers record it with a lineage above
every version of the row), so the next merge sends it to every replica, and conflict resolution can
only keep it. The losing version is the row stored in the article's conflict table (an update that
lost, or an update that lost to a delete: the row comes back) or, for a delete that lost to an update
(type 4), the delete. A failed change has no winner to override: its cause is fixed and it is
retried at every merge.
"""

from __future__ import annotations

from typing import Any

from sparksync import locks
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError
from sparksync.merge.conflicts.model import ConflictType
from sparksync.merge.conflicts.view import list_conflicts
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.articles import published_articles, upsert_by_rowguid
from sparksync.merge.tracking.pending import flush
from sparksync.merge.tracking.tracked import TrackedArticle, tracked_article
from sparksync.metadata import store
from sparksync.rows import row_key

KEEP = ("winner", "loser")


class ConflictNotResolvable(ConfigurationError):
    """The conflict does not exist, is resolved already, or its loser cannot be made the winner."""

    code = "conflict"


def resolve_conflict(topology: Topology, conflict_id: str, keep: str) -> dict[str, Any]:
    """Resolve conflict ``conflict_id`` (as listed by ``sparksync conflicts``) by keeping ``keep``."""
    if keep not in KEEP:
        raise ConfigurationError(f"--keep must be winner or loser, not {keep!r}")
    c = _find(topology, conflict_id)
    # Decided under the publication's lock: two overrides of one conflict, or one beside a merge that
    # moves its row, never both write.
    with locks.hold(topology, "conflicts --resolve", [c["publication"]]):
        return _resolve(topology, _find(topology, conflict_id), conflict_id, keep)


def _find(topology: Topology, conflict_id: str) -> dict[str, Any]:
    found = [r for r in list_conflicts(topology) if str(r["conflict_id"]) == conflict_id.strip().lower()]
    if not found:
        raise ConflictNotResolvable(f"no conflict with ID {conflict_id} (sparksync conflicts --json lists their IDs)",
                                    obj=conflict_id)
    return found[0]


def _resolve(topology: Topology, c: dict[str, Any], conflict_id: str, keep: str) -> dict[str, Any]:
    if c.get("resolution"):
        raise ConflictNotResolvable(f"conflict {conflict_id} was resolved already (kept the {c['resolution']}, "
                                    f"{c['resolved_at']})", obj=conflict_id)
    ctype = ConflictType(c["conflict_type"])
    written = "nothing"
    if keep == "loser":
        if ctype >= ConflictType.UPLOAD_INSERT_FAILED:
            raise ConflictNotResolvable(f"conflict {conflict_id} is a failed change ({ctype.label}), not a choice "
                                        "between two versions: fix its cause (sparksync conflicts --failed); it is "
                                        "tried again at every merge", obj=conflict_id)
        if c["reason_code"] == "out_of_partition":
            raise ConflictNotResolvable(f"conflict {conflict_id}: the losing change was refused because it takes the "
                                        "row out of its subscriber's partition (partition_options 1 or 3); make the "
                                        "change at the publisher instead", obj=conflict_id)
        if ctype is not ConflictType.UPDATE_WINS_DELETE and c["losing_row"] is None:
            raise ConflictNotResolvable(f"conflict {conflict_id}: the losing row was not stored", obj=conflict_id)
        with connect(topology.publisher_url, topology.publisher.name) as pub, pub.transaction():
            art = _article(pub, c)
            written = (_delete(pub, art, str(c["rowguid"])) if ctype is ConflictType.UPDATE_WINS_DELETE
                       else _write(pub, art, c["losing_row"]))
    where = c["logged_at"]
    url = topology.publisher_url if where == topology.publisher.name else \
        topology.subscriber_url(topology.subscription(where))
    with connect(url, where) as r, r.transaction():
        store.update_rows(r, "MSmerge_conflicts_info", {"resolution": keep, "resolved_at": store.utcnow()},
                          {"conflict_id": c["conflict_id"]})
    losing = c["losing_row"] or {}
    return {"conflict_id": str(c["conflict_id"]), "publication": c["publication"], "article": c["article"],
            "conflict_type": int(ctype), "kept": keep, "written_at_publisher": written,
            "row": row_key(list(losing), c["primary_key"], list(losing.values())) if losing else str(c["rowguid"])}


def _article(pub: Replica, c: dict) -> TrackedArticle:
    for a in published_articles(pub, str(c["pubid"])):
        if a.nickname == int(c["tablenick"]):
            return tracked_article(a)
    raise ConflictNotResolvable(f"conflict {c['conflict_id']}: article {c['article']} is no longer published",
                                obj=str(c["conflict_id"]))


def _write(pub: Replica, art: TrackedArticle, row: dict[str, Any]) -> str:
    """The losing row, written by the application's path (tracked): an update, or an insert when the
    row is gone (it lost to a delete)."""
    written = upsert_by_rowguid(pub, art, row)
    if written == "insert" and art.keyed:
        # back under its rowguid (kept beside the table): the flush bumps its tombstone's lineage, which then goes
        flush(pub)
        pub.execute(f"DELETE FROM {pub.meta('MSmerge_tombstone')} WHERE tablenick = {int(art.nickname)} "
                    f"AND rowguid = {pub.dialect.uuid_param()}", [str(row[art.rowguid_column])])
    return written


def _delete(pub: Replica, art: TrackedArticle, rowguid: str) -> str:
    d = pub.dialect
    cur = pub.execute(f"DELETE FROM {d.table_sql(art.table)} WHERE {identity.rows_of(d, art, d.uuid_param())}",
                      [rowguid])
    return "delete" if getattr(cur, "rowcount", 0) > 0 else "nothing"
