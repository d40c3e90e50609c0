"""What the door saw of each device's sync, so that the history (``MSmerge_sessions``: ``status``, the
monitor, ``/metrics``, the alerts) says what happened at the publisher, not what a device says of itself.

A device's sync is several requests (hello, uploads, a download, its ack, ``done``), which several ``serve``
processes may share (balanced request by request) and one may restart in the middle of. What every door can read is
at the publisher: when the sync began (its ``hello``, the holder's ``seen_at``: ``holders.py``) and what each of its
uploads applied (their replies in ``MSweb_uploads``, applied since). What only one door knows is how many rows
its downloads sent; each door notes that in memory, per sync (``Ledger``). The sync's row in the history has:

- its duration from its ``hello`` to its end, as the door measured it;
- the upload's counts as the publisher applied them (the device's own are not read), and what business logic
  handlers logged while they were applied (``sparksync.handlers``);
- the download's counts as the device applied them, each bounded by the rows this door sent; when this door sent
  none of it (another door did, or this one before a restart), they are not counted, and the row says so;
- the device's error messages, marked as the device's, cut short and stripped of control characters.

A request that fails at the door (a refused or malformed one, or the server's own failure) is a failed run of
that subscription with the door's error, whether or not the device ever says ``done``.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from dataclasses import dataclass
from typing import Any

KINDS = ("inserts", "updates", "deletes", "conflicts", "retries", "failed")
MAX_ERRORS = 5              # a device's error messages kept, each at most MAX_ERROR characters
MAX_ERROR = 200


@dataclass
class Seen:
    """One sync of one device (its epoch), as this door saw it: the change rows its downloads sent."""

    epoch: str | None
    sent: int = 0


class Ledger:
    """The syncs in progress at this door, by subscription (in ``serve``'s memory: a restart forgets them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, Seen] = {}

    def seen(self, subscription: str, epoch: str | None) -> Seen:
        with self._lock:
            s = self._open.get(subscription)
            if s is None or s.epoch != epoch:          # a new sync of the subscription
                s = self._open[subscription] = Seen(epoch)
            return s

    def end(self, subscription: str, epoch: str | None) -> Seen | None:
        with self._lock:
            s = self._open.pop(subscription, None)
            return s if s is not None and s.epoch == epoch else None


def upload_counts(replies: list[Any]) -> tuple[dict[str, int], list[str]]:
    """What a sync's uploads applied (their replies, as ``MSweb_uploads`` keeps them), and what handlers logged."""
    up, notes = dict.fromkeys(KINDS, 0), []
    for reply in replies:
        while isinstance(reply, str):           # kept as JSON text of the reply's JSON text (``publisher.apply_upload``)
            reply = json.loads(reply)
        notes += [str(n) for n in reply.get("notes") or ()]
        for st in (reply.get("stats") or {}).values():
            for k in KINDS:
                up[k] += int(st.get(k, 0) or 0)
    return up, notes


def session_row(began: dt.datetime | None, seen: Seen | None, replies: list[Any], device_seconds: float,
                download: dict, errors: list[str]) -> dict:
    """The history row's counts, duration, status and message of a sync that ended: ``began``, its ``hello``
    (None: not known, the device's own duration is read); ``seen``, this door's note of it; ``replies``, its
    uploads' replies."""
    now = dt.datetime.now(dt.UTC)
    seconds = max(0.0, (now - began).total_seconds()) if began is not None else float(device_seconds)
    up, notes = upload_counts(replies)
    budget = seen.sent if seen is not None else 0
    down = {}
    for k in ("inserts", "updates", "deletes", "conflicts", "failed", "retries"):
        down[k] = min(int(download.get(k, 0) or 0), budget)
        if k in ("inserts", "updates", "deletes"):
            budget -= down[k]
    said = [_clean(e) for e in errors[:MAX_ERRORS]]
    message = ("the device says: " + "; ".join(said)) if said else None
    if notes:
        message = "; ".join(x for x in (message, *notes) if x)
    if seen is None and any(int(download.get(k, 0) or 0) for k in ("inserts", "updates", "deletes")):
        message = "; ".join(x for x in (message, "download not counted: this door sent none of it") if x)
    return {"start_time": now - dt.timedelta(seconds=seconds), "end_time": now, "duration": seconds,
            "status": "failed" if said else "succeeded",
            **{f"upload_{k}": up[k] for k in ("inserts", "updates", "deletes", "conflicts")},
            **{f"download_{k}": down[k] for k in ("inserts", "updates", "deletes", "conflicts")},
            "retries": up["retries"] + down["retries"], "failed": up["failed"] + down["failed"], "message": message}


def _clean(text: str) -> str:
    """A device's text as the history keeps it: printable, on one line, cut short."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(flat.split())[:MAX_ERROR]
