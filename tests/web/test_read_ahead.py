"""The publisher's digests of a device's partition read ahead of its ``done`` (``web/server/read_ahead.py``), on
both publisher dialects: the door in this process over real HTTP, the device synced through its own code. A match
is conclusive; a change the device received after the read, or a device that diverged silently, is decided by a
read of the publisher's rows at ``done``, as before.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from sparksync.dialects import connect
from sparksync.merge.maintenance import digest
from sparksync.merge.session.remote import validated
from sparksync.metadata import store
from sparksync.web.device.sync import DeviceOptions, sync
from sparksync.web.server import door as door_module
from sparksync.web.server.read_ahead import ReadAhead, _Read
from sparksync.web.server.serve import serving
from tests.support.clients import shell
from tests.support.databases import databases
from tests.support.web import WebWorld

pytestmark = pytest.mark.spark


def _publisher(url: str) -> None:
    q = "?" if url.startswith("sqlite") else "%s"
    with connect(url) as r:
        r.execute('CREATE TABLE "Item" ("id" integer PRIMARY KEY, "v" text)')
        r.execute('CREATE TABLE "Store" ("id" integer PRIMARY KEY, "region" text NOT NULL)')
        r.executemany(f'INSERT INTO "Item" VALUES ({q}, {q})', [(i, f"v{i}") for i in range(1, 31)])
        r.executemany(f'INSERT INTO "Store" VALUES ({q}, {q})', [(i, ("north", "south")[i % 2]) for i in range(1, 11)])


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory):
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"read-ahead-{kind}")
    with databases(tmp, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        pub = dbs.url(kind, "readaheadpub")
        _publisher(pub)
        data = {
            "publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(tmp / "snap")},
            "server": {"round_ahead_s": 0},
            "publications": [{"name": "Shop", "validate_schedule": "every 1s", "articles": [
                {"table": "Item"}, {"table": "Store", "filter": "region = HOST_NAME()"}]}],
            "subscriptions": [{"name": "North", "publication": "Shop", "transport": "web", "host_name": "north"}]}
        w = WebWorld(tmp, data, spark)
        with serving(w.topology) as url:
            w.url = url
            yield w


class Reads:
    """The publisher's partition digests computed: by the read ahead (the door's) and at ``done``."""

    def __init__(self, monkeypatch):
        self.ahead: list[str] = []
        self.every: list[str] = []

        def spy(into, real):
            def read(*a, **kw):
                into.append(threading.current_thread().name)
                return real(*a, **kw)
            return read

        monkeypatch.setattr(door_module, "publisher_digests", spy(self.ahead, validated.publisher_digests))
        monkeypatch.setattr(validated, "partition_digests", spy(self.every, digest.partition_digests))

    @property
    def at_done(self) -> int:
        return len(self.every) - len(self.ahead)


def _sync(w) -> None:
    summary = sync(DeviceOptions(w.url, "North", f"sqlite:///{w.folder / 'north.db'}", w.tokens["North"]))
    assert summary.ok, summary


def _last_validation(w) -> dict:
    with connect(w.pub_url) as pub:
        rows = store.select_rows(pub, "MSmerge_validations", {"subscription": "North"})
    return max(rows, key=lambda r: r["validated_at"])


def _forget_validations(w) -> None:
    """The device's validation comes due at its next sync."""
    with connect(w.pub_url) as pub, pub.transaction():
        pub.execute(f"DELETE FROM {pub.meta('MSmerge_validations')} WHERE subscription = 'North'")


def test_a_first_sync_is_validated_with_the_digests_read_while_it_loaded(world, monkeypatch):
    reads = Reads(monkeypatch)
    _sync(world)
    v = _last_validation(world)
    assert v["result"] == "passed", v
    assert reads.ahead and all(t.startswith("sparksync-read-ahead") for t in reads.ahead), reads.ahead
    assert reads.at_done == 0, "done read the publisher's rows again though the read ahead matched"


def test_a_change_the_device_received_after_the_read_ahead_is_read_again_and_passes(world, monkeypatch):
    def read_then_change(self, device, partition, read):    # the read ahead made (here, at once), then a change
        if device in self._reads:                           # the same sync's hello again
            return
        done = Future()
        done.set_result(read())
        self._reads[device] = _Read(partition, time.monotonic(), done)
        shell(world.pub_url, "UPDATE \"Item\" SET \"v\" = 'after the read' WHERE \"id\" = 7;\n")

    monkeypatch.setattr(ReadAhead, "start", read_then_change)
    reads = Reads(monkeypatch)
    _forget_validations(world)
    _sync(world)
    with connect(f"sqlite:///{world.folder / 'north.db'}") as dev:
        assert dev.scalar('SELECT "v" FROM "Item" WHERE "id" = 7') == "after the read"
    v = _last_validation(world)
    assert v["result"] == "passed", v
    assert len(reads.ahead) == 1 and reads.at_done == 1, "the stale read ahead was taken as the publisher's"


def test_a_device_that_diverged_silently_fails_though_a_read_ahead_was_made(world, monkeypatch):
    with connect(f"sqlite:///{world.folder / 'north.db'}") as dev:
        flag = dev.meta("MSmerge_replica")
    shell(f"sqlite:///{world.folder / 'north.db'}",         # a write the device's tracking never saw
          f"UPDATE {flag} SET applying = 1;\nUPDATE Item SET v = 'silent' WHERE id = 3;\n"
          f"UPDATE {flag} SET applying = 0;\n")
    reads = Reads(monkeypatch)
    _forget_validations(world)
    summary = sync(DeviceOptions(world.url, "North", f"sqlite:///{world.folder / 'north.db'}", world.tokens["North"]))
    assert not summary.ok
    v = _last_validation(world)
    assert v["result"] == "failed" and "Item" in v["message"], v
    assert reads.ahead and reads.at_done == 1, (reads.ahead, reads.every)
