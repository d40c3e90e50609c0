"""A device file restored from an older copy (a backup, a reimaged till, a file copied back), found and
recovered on the device, as SQL Server synchronizes a restored subscriber: the publisher sends again what
the copy lacks, and the copy's own changes since are uploaded as new ones.

The publisher records what it received from the device (its ``recgen`` of the device's generations) and
what the device applied (its ``sentgen``). A file that went back in time is behind them: its open
generation is one the publisher already received (its new changes would reuse generation numbers the
publisher has, and be taken for them: "0 to send"), and the changes it made after the copy and uploaded
came back to it never (they carry its replica nickname, which a download leaves out as its own). Its
lineage is behind too: a row changed again after the restore can carry a version of the device that the
publisher already holds with other values.

Recovery (``recover``), when ``restored`` finds it:

1. The door (``Door.recover``) gives the subscription a new replica nickname, sets its watermarks to what the
   file says it holds (uploads from the file's ``sentgen``, downloads from its ``recgen``), moves the
   device's failed changes to the new nickname and records the recovery (``MSweb_recoveries``). Refused,
   naming the way out, where it cannot be done safely (the publisher's metadata cleanup passed the file's
   watermark).
2. The file, in one transaction (``restamp``, from ``subscriber.finish_recovery``): every change it made
   after its ``sentgen`` (what it may not have uploaded, or made after the copy) is stamped again as a
   change of the new nickname (the old nickname's entry, which the publisher may know with other values,
   leaves its lineage and column versions), and the file takes the new nickname.

The upload then sends those changes (a row the publisher also changed since is a conflict, settled by the
article's rules and logged: never taken for a version the publisher has), and the download brings what the
file lacks, its own uploads since the copy included (they carry the old nickname, not the new one). A
recovery interrupted between the two steps is finished by the next sync (``hello`` lists the recoveries
of the current nickname).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sparksync.dialects.replica import Replica
from sparksync.merge.tracking.lineage import parse, to_json
from sparksync.merge.tracking.pending import flush
from sparksync.metadata import store
from sparksync.metadata.records import GenerationRow, GenStatus, ReplicaRow, Role, SubscriptionRow


@dataclass(frozen=True)
class FileState:
    """What a device file says of itself: its replica nickname, what it uploaded and received."""

    nickname: int
    sentgen: int
    recgen: int
    open_generation: int

    def as_request(self) -> dict[str, int]:
        """What the publisher's ``recover`` takes of it."""
        return {"nickname": self.nickname, "sentgen": self.sentgen, "recgen": self.recgen}


def file_state(device: Replica, pubid: str) -> FileState | None:
    ident = store.replica_identity(device)
    partner = store.select_one(device, SubscriptionRow, {"pubid": pubid, "role": Role.PUBLISHER})
    if ident is None or partner is None:
        return None
    return FileState(int(ident.nickname), int(partner.sentgen or 0), int(partner.recgen or 0),
                     int(device.dialect.current_open_generation(device) or 0))


def restored(state: FileState, nickname: int, recgen: int | None) -> bool:
    """The file went back in time: its open generation is one the publisher already received from it (an
    honest file's is always above: the publisher records a generation only after the file closed it).
    ``nickname``, ``recgen``: the subscription's replica nickname and watermark at the publisher."""
    return state.nickname == int(nickname) and 0 < state.open_generation <= int(recgen or 0)


def interrupted(state: FileState, nickname: int, recoveries: Iterable[Sequence[int]]) -> bool:
    """The publisher recovered this file (its nickname and watermarks as the file has them) and the file did
    not take its new nickname yet (the sync stopped between the two steps). ``nickname``: the subscription's
    at the publisher; ``recoveries``: [old nickname, sentgen, recgen] of the files recovered to it."""
    return state.nickname != int(nickname) and \
        (state.nickname, state.sentgen, state.recgen) in [tuple(r) for r in recoveries]


def restamp(device: Replica, old: int, new: int, after: int) -> int:
    """Every local change of the file after generation ``after`` stamped again as a change of replica ``new``
    (its lineage without ``old``'s entry, plus ``new`` at the row's highest version + 1; its column versions
    of ``old`` moved to that version of ``new``), and the file's identity moved to ``new``. One
    transaction; the tracking log flushed first (what it holds was written before the recovery). Returns
    the changes stamped again."""
    flush(device)
    gh = device.meta("MSmerge_genhistory")
    p = device.p
    n = 0
    with device.transaction():
        local = (f"generation > {p} AND generation NOT IN (SELECT generation FROM {gh} "
                 f"WHERE genstatus = {GenStatus.RECEIVED:d})")
        for table, has_colv in (("MSmerge_contents", True), ("MSmerge_tombstone", False)):
            t = device.meta(table)
            rows = device.query(f"SELECT tablenick, rowguid, lineage{', colv' if has_colv else ''} FROM {t} "
                                f"WHERE {local}", [after])
            changed = []
            for row in rows:
                lineage = parse(row[2])
                top = max(lineage.values(), default=0) + 1
                lineage.pop(old, None)
                lineage[new] = top
                params = [device.dialect.json_param(to_json(lineage))]
                if has_colv:
                    colv = _restamp_colv(row[3], old, new, top)
                    params.append(None if colv is None else device.dialect.json_param(colv))
                changed.append([*params, row[0], row[1]])
            if changed:
                sets = "lineage = " + p + (", colv = " + p if has_colv else "")
                device.executemany(f"UPDATE {t} SET {sets} WHERE tablenick = {p} AND rowguid = "
                                   f"{device.dialect.uuid_param()}", changed)
            n += len(changed)
        for g in store.select(device, GenerationRow):
            if g.generation > after and g.genstatus is not GenStatus.RECEIVED and g.nicknames == [old]:
                store.update(device, GenerationRow, {"nicknames": [new]}, {"generation": g.generation})
        store.update(device, ReplicaRow, {"replnickname": new}, {"id": 1})
        store.update(device, SubscriptionRow, {"replnickname": new}, {"role": Role.SUBSCRIBER, "replnickname": old})
    return n


def _restamp_colv(colv, old: int, new: int, version: int) -> dict | None:
    if colv is None:
        return None
    value = json.loads(colv) if isinstance(colv, str | bytes) else colv
    return {c: ([new, version] if isinstance(e, list) and e and int(e[0]) == old else e) for c, e in value.items()}
