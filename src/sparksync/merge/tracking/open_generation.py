"""The open generation: the one new changes are stamped with, and its row in ``MSmerge_genhistory``.

The flush (``pending.py``) writes what applications changed into it; ``generations.make_generation``
closes it and opens the next. Both make sure it exists here first (:func:`ensure_open_generation`).
"""

from __future__ import annotations

from sparksync.dialects.protocols import MergeHooks
from sparksync.dialects.replica import Replica
from sparksync.metadata import store
from sparksync.metadata.records import GenerationRow, GenStatus


def max_generation(replica: Replica) -> int:
    """The highest generation in ``MSmerge_genhistory`` (0 when there is none)."""
    return int(replica.scalar(f"SELECT coalesce(max(generation), 0) FROM {replica.meta('MSmerge_genhistory')}") or 0)


def insert_open(replica: Replica, generation: int, nickname: int, pubid: str | None = None) -> None:
    """Record ``generation`` as open (the caller makes it the dialect's open generation)."""
    store.insert(replica, GenerationRow(
        generation=generation, guidsrc=store.new_guid(), pubid=pubid, genstatus=GenStatus.OPEN, settled=1,
        nicknames=[nickname], changecount=0, coldate=store.utcnow()))    # opened now; closing sets it again


def ensure_open_generation(replica: Replica, nickname: int) -> int:
    """Make sure an open generation exists and new changes go to it. Inside a transaction."""
    d: MergeHooks = replica.dialect
    g = d.current_open_generation(replica)
    if g is not None:
        g = int(g)
        row = store.select_one(replica, GenerationRow, {"generation": g})
        if row is not None and row.genstatus is GenStatus.OPEN:
            return g
        if row is None and g > max_generation(replica):
            insert_open(replica, g, nickname)
            d.set_open_generation(replica, g)
            return g
    new = max_generation(replica) + 1
    insert_open(replica, new, nickname)
    d.set_open_generation(replica, new)
    return new
