"""Business logic handlers for the tests (``sparksync.handlers``): what each does to a row is written in its
values, so a test says what it wants by the value it writes."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from sparksync import handlers as h


def _marker(row: dict | None) -> str:
    v = (row or {}).get("v") or ""
    return v.rsplit("!", 1)[1] if "!" in v else ""


class Tickets(h.BusinessLogicHandler):
    """At HQ (uploads): a store's delete kept as a soft delete, "reject" refused, "lower:" values lowercased, a
    negative n made 0, "raise" raises; conflicts decided by the marker after "!" in v; a duplicate code renamed."""

    def insert(self, ctx, row):
        if ctx.direction != "upload":
            return h.Accept()
        if row["v"] == "reject":
            ctx.log(f"refused ticket {row['id']} from {ctx.subscription}")
            return h.Reject("tickets marked reject are not taken")
        if row["v"].startswith("lower:"):
            return h.Custom({"v": row["v"].lower()})
        return h.Accept()

    def update(self, ctx, row):
        if row["v"].startswith("slow:"):
            _slow_once(row)
        if row["v"] == "raise":
            raise ValueError(f"ticket {row['id']} cannot be updated")
        if row["v"] == "badtype":
            return h.Custom({"n": "many"})
        if row["v"] == "toobig":
            return h.Custom({"n": 2**70})
        if ctx.direction == "upload" and (row["n"] or 0) < 0:
            return h.Custom({"n": 0})
        return h.Accept()

    def delete(self, ctx, row):
        if ctx.direction == "upload":
            return h.Custom({**row, "deleted": 1})
        return h.Accept()

    def update_conflict(self, ctx, publisher_row, subscriber_row):
        mark = _marker(subscriber_row)
        if mark == "sub":
            return h.AcceptSubscriber()
        if mark == "pub":
            return h.AcceptPublisher()
        if mark == "custom":
            return h.Custom({"v": f"{publisher_row['v']}+{subscriber_row['v']}"})
        return h.Default()

    def update_delete_conflict(self, ctx, row):
        mark = _marker(row)
        if mark == "keep":
            return h.Custom({**row, "v": "kept"})
        if mark == "sub":
            return h.AcceptSubscriber()
        if mark == "pub":
            return h.AcceptPublisher()
        return h.Default()

    def error(self, ctx, row, message):
        if "unique" in message.lower() or "duplicate" in message.lower():
            return h.Custom({"code": f"{row['code']}-{row['id']}"})
        return h.Default()


def _slow_once(row: dict) -> None:
    """"slow:<seconds>": the first call for this row says whether the SQLite publisher named by TICKETS_PROBE_DB
    can take a write at that moment ("free", or why not), writes ``slow.started`` beside this module, then sleeps."""
    folder = Path(__file__).parent
    seen = folder / f"slow-{row['id']}"
    if seen.exists():
        return
    said = "not probed"
    if os.environ.get("TICKETS_PROBE_DB"):
        c = sqlite3.connect(os.environ["TICKETS_PROBE_DB"], timeout=0)
        try:
            c.execute("BEGIN IMMEDIATE")
            c.rollback()
            said = "free"
        except sqlite3.OperationalError as e:
            said = f"locked: {e}"
        finally:
            c.close()
    seen.write_text(said, encoding="utf-8")
    (folder / "slow.started").write_text("", encoding="utf-8")
    time.sleep(float(row["v"].split(":")[1]))


class SoftDeletes(h.BusinessLogicHandler):
    """Every delete, in both directions, kept as a soft delete (no ``error``: a refused insert is compensated)."""

    def delete(self, ctx, row):
        ctx.log(f"soft-deleted ticket {row.get('id')} at {ctx.direction}")
        return h.Custom({**row, "deleted": 1})


class NotAHandler:
    """Refused at setup: not a BusinessLogicHandler."""
