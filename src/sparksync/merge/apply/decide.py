"""What to do with one incoming change at a destination (sp_MSgetmetadata + conflict detection).

Pure: given the incoming version and what the destination holds, return a Decision. The caller
applies it inside the destination's transaction.

* The incoming lineage dominates -> apply it (insert, update or delete).
* It is dominated or equal -> skip: the destination already has it (or something newer).
* Neither -> a conflict, resolved by the article's resolver. The result is a new version (lineage:
  both merged, plus one more change at the destination) that goes back to the source too, so every
  replica converges on it.
* Column tracking: concurrent updates of *different* columns are not a conflict; both edits are kept.
  When some columns conflict, only those are resolved and every other column edit from both sides is
  kept (SQL Server overwrites the whole row).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparksync.merge.conflicts.model import ConflictRecord, ConflictType
from sparksync.merge.conflicts.resolvers import Replicas, Resolution, Side, resolve
from sparksync.merge.tracking import lineage as lin


@dataclass(frozen=True)
class Incoming:
    op: str                              # "upsert" | "delete"
    rowguid: str
    values: dict[str, Any] | None
    lineage: lin.Lineage
    colv: Mapping[str, Any] | None
    source: int                          # nickname of the replica that sent it
    compensating: bool = False           # a delete the agent made to undo a change (changes.COMPENSATING_COLV)


@dataclass
class Local:
    exists: bool                         # the row is in the destination's table
    lineage: lin.Lineage | None          # MSmerge_contents lineage (None: no contents row)
    colv: Mapping[str, Any] | None
    tombstone: lin.Lineage | None        # MSmerge_tombstone lineage, when deleted here
    load_values: Callable[[], dict[str, Any] | None] = lambda: None


@dataclass
class Decision:
    action: str                          # "skip" | "upsert" | "delete" | "tombstone"
    values: dict[str, Any] | None = None
    lineage: lin.Lineage = field(default_factory=dict)
    colv: dict[str, Any] | None = None
    send_back: bool = False              # a new version the source must receive too
    conflict: ConflictRecord | None = None
    replaced: str | None = None          # a business logic handler's own row applied instead of the change: why


@dataclass(frozen=True)
class ArticleRules:
    tablenick: int
    column_tracking: bool
    resolver: str = "default"
    resolver_column: str | None = None
    compensate_for_errors: bool = False
    resolver_search: str | None = None     # where a user resolver's module is imported from (config folder)
    business_logic: str | None = None      # the article's business logic handler, module:Class (handling.py)
    business_logic_timeout_s: float = 2.0  # how long one of its calls may take (handling.py)


def _sides(upload: bool, local: Side, incoming: Side) -> tuple[Side, Side]:
    return (local, incoming) if upload else (incoming, local)


def _side(values, lineage_, replicas: Replicas, reached: bool) -> Side:
    return Side(values, lineage_, replicas.version_priority(lineage_, reached), replicas.name(lin.last_writer(lineage_)))


def _winner_lineage(local_lin: lin.Lineage, incoming_lin: lin.Lineage, dest: int) -> lin.Lineage:
    return lin.bump(lin.merge(local_lin, incoming_lin), dest)


def decide(change: Incoming, local: Local, rules: ArticleRules, replicas: Replicas, dest: int, upload: bool) -> Decision:
    """Decide one change. ``upload`` is True when the destination is the publisher."""
    local_deleted = local.tombstone is not None and not local.exists
    local_lin: lin.Lineage = (local.tombstone or {}) if local_deleted else (local.lineage or {})

    if change.op == "delete":
        if local_deleted or (not local.exists and local.lineage is None):
            # Deleted on both sides (or never here): keep the delete's metadata, merged.
            if local_deleted and lin.dominates(local_lin, change.lineage):
                return Decision("skip")
            return Decision("tombstone", lineage=lin.merge(local_lin, change.lineage))
        rel = lin.compare(change.lineage, local_lin)
        if rel in (lin.Relation.INCOMING_NEWER, lin.Relation.EQUAL):
            return Decision("delete", lineage=dict(change.lineage))
        if rel is lin.Relation.LOCAL_NEWER:
            return Decision("skip")
        return _update_delete(change, local, rules, replicas, dest, upload, deleted_side="incoming")

    # upsert
    if not local_deleted and not local.exists:
        return _take(change)
    rel = lin.compare(change.lineage, local_lin)
    if rel is lin.Relation.INCOMING_NEWER:
        return _take(change)
    if rel in (lin.Relation.EQUAL, lin.Relation.LOCAL_NEWER):
        return Decision("skip")
    if local_deleted:
        return _update_delete(change, local, rules, replicas, dest, upload, deleted_side="local")
    if (rules.column_tracking and change.colv is not None and local.colv is not None
            and _explained(change.lineage, change.colv, local_lin) and _explained(local_lin, local.colv, change.lineage)):
        return _column_level(change, local, rules, replicas, dest, upload)
    return _row_level(change, local, rules, replicas, dest, upload)


def _take(change: Incoming) -> Decision:
    """Apply the incoming version as it is."""
    return Decision("upsert", dict(change.values or {}), dict(change.lineage),
                    dict(change.colv) if change.colv is not None else None)


def _explained(side: lin.Lineage, colv: Mapping[str, Any], other: lin.Lineage) -> bool:
    """When a side has changes the other has not seen, its column versions must show at least one of
    them; if not (metadata from an older writer), only row-level resolution is safe."""
    unseen = any(v > other.get(n, 0) for n, v in side.items())
    return not unseen or any(e and not lin.knows(other, e) for e in colv.values())


def _pub_sub(upload: bool, change: Incoming, dest: int, replicas: Replicas, local_values, local_lin: lin.Lineage,
             incoming_values, incoming_lin: lin.Lineage) -> tuple[Side, Side]:
    """The two versions as (publisher's, subscriber's). A subscriber-side version has reached the
    publisher unless its last change was made at that subscriber (then a local subscription's change
    still has priority 0)."""
    sub_nick = change.source if upload else dest

    def reached(is_publisher_side: bool, lineage_: lin.Lineage) -> bool:
        return True if is_publisher_side else lin.last_writer(lineage_) != sub_nick

    loc = _side(local_values, local_lin, replicas, reached(upload, local_lin))
    inc = _side(incoming_values, incoming_lin, replicas, reached(not upload, incoming_lin))
    return _sides(upload, loc, inc)


def _row_level(change: Incoming, local: Local, rules: ArticleRules, replicas: Replicas, dest: int, upload: bool) -> Decision:
    local_values = local.load_values()
    local_lin = local.lineage or {}
    pub, sub = _pub_sub(upload, change, dest, replicas, local_values, local_lin, change.values, change.lineage)
    res = resolve(rules.resolver, rules.resolver_column, pub, sub, "update", rules.resolver_search)
    return _resolved(res, pub, sub, ConflictType.UPDATE, change, local_lin, local.colv, rules, dest, [], upload)


def _resolved(res: Resolution, pub: Side, sub: Side, ctype: ConflictType, change: Incoming, local_lin: lin.Lineage,
              local_colv, rules: ArticleRules, dest: int, columns: list[str], upload: bool) -> Decision:
    new_lin = _winner_lineage(local_lin, change.lineage, dest)
    loser = sub if res.winner == "publisher" else pub if res.winner == "subscriber" else None
    record = ConflictRecord(
        conflict_type=ctype, tablenick=rules.tablenick, rowguid=change.rowguid, reason_code=int(ctype),
        reason_text=res.reason, origin=(loser.replica if loser else f"{pub.replica}, {sub.replica}"),
        winner=(pub.replica if res.winner == "publisher" else sub.replica if res.winner == "subscriber" else "resolver"),
        losing_row=(dict(loser.values) if loser is not None and loser.values is not None else None),
        columns=columns)
    if res.values is None:
        return Decision("delete", None, new_lin, None, send_back=True, conflict=record)
    colv = None
    if rules.column_tracking:
        colv = dict(local_colv or {})
        colv.update(change.colv or {})
        loc_colv, inc_colv = dict(local_colv or {}), dict(change.colv or {})
        pub_colv, sub_colv = (loc_colv, inc_colv) if upload else (inc_colv, loc_colv)
        for c in (columns or res.values.keys()):
            colv[c] = _column_version(res.winner, c, pub_colv, sub_colv, dest, new_lin)
    return Decision("upsert", dict(res.values), new_lin, colv, send_back=True, conflict=record)


def _column_version(winner: str, column: str, pub_colv: Mapping[str, Any], sub_colv: Mapping[str, Any], dest: int,
                    new_lin: lin.Lineage):
    """The column version of a resolved column: the winning side's (its writer keeps it), or a new one
    made here when the resolver produced the value (or the winner has no version of the column)."""
    side = pub_colv if winner == "publisher" else sub_colv if winner == "subscriber" else {}
    return side.get(column) or [dest, new_lin[dest]]


def _update_delete(change: Incoming, local: Local, rules: ArticleRules, replicas: Replicas, dest: int, upload: bool,
                   deleted_side: str) -> Decision:
    local_lin = (local.tombstone if deleted_side == "local" else local.lineage) or {}
    local_values = None if deleted_side == "local" else local.load_values()
    incoming_values = None if deleted_side == "incoming" else change.values
    pub, sub = _pub_sub(upload, change, dest, replicas, local_values, local_lin, incoming_values, change.lineage)
    res = resolve(rules.resolver, rules.resolver_column, pub, sub, "update delete", rules.resolver_search)
    ctype = ConflictType.UPDATE_DELETE_WINS if res.values is None else ConflictType.UPDATE_WINS_DELETE
    return _resolved(res, pub, sub, ctype, change, local_lin, local.colv, rules, dest, [], upload)


def _column_level(change: Incoming, local: Local, rules: ArticleRules, replicas: Replicas, dest: int,
                  upload: bool) -> Decision:
    local_lin = local.lineage or {}
    local_values = local.load_values() or {}
    incoming_values = change.values or {}
    inc_colv, loc_colv = dict(change.colv or {}), dict(local.colv or {})
    inc_changed = {c for c, e in inc_colv.items() if not lin.knows(local_lin, e)}
    loc_changed = {c for c, e in loc_colv.items() if not lin.knows(change.lineage, e)}
    conflicting = sorted(c for c in inc_changed & loc_changed if local_values.get(c) != incoming_values.get(c))
    merged = dict(local_values)
    for c in inc_changed - set(conflicting):
        merged[c] = incoming_values.get(c)
    new_lin = _winner_lineage(local_lin, change.lineage, dest)
    # Every column version keeps the replica that wrote it: the merged version's lineage dominates
    # both sides, so each side takes it whole; crediting a column to this replica instead would make
    # its writer's next edit of it look concurrent with its own older one (and lose).
    colv = dict(loc_colv)
    for c in inc_changed:
        colv[c] = inc_colv[c]
    if not conflicting:
        return Decision("upsert", merged, new_lin, colv, send_back=True)
    pub, sub = _pub_sub(upload, change, dest, replicas, local_values, local_lin, incoming_values, change.lineage)
    res = resolve(rules.resolver, rules.resolver_column, pub, sub, "column update", rules.resolver_search)
    if res.values is None:
        return _resolved(res, pub, sub, ConflictType.COLUMN_UPDATE, change, local_lin, local.colv, rules, dest,
                         conflicting, upload)
    pub_colv, sub_colv = (loc_colv, inc_colv) if upload else (inc_colv, loc_colv)
    for c in conflicting:
        merged[c] = res.values.get(c)
        colv[c] = _column_version(res.winner, c, pub_colv, sub_colv, dest, new_lin)
    loser = sub if res.winner == "publisher" else pub if res.winner == "subscriber" else None
    record = ConflictRecord(
        conflict_type=ConflictType.COLUMN_UPDATE, tablenick=rules.tablenick, rowguid=change.rowguid,
        reason_code=int(ConflictType.COLUMN_UPDATE), reason_text=res.reason + f" (columns {', '.join(conflicting)}; "
        "other column edits from both sides kept)",
        origin=(loser.replica if loser else f"{pub.replica}, {sub.replica}"),
        winner=(pub.replica if res.winner == "publisher" else sub.replica if res.winner == "subscriber" else "resolver"),
        losing_row=dict(loser.values) if loser is not None and loser.values is not None else None, columns=conflicting)
    return Decision("upsert", merged, new_lin, colv, send_back=True, conflict=record)
