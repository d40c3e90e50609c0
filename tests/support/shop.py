"""A shop whose till is a web device, for the tests of what the device's application sees (its outbox, inbox and
notifications): a publisher (SQLite or PostgreSQL) with ``Product`` (a CHECK the device's table does not have:
changes the publisher refuses to apply), one web subscription ``Till`` with column tracking, its token, and the
door of ``serve`` in this process on a real HTTP connection (``served``); the till a SQLite file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import sparksync
from sparksync.dialects import connect

from .databases import databases
from .web import free_port


class Shop:
    def __init__(self, tmp: Path, pub: str, spark, products: int):
        self.pub, self.file = pub, tmp / "till.db"
        p = "?" if pub.startswith("sqlite") else "%s"
        with connect(pub) as r:
            r.execute('CREATE TABLE "Product" ("id" integer PRIMARY KEY, "name" varchar(40) NOT NULL, "price" real, '
                      '"qty" integer CHECK ("qty" >= 0))')
            r.executemany(f'INSERT INTO "Product" VALUES ({p}, {p}, {p}, {p})',
                          [(i, f"p{i}", float(i), i) for i in range(1, products + 1)])
        self.hq = sparksync.Publisher({
            "publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(tmp / "snap")},
            "server": {"listen": f"127.0.0.1:{free_port()}", "feed_dir": str(tmp / "feed")},
            "publications": [{"name": "Shop", "articles": [{"table": "Product", "column_tracking": True}]}],
            "subscriptions": [{"name": "Till", "publication": "Shop", "transport": "web"}]}, spark=spark)
        self.hq.setup()
        self.token = self.hq.token("Till")
        self.url = ""

    def device(self, url: str) -> sparksync.Device:
        return sparksync.Device(str(self.file), url, "Till", self.token)


@contextlib.contextmanager
def served(make, kind: str, tmp: Path, pg_admin_url: str, spark) -> Iterator:
    """``make(tmp, publisher URL, spark)`` (a ``Shop``) on a ``kind`` publisher, its door serving, the till synced
    once (initialized)."""
    with databases(tmp, pg_admin_url) as dbs:
        shop = make(tmp, dbs.url(kind, "shoppub"), spark)
        with shop.hq.serving() as url:
            shop.url = url
            assert shop.device(url).sync().ok
            yield shop
