"""What a remote subscriber (a web device) is told of each uploaded change the publisher did not simply apply:
its *fate*, for the device's outbox (``merge/session/remote/outbox.py``).

* ``won``: a conflict the device's version won (logged at the publisher all the same);
* ``lost``: a conflict its version lost: the conflict's id at the publisher, the winner, and the winning row as
  the publisher holds it after the conflict (JSON text as change rows carry it, ``rows.RowCodec``; none when the
  winning version is the row's deletion);
* ``failed``: the publisher's database refused the row (a value it cannot hold, a constraint): kept among the
  failed changes there and sent again at every sync until it applies;
* ``refused``: a change the publisher will not take from this device: a claim (lineage) it refused, or a row
  outside its partition; the latter is told by the change's position in the upload only (``refused_at`` of the
  reply), so that the answer is the same whether the row exists elsewhere or nowhere;
* ``replaced``: a business logic handler at the publisher applied a row of its own instead (a delete kept as a
  soft delete, values rewritten): the reason names the handler; the row comes back to the device with the
  download, as a new version made at the publisher.

Every other change of the upload was applied.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from sparksync.dialects.replica import Replica, in_chunks
from sparksync.merge.apply.staging import MISFIT
from sparksync.merge.conflicts.model import REFUSED, ConflictRecord, ConflictType
from sparksync.merge.tracking import identity
from sparksync.merge.tracking.tracked import TrackedArticle
from sparksync.metadata import store
from sparksync.metadata.records import FailedChangeRow
from sparksync.rows import RowCodec

Fate = Literal["won", "lost", "failed", "refused", "replaced"]
REFUSED_CODES = frozenset({"refused", "out_of_partition"})


def fate_of(record: ConflictRecord, device: str) -> Fate:
    """The fate of the device's change that ``record`` (a conflict or failed change of its upload) is about."""
    if record.conflict_type >= ConflictType.UPLOAD_INSERT_FAILED:
        refused = str(record.reason_code) in REFUSED_CODES or record.reason_text.startswith(REFUSED) or \
            "refused" in record.reason_text.split(":")[0]
        return "refused" if refused else "failed"
    return "won" if record.winner == device else "lost"


def winner_rows(pub: Replica, articles: dict[int, TrackedArticle],
                keys: Iterable[tuple[int, str]]) -> dict[tuple[int, str], tuple[str | None, str | None]]:
    """The publisher's version of ``keys`` ([article nickname, rowguid]): (the row as JSON text (``RowCodec``), or
    None for a deleted row; its lineage as JSON text). Read in the upload's transaction, after it applied."""
    wanted: dict[int, list[str]] = {}
    for nick, guid in keys:
        if nick in articles:
            wanted.setdefault(nick, []).append(str(guid))
    out: dict[tuple[int, str], tuple[str | None, str | None]] = {}
    d = pub.dialect
    for nick, guids in wanted.items():
        art = articles[nick]
        cols = list(art.info.columns)
        codec = RowCodec([(c.name, c.type) for c in cols])
        rg = d.quote(art.rowguid_column)
        at = [i for i, c in enumerate(cols) if c.name == art.rowguid_column][0]
        for chunk in in_chunks(guids):
            inlist = ", ".join([d.uuid_param()] * len(chunk))
            for r in pub.query(f"SELECT {', '.join('t.' + d.quote(c.name) for c in cols)}, c.lineage FROM "
                               f"{identity.rows_sql(d, art)} t LEFT JOIN {pub.meta('MSmerge_contents')} c ON c.tablenick = "
                               f"{int(nick)} AND c.rowguid = t.{rg} WHERE t.{rg} IN ({inlist})", chunk):
                out[(nick, str(r[at]).lower())] = (_json_row(codec, [c.name for c in cols], r[:len(cols)]),
                                                   _lineage(r[len(cols)]))
            for guid, lineage in pub.query(f"SELECT rowguid, lineage FROM {pub.meta('MSmerge_tombstone')} WHERE "
                                           f"tablenick = {int(nick)} AND rowguid IN ({inlist})", chunk):
                out.setdefault((nick, str(guid).lower()), (None, _lineage(lineage)))
    return out


def _lineage(value: Any) -> str | None:
    return None if value is None else value if isinstance(value, str) else json.dumps(value)


