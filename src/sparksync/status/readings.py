"""What ``status`` says of a subscription, read from the metadata: when a waiting change was made, when the
subscription expires, its failed changes and those the publisher refused, generations waiting on open
transactions, and what its last validation concluded."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from sparksync.dialects.replica import Replica
from sparksync.merge.conflicts.model import REFUSED
from sparksync.merge.maintenance import validations
from sparksync.merge.maintenance.validations import Validation
from sparksync.merge.tracking.generations import waiting_writers
from sparksync.metadata.history import iso
from sparksync.metadata.records import GenStatus, SubscriptionRow


def generation_time(replica: Replica, generation: int | None) -> Any:
    """About when the changes of ``generation`` were made: when it was closed, or for the open
    generation, when it was opened (it has been collecting changes since); for an open generation
    of an older version, when the one before it closed."""
    if generation is None:
        return None
    gh, p = replica.meta("MSmerge_genhistory"), replica.p
    return replica.scalar(f"SELECT coalesce((SELECT coldate FROM {gh} WHERE generation = {p}), "
                          f"(SELECT max(coldate) FROM {gh} WHERE generation < {p}))", [int(generation), int(generation)])


def generation_times(replica: Replica) -> Callable[[int | None], Any]:
    """``generation_time`` on ``replica``, each generation read once (many subscriptions wait on the same)."""
    return lru_cache(maxsize=None)(lambda generation: generation_time(replica, generation))


def in_open(lowest: int | None, open_generation: int | None) -> bool:
    """The oldest waiting change is in the open generation: its time is when that generation was opened, and
    the change came later (the monitor's rating reads this)."""
    return lowest is not None and lowest == open_generation


def expires_at(retention_days: int | None, r: SubscriptionRow) -> str | None:
    """When the subscription expires if it does not merge before (its publication's retention after its
    last merge, or its creation); None: retention 0, it never expires."""
    last = r.last_sync_date or r.created_at
    if not retention_days or last is None:
        return None
    last = last if last.tzinfo is not None else last.replace(tzinfo=dt.UTC)
    return iso(last + dt.timedelta(days=retention_days))


def failed_count(replica: Replica, source_nick: int | None) -> int:
    """Changes from ``source_nick`` that failed here and wait to be tried again."""
    if source_nick is None:
        return 0
    return int(replica.scalar(f"SELECT count(*) FROM {replica.meta('MSmerge_failed_changes')} "
                              f"WHERE source_nickname = {int(source_nick)}") or 0)


def failed_counts(replica: Replica) -> dict[int, int]:
    """``failed_count`` of every source, by its nickname."""
    return {int(nick): int(n) for nick, n in replica.query(
        f"SELECT source_nickname, count(*) FROM {replica.meta('MSmerge_failed_changes')} GROUP BY source_nickname")
        if nick is not None}


def _refused_where(pub: Replica) -> str:
    return f"FROM {pub.meta('MSmerge_failed_changes')} WHERE reason LIKE {pub.p}"


def refused_claims(pub: Replica, source_nick: int | None) -> list[str]:
    """A replica's changes the publisher refused for what they claim (a lineage out of range or beyond
    what the publisher had, a version far above the row's history): its database was edited or damaged.
    One line saying so, or none."""
    if source_nick is None:
        return []
    rows = pub.query(f"SELECT count(*), min(reason) {_refused_where(pub)} AND source_nickname = {int(source_nick)}",
                     [f"{REFUSED}%"])
    n, example = rows[0] if rows else (0, None)
    return refused_line(int(n or 0), example)


def refused_by_source(pub: Replica) -> dict[int, list[str]]:
    """``refused_claims`` of every source that has any, by its nickname."""
    return {int(nick): refused_line(int(n), example) for nick, n, example in pub.query(
        f"SELECT source_nickname, count(*), min(reason) {_refused_where(pub)} GROUP BY source_nickname",
        [f"{REFUSED}%"]) if nick is not None and n}


def refused_line(n: int, example: Any) -> list[str]:
    if not n:
        return []
    return [f"the publisher refused {n} of its change(s) for what they claim ({str(example)[:300]}): its database "
            "was edited or is damaged, and those rows stay as the publisher has them"]


def waiting(replica: Replica) -> list[str]:
    """Closed generations that cannot be sent yet, and the open transactions they wait for."""
    gh = replica.meta("MSmerge_genhistory")
    unsettled = [int(g) for (g,) in replica.query(
        f"SELECT generation FROM {gh} WHERE genstatus > {GenStatus.OPEN:d} AND settled = 0 ORDER BY generation")]
    return [w.describe() for w in waiting_writers(replica, unsettled)]


def validation(pub: Replica, pubid: str, entry: dict[str, Any], way_out: str,
               newest: Validation | None | bool = True) -> None:
    """The subscription's last validation and its age; a subscription whose last conclusive validation failed
    has diverged from its partition (unless something worse is already said of it). ``newest``: its newest
    validation when already read (``validations.latest``), True to read it here."""
    if newest is True:
        newest = validations.last(pub, pubid, entry["name"])
    if not isinstance(newest, Validation):
        return
    entry["validation"] = newest.to_dict()
    conclusive = newest if newest.result != validations.INCONCLUSIVE else validations.last(pub, pubid, entry["name"], True)
    entry["diverged"] = conclusive is not None and conclusive.result == validations.FAILED
    if conclusive is None or not entry["diverged"]:
        return
    said = f"its validation of {iso(conclusive.validated_at)} ({conclusive.how}) failed: {conclusive.message}; {way_out}"
    if entry.get("status") == "active":
        entry["status"] = "diverged"
        entry["problems"] = [said]
    else:                      # stopped, damaged, ...: what is worse is its state, and its divergence is said too
        entry["problems"] = [*(entry.get("problems") or [entry.get("last_error") or entry.get("message") or
                                                          entry.get("status", "")]), said]
