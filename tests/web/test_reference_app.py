"""The reference application (``examples/till.py``: a till written with the public API only) against ``sparksync
serve`` in a process of its own: orders taken offline and online arrive once, the screen is refreshed from the
change notifications, the outbox says what is not yet saved, a server that went away is retried without waiting
for another order, and a lost conflict is settled from the inbox. The till is driven through its standard input
and read through its JSON lines; every step awaits the event it causes."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.clients import shell
from tests.support.web import WebWorld, _environ

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WAIT = 120.0


class TillProcess:
    """``examples/till.py`` in a process of its own; ``expect`` awaits one of its events."""

    def __init__(self, world: WebWorld, name: str):
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "till.py"), "--server", world.server.url, "--subscription", name,
             "--database", str(world.device(name)), "--interval", "30", "--debounce", "0.2", "--max-backoff", "1"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=_environ() | {"SPARKSYNC_TOKEN": world.tokens[name]})
        self.events: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, event: str, when=lambda e: True) -> dict:
        while True:
            try:
                e = self.events.get(timeout=WAIT)
            except queue.Empty:
                raise AssertionError(f"the till never said {event}; it said {self.seen[-5:]}") from None
            if e is None:
                raise AssertionError(f"the till ended before {event}: {self.proc.stderr.read()[-2000:]}")
            self.seen.append(e)
            assert e["event"] not in ("error", "unknown"), e
            if e["event"] == event and when(e):
                return e

    def ask(self, line: str, event: str) -> dict:
        self.send(line)
        return self.expect(event)


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("till-app")
    pub = f"sqlite:///{folder / 'hq.db'}"
    shell(pub, 'CREATE TABLE "Product" ("id" integer PRIMARY KEY, "name" text NOT NULL, "price" real);\n'
               'CREATE TABLE "Sale" ("id" text PRIMARY KEY, "product_id" integer, "qty" integer NOT NULL);\n'
               + "".join(f"INSERT INTO \"Product\" VALUES ({i}, 'product {i}', {i}.5);\n" for i in range(1, 6)))
    w = WebWorld(folder, {
        "publisher": {"name": "HQ", "database": pub},
        "publications": [{"name": "Shop", "articles": [{"table": "Product"}, {"table": "Sale"}]}],
        "subscriptions": [{"name": "Till1", "publication": "Shop", "transport": "web"}]}, spark)
    w.server.start()
    try:
        yield w
    finally:
        w.server.stop()


@pytest.fixture(scope="module")
def till(world):
    t = TillProcess(world, "Till1")
    t.expect("synced", lambda e: e["ok"])
    yield t
    if t.proc.poll() is None:
        t.proc.kill()


def _sales(world: WebWorld) -> dict[str, tuple]:
    out = subprocess.run(["sqlite3", "-json", world.pub_url.removeprefix("sqlite:///"),
                          'SELECT "id", "product_id", "qty" FROM "Sale"'], capture_output=True, text=True, check=True)
    return {r["id"]: (r["product_id"], r["qty"]) for r in json.loads(out.stdout or "[]")}


def test_orders_are_saved_at_the_publisher_once_and_the_outbox_empties(world, till):
    a = till.ask("order 1 2", "ordered")
    b = till.ask("order 2 1", "ordered")
    till.expect("synced", lambda e: e["pending"] == 0)          # soon after the orders (debounced), no command
    sales = _sales(world)
    assert sales[a["sale"]] == (1, 2) and sales[b["sale"]] == (2, 1) and len(sales) == 2
    outbox = till.ask("outbox", "outbox")
    assert outbox["pending"] == 0 and outbox["attention"] == []
    assert sorted((e["article"], e["operation"], e["state"]) for e in outbox["entries"]) == [
        ("Sale", "insert", "applied"), ("Sale", "insert", "applied")]


def test_the_screen_is_refreshed_from_the_notifications(world, till):
    assert till.ask("show 3", "product")["price"] == 3.5
    shell(world.pub_url, 'UPDATE "Product" SET "price" = 30.0 WHERE "id" = 3;\n')
    till.send("sync")
    assert till.expect("refreshed")["products"] == [3]
    assert till.ask("show 3", "product")["price"] == 30.0


def test_orders_taken_while_the_server_is_away_are_saved_when_it_is_back(world, till):
    world.server.kill()
    c = till.ask("order 4 3", "ordered")
    till.expect("sync_failed")
    assert till.ask("outbox", "outbox")["pending"] == 1
    world.server.start()
    till.expect("synced", lambda e: e["pending"] == 0)      # tried again with backoff, no new order needed
    assert _sales(world)[c["sale"]] == (4, 3)


def test_a_lost_conflict_is_in_the_inbox_and_keeping_mine_saves_it(world, till):
    d = till.ask("order 5 1", "ordered")
    till.expect("synced", lambda e: e["pending"] == 0)
    till.send("quit")
    till.expect("stopped")
    assert till.proc.wait(timeout=60) == 0
    with_hq = f'UPDATE "Sale" SET "qty" = 9 WHERE "id" = \'{d["sale"]}\';\n'
    shell(world.device_url("Till1"), f"UPDATE Sale SET qty = 7 WHERE id = '{d['sale']}';\n")
    shell(world.pub_url, with_hq)                  # HQ's later write wins (the publisher's priority)
    again = TillProcess(world, "Till1")
    try:
        again.expect("synced", lambda e: e["attention"] == 1)
        [lost] = again.ask("inbox", "inbox")["conflicts"]
        assert lost["key"] == {"id": d["sale"]} and lost["winner"]["qty"] == 9 and lost["mine"]["qty"] == 7
        again.ask(f"keep mine {lost['change_id']}", "kept")
        again.send("sync")
        again.expect("synced", lambda e: e["pending"] == 0 and e["attention"] == 0)
        assert _sales(world)[d["sale"]] == (5, 7)
        again.send("quit")
        again.expect("stopped")
        assert again.proc.wait(timeout=60) == 0
    finally:
        if again.proc.poll() is None:
            again.proc.kill()