def _json_row(codec: RowCodec, names: list[str], values: Any) -> str:
    return "{" + ",".join(f"{json.dumps(n)}:{codec.value_json(i, v)}" for i, (n, v) in enumerate(zip(names, values))) + "}"


def fates(pub: Replica, records: list[ConflictRecord], articles: dict[int, TrackedArticle], names: dict[int, str],
          device: str, failing: dict[tuple[int, str], FailedChangeRow],
          replaced: Iterable[Sequence[Any]] = ()) -> list[dict[str, Any]]:
    """The ``conflicts`` of an upload's reply (``web.protocol.UploadConflictReply``): each record, with its fate,
    its id at the publisher and, for a conflict the device lost, the winning row; then the upload's changes that
    failed again (``failing``: the device's failed changes among them, logged as a conflict the first time only),
    each with its attempts; then the changes a handler's row replaced (``replaced``: [article nickname, rowguid,
    why], ``BatchOutcome.replaced``)."""
    lost = [(r.tablenick, str(r.rowguid).lower()) for r in records if fate_of(r, device) == "lost"]
    rows = winner_rows(pub, articles, lost) if lost else {}
    logged = {(r.tablenick, str(r.rowguid).lower()) for r in records}
    records = records + [ConflictRecord(ConflictType(f.conflict_type), f.tablenick, str(f.rowguid), "failed", f.reason,
                                        origin=device, winner="") for k, f in failing.items() if k not in logged]
    out = []
    for r in records:
        fate = fate_of(r, device)
        row, lineage = rows.get((r.tablenick, str(r.rowguid).lower()), (None, None)) if fate == "lost" else (None, None)
        out.append({"article": names.get(r.tablenick, ""), "rowguid": r.rowguid, "type": int(r.conflict_type),
                    "reason": reason_for_device(r), "winner": r.winner, "fate": fate, "conflict_id": r.conflict_id,
                    "winner_row": row, "winner_lineage": lineage, "columns": list(r.columns or []),
                    "attempts": int(f.attempts) if (f := failing.get((r.tablenick, str(r.rowguid).lower()))) else None})
    out += [{"article": names.get(int(nick), ""), "rowguid": str(guid), "type": 0, "reason": str(why), "winner": "",
             "fate": "replaced", "conflict_id": None, "winner_row": None, "winner_lineage": None, "columns": [],
             "attempts": None} for nick, guid, why in replaced]
    return out


def failing(pub: Replica, nickname: int, rows: Any) -> dict[tuple[int, str], FailedChangeRow]:
    """Of an upload's change rows (an Arrow table), the ones that are failed changes of replica ``nickname`` at the
    publisher once it applied them (read in its transaction)."""
    if rows is None or not rows.num_rows:
        return {}
    sent = {(int(n), str(g).lower()) for n, g in zip(rows.column("tablenick").to_pylist(),
                                                      rows.column("rowguid").to_pylist())}
    return {k: f for f in store.select(pub, FailedChangeRow, {"source_nickname": nickname})
            if (k := (int(f.tablenick), str(f.rowguid).lower())) in sent}


def positions(rows: Any) -> dict[tuple[int, str], int]:
    """Each change row's position in an upload (an Arrow table), by [article nickname, rowguid] (the last one when
    a row is there twice: sent again and changed since)."""
    return {(int(n), str(g).lower()): i for i, (n, g) in enumerate(zip(rows.column("tablenick").to_pylist(),
                                                                      rows.column("rowguid").to_pylist()))}


def reason_for_device(record: ConflictRecord) -> str:
    """A failed change's reason said without the database's own words (a message of the publisher's database can
    quote values of rows the device may not see)."""
    if record.conflict_type < ConflictType.UPLOAD_INSERT_FAILED or "refused" in record.reason_text.split(":")[0] \
            or MISFIT in record.reason_text:
        return record.reason_text           # a conflict, a claim of the device's refused, a value of its own row that
        #                                     does not fit its column (staging.refusal): about its own row
    op = record.conflict_type.label.split()[1]            # "upload insert failed" -> "insert"
    return (f"{op} failed at the publisher: its database refused the row ({record.reason_code}); it is tried "
            "again at the next sync")
