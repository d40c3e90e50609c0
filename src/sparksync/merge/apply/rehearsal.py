"""A batch rehearsed before it is applied, so no business logic handler runs while the destination's write lock is
held, where that lock is the whole database's (SQLite: ``Capabilities.concurrent_writers`` false; one slow handler
there would make the publisher's own application fail with "database is locked" and every other device wait).

The rehearsal plans the batch (``classify.plan_batch`` with ``rehearsal``: staged and classified in a connection
of its own, in a read transaction that is rolled back, nothing locked or flushed): every handler call the apply
will make is made then, and its answer kept by the handler's ``Handling`` (``remember``), keyed by the method and
the rows it was given (a handler is a function of them). The apply, inside the lock, finds the answers; a call it
makes with other rows (a row written locally in between) is made there, bounded like any other.

The rehearsal runs in a thread, watched: a handler call that runs past ``business_logic_timeout_s`` is left
behind (the thread ends whenever the call does, its connection with it) and every call not answered by then
fails at once in the apply, its change a failed change tried again at the next merge or sync. A rehearsal that
fails for any other reason changes nothing: the apply decides everything itself, as it always did.
"""

from __future__ import annotations

import copy
import logging
import threading

from sparksync.dialects.replica import Replica
from sparksync.merge.apply.classify import handling_of, plan_batch
from sparksync.merge.apply.handling import Handling
from sparksync.merge.apply.outcome import BatchOutcome
from sparksync.merge.session.changes import ArticleChanges
from sparksync.merge.session.plan import ApplyContext, BatchInfo, DestinationInfo
from sparksync.merge.tracking import pending

log = logging.getLogger(__name__)
WATCH_S = 0.05           # how often the watchdog looks at the call in progress


def handlings_of(ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo, changes: dict[int, ArticleChanges],
                 articles: dict, outcome: BatchOutcome) -> dict[int, Handling]:
    """The handlers of the batch's articles that have one, by article nickname (``classify.handling_of``)."""
    return {nick: h for nick in changes if nick in articles and
            (h := handling_of(ctx, dest, batch, articles[nick].article, outcome)) is not None}


def rehearsed(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
              changes: dict[int, ArticleChanges], articles: dict) -> dict[int, Handling]:
    """The batch's handlers, rehearsed when ``needed``, before the caller takes the write lock; ``apply_batch``
    takes them (what they logged moves to its outcome)."""
    handlings = handlings_of(ctx, dest, batch, changes, articles, BatchOutcome("applied"))
    if needed(replica, handlings):
        rehearse(replica, ctx, dest, batch, changes, articles, handlings)
    return handlings


def needed(replica: Replica, handlings: dict[int, Handling]) -> bool:
    """Whether a batch with these handlers is rehearsed at this destination."""
    return bool(handlings) and not replica.dialect.capabilities.concurrent_writers


def rehearse(replica: Replica, ctx: ApplyContext, dest: DestinationInfo, batch: BatchInfo,
             changes: dict[int, ArticleChanges], articles: dict, handlings: dict[int, Handling]) -> None:
    """Make the batch's handler calls before the apply takes the write lock (the module's doc)."""
    for h in handlings.values():
        h.remember()
    mine = {nick: copy.copy(cc) for nick, cc in changes.items()}       # planning moves an ArticleChanges' cursor

    def run() -> None:
        try:
            with replica.dialect.connect(replica.url, f"{replica.label} (rehearsal)") as r:
                r.execute("BEGIN")                  # deferred: it only reads, and writes its own temporary tables
                pending.rehearsing(r)
                try:
                    plan_batch(r, ctx, dest, batch, mine, articles, BatchOutcome("applied"), handlings, rehearsal=True)
                finally:
                    r.rollback()
        except Exception as e:  # noqa: BLE001 - the apply decides everything itself
            log.warning("%s: batch %s not rehearsed (%s: %s)", dest.name, batch.seq, type(e).__name__, e)

    thread = threading.Thread(target=run, name=f"sparksync-rehearsal-{dest.name}", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(WATCH_S)
        late = [h for h in handlings.values() if h.overran()]
        if late:
            log.warning("%s: %s", dest.name, late[0].overdue)
            return
