"""A device file restored from an older copy, recovered at the publisher (the device's side:
``restored.py``).

The subscription gets a new replica nickname (the file's changes since its ``sentgen`` are uploaded as that
replica's), its watermarks are set to what the file says it holds (downloads from its ``recgen``: what it
lacks comes again, its own uploads since the copy included, which carry the old nickname), the device's
failed changes move to the new nickname, its upload replies go (their ranges are the old nickname's), and
the recovery is recorded (``MSweb_recoveries``): the same request again gets the same answer. Refused,
naming the way out, where it cannot be done safely: the publisher's metadata cleanup passed the file's
watermark (what it lacks cannot be told apart from what it holds), or a newer file has synced since.
"""

from __future__ import annotations

from sparksync.dialects.replica import Replica
from sparksync.errors import NotInitialized, ProtocolError, ReplicaBehind
from sparksync.metadata import store
from sparksync.metadata.records import FailedChangeRow, PublicationRow, SubscriptionRow
from sparksync.progress import Reporter

WAY_OUT = "initialize a new file (sparksync sync --reinitialize)"


def recover_file(pub: Replica, prow: PublicationRow, reg: SubscriptionRow, name: str, nickname: int, sentgen: int,
                 recgen: int, report: Reporter) -> int:
    """Recover subscription ``name``'s file (its replica ``nickname``, what it uploaded, ``sentgen``, and
    received, ``recgen``, by its own record), in the caller's transaction. Returns the new nickname."""
    pub.query_one(f"SELECT 1 FROM {pub.meta('sysmergesubscriptions')} WHERE subid = "
                  f"{pub.dialect.uuid_param()}{pub.dialect.row_lock_clause()}", [reg.subid])
    done = store.select_rows(pub, "MSweb_recoveries", {"subscription": name, "old_nickname": nickname})
    if done:
        if [done[0]["sentgen"], done[0]["recgen"]] != [sentgen, recgen] or done[0]["new_nickname"] != reg.replnickname:
            raise ReplicaBehind(f"{name}: a file of replica {nickname} was recovered before from another state; this "
                                f"one cannot be: {WAY_OUT}", obj=name)
        return int(reg.replnickname)
    if not reg.active:
        raise NotInitialized(f"subscription {name} is not initialized yet", obj=name)
    have_from, sent_to = int(reg.recgen or 0), int(reg.sentgen or 0)
    if nickname != reg.replnickname:
        raise ReplicaBehind(f"{name}: the file is replica {nickname}, but the subscription is replica "
                            f"{reg.replnickname} now (a newer file has synced since): {WAY_OUT}", obj=name)
    if not 0 <= sentgen < have_from:
        raise ProtocolError(f"{name}: a recovery of a file that uploaded up to generation {sentgen}, while the "
                            f"publisher has its changes up to {have_from}: not an older copy", obj=name)
    start = min(recgen, sent_to)
    cleaned = prow.cleanup_generation
    if cleaned is not None and start < cleaned:
        raise ReplicaBehind(
            f"{name}: the file is an older copy of itself (restored from a backup?), older than the publisher's "
            f"metadata cleanup (generation {cleaned} > its {start}): what it lacks cannot be told apart from what "
            "it holds. Initialize a new file: 'sparksync sync --reinitialize --upload-first' (its changes are "
            "uploaded first)", obj=name)
    new = store.next_nickname(pub)
    store.note_nickname(pub, new)
    store.update(pub, SubscriptionRow, {"replnickname": new, "recgen": sentgen, "sentgen": start}, {"subid": reg.subid})
    store.update(pub, FailedChangeRow, {"source_nickname": new}, {"source_nickname": nickname})
    store.delete_rows(pub, "MSweb_uploads", {"subscription": name})
    store.insert_row(pub, "MSweb_recoveries", {
        "subscription": name, "old_nickname": nickname, "new_nickname": new, "sentgen": sentgen, "recgen": recgen,
        "publisher_recgen": have_from, "publisher_sentgen": sent_to, "recovered_at": store.utcnow()})
    report(f"{name}: its file is an older copy of itself (it uploaded up to generation {sentgen}, the publisher "
           f"has up to {have_from}): recovered as replica {new} (was {nickname}); its changes since are uploaded "
           f"again, what it lacks is downloaded from generation {start}")
    return new


def recoveries(pub: Replica, name: str, nickname: int) -> list[list[int]]:
    """[old nickname, sentgen, recgen] of subscription ``name``'s files recovered to replica ``nickname``, as
    ``hello`` tells the device."""
    return [[r["old_nickname"], r["sentgen"], r["recgen"]] for r in store.select_rows(
        pub, "MSweb_recoveries", {"subscription": name, "new_nickname": nickname})]
