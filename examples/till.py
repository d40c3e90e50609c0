"""A till: the reference application of a sparksync device, written with the public API only (``sparksync.Device``).

It takes orders whether or not the publisher can be reached (each one a row of ``Sale`` written to the till's own
file), syncs in the background (at once, on an interval, soon after each order, backing off while the server is
away), shows its outbox ("2 sales not yet saved", "1 needs attention") and its conflict inbox, and keeps its screen
(the catalog: ``Product``) up to date from the change notifications of each download, never by reading its tables
again.

It is driven by lines on its standard input, and says what happens as JSON lines on its standard output (a till's
screen, for a test or a shell):

    order PRODUCT QTY     sell QTY of PRODUCT (offline as online)          -> {"event": "ordered", ...}
    show PRODUCT          the product as the screen has it                -> {"event": "product", ...}
    outbox                the sales not yet saved, and what needs attention -> {"event": "outbox", ...}
    inbox                 the conflicts the till's changes lost            -> {"event": "inbox", ...}
    keep mine|theirs ID   settle one                                       -> {"event": "kept", ...}
    sync                  sync soon (as after an order)
    quit                  stop the background sync (a sync in flight ends) -> {"event": "stopped"}

and, as they happen: {"event": "synced", "pending": N, "attention": N}, {"event": "refreshed", "products": [...]},
{"event": "sync_failed", "message": ...}.

Usage:
    SPARKSYNC_TOKEN=... python examples/till.py --server https://hq:8443 --subscription Till1 --database till1.db
        [--key-env TILL_KEY] [--interval 60] [--debounce 2] [--max-backoff 600]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import uuid
from typing import Any

import sparksync
from sparksync.api import key_from_env


def needs_attention(change) -> bool:
    """A change the cashier is shown: it failed or was refused, or it lost a conflict not settled yet."""
    return change.state in ("failed", "refused") or (change.state == "lost" and change.resolution is None)


class Till:
    def __init__(self, device: sparksync.Device):
        self.device = device
        self.catalog: dict[int, dict[str, Any]] = {}      # the screen: product id -> its row
        self.out = threading.Lock()

    # -- what the till says ---------------------------------------------------------------------
    def say(self, event: str, **what: Any) -> None:
        with self.out:
            print(json.dumps({"event": event, **what}, default=str), flush=True)

    def synced(self, summary) -> None:
        if not self.catalog:
            self.load_catalog()          # the first sync initialized the file: the screen is filled once
        changes = self.device.outbox()
        self.say("synced", ok=summary.ok, pending=sum(c.state == "pending" for c in changes),
                 attention=sum(needs_attention(c) for c in changes))

    def failed(self, error) -> None:
        self.say("sync_failed", message=error.message)

    def refresh(self, batch) -> None:
        """A download batch committed: only the products it changed are read again."""
        keys = [k["id"] for k in batch.keys("Product")]
        if not keys:
            return
        with self.device.connect() as db:
            for pid in keys:
                row = db.execute("SELECT id, name, price FROM Product WHERE id = ?", (pid,)).fetchone()
                if row is None:
                    self.catalog.pop(pid, None)
                else:
                    self.catalog[pid] = {"id": row[0], "name": row[1], "price": row[2]}
        self.say("refreshed", products=sorted(keys))

    def load_catalog(self) -> None:
        try:
            with self.device.connect() as db:
                rows = db.execute("SELECT id, name, price FROM Product").fetchall()
        except Exception:  # noqa: BLE001 - no file yet: the first sync makes it
            return
        self.catalog = {r[0]: {"id": r[0], "name": r[1], "price": r[2]} for r in rows}

    # -- what the cashier does --------------------------------------------------------------------
    def order(self, product: int, qty: int) -> None:
        sale = str(uuid.uuid4())
        with self.device.connect() as db:
            db.execute("INSERT INTO Sale (id, product_id, qty) VALUES (?, ?, ?)", (sale, product, qty))
        self.say("ordered", sale=sale, product=product, qty=qty)

    def outbox(self) -> None:
        changes = self.device.outbox()
        self.say("outbox", pending=sum(c.state == "pending" for c in changes),
                 attention=[c.as_json() for c in changes if needs_attention(c)],
                 entries=[{"article": c.article, "key": c.key, "operation": c.operation, "state": c.state}
                          for c in changes])

    def command(self, line: str) -> bool:
        words = line.split()
        if not words:
            return True
        verb, args = words[0], words[1:]
        if verb == "order":
            self.order(int(args[0]), int(args[1]))
        elif verb == "show":
            self.say("product", **(self.catalog.get(int(args[0])) or {"id": int(args[0]), "missing": True}))
        elif verb == "outbox":
            self.outbox()
        elif verb == "inbox":
            self.say("inbox", conflicts=[c.as_json() for c in self.device.conflicts()])
        elif verb == "keep":
            self.say("kept", change=self.device.keep(int(args[1]), args[0]).as_json())
        elif verb == "sync":
            self.device.poke()
        elif verb == "quit":
            return False
        else:
            self.say("unknown", line=line)
        return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--subscription", required=True)
    ap.add_argument("--database", required=True)
    ap.add_argument("--key-env", help="the environment variable holding the file's passphrase (encrypted file)")
    ap.add_argument("--interval", type=float, default=60.0)
    ap.add_argument("--debounce", type=float, default=2.0)
    ap.add_argument("--max-backoff", type=float, default=600.0)
    args = ap.parse_args()
    device = sparksync.Device(args.database, args.server, args.subscription, os.environ["SPARKSYNC_TOKEN"],
                              key=key_from_env(args.key_env) if args.key_env else None)
    till = Till(device)
    till.load_catalog()
    device.on_change(till.refresh)
    device.start(interval=args.interval, on_sync=till.synced, on_error=till.failed, max_backoff=args.max_backoff,
                 debounce=args.debounce)
    try:
        for line in sys.stdin:
            try:
                if not till.command(line):
                    break
            except (sparksync.SparksyncError, ValueError, IndexError) as e:
                till.say("error", message=getattr(e, "message", str(e)))
    finally:
        device.stop()
        till.say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
