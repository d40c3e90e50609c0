"""What the door saw of each device's sync, so that the history (``MSmerge_sessions``: ``status``, the
monitor, ``/metrics``, the alerts) says what happened at the publisher, not what a device says of itself.

A device's sync is several requests (hello, uploads, a download, its ack, ``done``). The door notes, per
subscription, when the sync began, what each upload applied (its reply's counts) and how many rows each
download sent; ``done`` ends it. Its row in the history then has:

- the upload's counts as the door applied them (the device's own are not read);
- the download's counts as the device applied them, each bounded by the rows the door sent;
- its duration as the door measured it (the device's is read only when the door did not see the sync
  begin: ``serve`` restarted meanwhile);
- the device's error messages, marked as the device's, cut short and stripped of control characters;
- what business logic handlers logged while the door applied its uploads (``sparksync.handlers``).

A request that fails at the door (a refused or malformed one, or the server's own failure) is a failed
run of that subscription with the door's error, whether or not the device ever says ``done``.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass, field

KINDS = ("inserts", "updates", "deletes", "conflicts", "retries", "failed")
MAX_ERRORS = 5              # a device's error messages kept, each at most MAX_ERROR characters
MAX_ERROR = 200


@dataclass
class Seen:
    """One sync of one device, as the door saw it so far."""

    began: float = field(default_factory=time.monotonic)
    upload: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    sent: int = 0                       # change rows the downloads sent (their frames, the feed's segments)
    notes: list[str] = field(default_factory=list)   # what business logic handlers logged of its uploads
    _replies: set = field(default_factory=set)

    def uploaded(self, reply: dict) -> None:
        """An upload's reply (the same again, for a request sent again, counts once per sync)."""
        key = (reply.get("lo"), reply.get("hi"))
        if key in self._replies:
            return
        self._replies.add(key)
        self.notes += [str(n) for n in reply.get("notes") or ()]
        for st in (reply.get("stats") or {}).values():
            for k in KINDS:
                self.upload[k] += int(st.get(k, 0) or 0)


class Ledger:
    """The syncs in progress, by subscription (in ``serve``'s memory: a restart forgets them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, Seen] = {}

    def seen(self, subscription: str) -> Seen:
        with self._lock:
            return self._open.setdefault(subscription, Seen())

    def end(self, subscription: str) -> Seen | None:
        with self._lock:
            return self._open.pop(subscription, None)


def session_row(seen: Seen | None, device_seconds: float, upload: dict, download: dict,
                errors: list[str]) -> dict:
    """The history row's counts, duration, status and message of a sync the device says ended."""
    now = dt.datetime.now(dt.UTC)
    seconds = time.monotonic() - seen.began if seen is not None else float(device_seconds)
    up = seen.upload if seen is not None else dict.fromkeys(KINDS, 0)
    budget = seen.sent if seen is not None else 0
    down = {}
    for k in ("inserts", "updates", "deletes", "conflicts", "failed", "retries"):
        down[k] = min(int(download.get(k, 0) or 0), budget)
        if k in ("inserts", "updates", "deletes"):
            budget -= down[k]
    said = [_clean(e) for e in errors[:MAX_ERRORS]]
    message = ("the device says: " + "; ".join(said)) if said else None
    if seen is not None and seen.notes:
        message = "; ".join(x for x in (message, *seen.notes) if x)
    if seen is None:
        message = "; ".join(x for x in (message, "counts not known: serve restarted during the sync") if x)
    return {"start_time": now - dt.timedelta(seconds=seconds), "end_time": now, "duration": seconds,
            "status": "failed" if said else "succeeded",
            **{f"upload_{k}": up[k] for k in ("inserts", "updates", "deletes", "conflicts")},
            **{f"download_{k}": down[k] for k in ("inserts", "updates", "deletes", "conflicts")},
            "retries": up["retries"] + down["retries"], "failed": up["failed"] + down["failed"], "message": message}


def _clean(text: str) -> str:
    """A device's text as the history keeps it: printable, on one line, cut short."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(flat.split())[:MAX_ERROR]
