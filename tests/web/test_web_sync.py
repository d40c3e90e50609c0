"""Web synchronization end to end: a PostgreSQL publisher, ``sparksync serve`` and device clients
(``sparksync sync``) as separate processes, SQLite device files written through the sqlite3 shell, and a
direct SQLite subscriber beside them. One topology, built once; the checks run in order on it.

Store is filtered by ``region = HOST_NAME()``; Sale joins Store (a join filter); Item is not filtered.
TillN and TillS are devices in the north and the south; Branch is a direct subscriber in the north.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pyarrow as pa
import pytest

from sparksync.dialects import connect
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.remote.frames import HEADER, MAGIC, META, change_schema, read_frames, wire_schema, write_changes
from sparksync.merge.tracking import pending
from sparksync.metadata import store
from sparksync.metadata.records import Role, SubscriptionRow
from sparksync.names import TableName
from sparksync.web import tokens
from sparksync.web.device.sync import DeviceOptions, sync
from sparksync.web.protocol import PROTOCOL
from tests.support.clients import shell
from tests.support.databases import databases
from tests.support.publishing import insert_with_rowguid_sql, rows_of
from tests.support.upgrade import downgrade
from tests.support.web import WebWorld, file_headers, upload_body, wire_frames

pytestmark = pytest.mark.spark

REGIONS = {"TillN": "north", "TillS": "south", "Branch": "north"}
FLEET = {f"Fleet{i:02d}": ("north", "south", "east")[i % 3] for i in range(1, 51)}     # east: a partition of its own


def _publisher(url: str) -> None:
    with connect(url) as r:
        r.execute('CREATE TABLE "Item" ("id" integer PRIMARY KEY, "v" text, "n" integer)')
        r.execute('CREATE TABLE "Store" ("id" integer PRIMARY KEY, "region" text NOT NULL, "name" varchar(20))')
        r.execute('CREATE UNIQUE INDEX "store_name" ON "Store" ("name")')
        r.execute('CREATE TABLE "Sale" ("id" integer PRIMARY KEY, "store_id" integer NOT NULL REFERENCES "Store"("id"), '
                  '"qty" integer)')
        r.executemany('INSERT INTO "Item" VALUES (%s, %s, %s)', [(i, f"v{i}", i) for i in range(1, 21)])
        r.executemany('INSERT INTO "Store" VALUES (%s, %s, %s)',
                      [(i, "north" if i % 2 else "south", f"store {i}") for i in range(1, 11)])
        r.executemany('INSERT INTO "Sale" VALUES (%s, %s, %s)', [(i, 1 + i % 10, i) for i in range(1, 31)])


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory, pg_admin_url):
    tmp = tmp_path_factory.mktemp("web")
    with databases(tmp, pg_admin_url) as dbs:
        pub = dbs.url("postgresql", "webpub")
        _publisher(pub)
        data = {
            # change_capture auto: the publisher's changes read from its log (the door's mark asks the slot)
            "publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(tmp / "snap"), "change_capture": "auto"},
            # round_ahead_s 0: the checks' in-process doors share the publisher with this serve (rounds ahead would
            # race theirs); tests/web/test_two_doors.py runs serve's rounds ahead
            "server": {"max_request_mb": 1, "round_ahead_s": 0},
            "publications": [{"name": "Shop", "articles": [
                {"table": "Item"}, {"table": "Store", "filter": "region = HOST_NAME()"},
                {"table": "Sale", "join_filters": [{"parent": "Store", "clause": "Sale.store_id = Store.id",
                                                    "unique_key": True}]}]}],
            "subscriptions": [
                {"name": "TillN", "publication": "Shop", "transport": "web", "host_name": "north"},
                {"name": "TillS", "publication": "Shop", "transport": "web", "host_name": "south"},
                {"name": "Branch", "publication": "Shop", "database": dbs.url("sqlite", "branch"), "host_name": "north"},
            ] + [{"name": name, "publication": "Shop", "transport": "web", "host_name": region}
                 for name, region in FLEET.items()]}
        w = WebWorld(tmp, data, spark)
        w.server.start()
        try:
            yield w
        finally:
            w.server.stop()
            assert not _leaked(w), "a token appears in the server's log"


def _leaked(w: WebWorld) -> bool:
    text = (w.folder / "serve.log").read_text(encoding="utf-8", errors="replace")
    return any(t.split("_")[-1] in text for t in w.tokens.values())


def _rows(url: str, table: str) -> dict[int, tuple]:
    with connect(url) as r:
        cols = {"Item": '"id", "v", "n"', "Store": '"id", "region", "name"', "Sale": '"id", "store_id", "qty"'}[table]
        return {row[0]: tuple(row) for row in r.query(f'SELECT {cols} FROM "{table}" ORDER BY "id"')}


def _partition(w: WebWorld, region: str) -> dict[str, dict[int, tuple]]:
    """What a subscriber in ``region`` must hold: the publisher's rows of its partition."""
    items, stores, sales = (_rows(w.pub_url, t) for t in ("Item", "Store", "Sale"))
    mine = {k: v for k, v in stores.items() if v[1] == region}
    return {"Item": items, "Store": mine, "Sale": {k: v for k, v in sales.items() if v[1] in mine}}


def _holds(w: WebWorld, url: str) -> dict[str, dict[int, tuple]]:
    return {t: _rows(url, t) for t in ("Item", "Store", "Sale")}


def _ok(p) -> None:
    assert p.returncode == 0, f"exit {p.returncode}: {p.stdout}\n{p.stderr}"
    assert "Traceback" not in p.stderr + p.stdout


def test_the_first_sync_loads_the_devices_partition_and_nothing_else(world):
    for name in ("TillN", "TillS"):
        _ok(world.sync(name))
        assert _holds(world, world.device_url(name)) == _partition(world, REGIONS[name])
    with connect(world.device_url("TillN")) as dev, connect(world.pub_url) as pub:
        south = {str(g) for (g,) in pub.query(f'SELECT rowguid FROM {rows_of(pub, "Store")} AS t WHERE region = \'south\'')}
        pending.flush(dev)
        known = {str(g) for (g,) in dev.query(f"SELECT rowguid FROM {dev.meta('MSmerge_contents')}")}
        assert not south & known, "the device learned the lineage of another partition's rows"


def test_writes_at_both_ends_arrive_and_a_conflict_is_decided_at_the_publisher(world):
    shell(world.device_url("TillN"), "INSERT INTO Item (id, v, n) VALUES (101, 'from the till', 1);\n"
                                     "UPDATE Item SET v = 'till' WHERE id = 2;\n"
                                     "INSERT INTO Store (id, region, name) VALUES (51, 'north', 'till store');\n"
                                     "INSERT INTO Sale (id, store_id, qty) VALUES (501, 51, 5);\n"
                                     "DELETE FROM Sale WHERE id = 2;\n")
    shell(world.pub_url, 'UPDATE "Item" SET "v" = \'hq\' WHERE "id" = 2;\n'
                         'INSERT INTO "Store" ("id", "region", "name") VALUES (61, \'north\', \'hq north\');\n'
                         'INSERT INTO "Store" ("id", "region", "name") VALUES (62, \'south\', \'hq south\');\n')
    _ok(world.sync("TillN"))
    assert _rows(world.pub_url, "Item")[101] == (101, "from the till", 1)
    assert 2 not in _rows(world.pub_url, "Sale")
    assert _rows(world.pub_url, "Item")[2][1] == "hq", "the publisher's priority wins an update conflict"
    assert _holds(world, world.device_url("TillN")) == _partition(world, "north")
    with connect(world.pub_url) as pub:
        logged = store.select_rows(pub, "MSmerge_conflicts_info", {"subscription": "TillN"})
    assert any(c["conflict_type"] == 1 and c["direction"] == "upload" for c in logged), logged
    _ok(world.sync("TillS"))
    assert _holds(world, world.device_url("TillS")) == _partition(world, "south")


def test_a_second_sync_moves_nothing(world):
    p = world.sync("TillN", "--json")
    _ok(p)
    summary = json.loads(p.stdout)
    assert summary["ok"]
    moved = [st for s in summary["subscriptions"] for d in ("upload", "download") for st in s[d].values()
             if st["inserts"] + st["updates"] + st["deletes"]]
    assert not moved, summary
    with connect(world.pub_url) as pub:        # every sync is in the history, as a merge session is
        runs = store.select_rows(pub, "MSmerge_sessions", {"subscription": "TillN"})
    assert runs and all(r["status"] == "succeeded" for r in runs), runs
    with _client(world, world.tokens["TillN"]) as c:
        assert c.post("/v1/sync/done", json={"seconds": -1}).status_code == 400
        assert c.post("/v1/sync/done", json={"seconds": 1, "upload": {"inserts": "many"}}).status_code == 400


def _recgen(url: str) -> int:
    with connect(url) as dev:
        return int(store.select(dev, SubscriptionRow, {"role": Role.PUBLISHER})[0].recgen or 0)


def test_a_partitions_changes_are_read_once_and_sent_as_the_same_bytes_to_each_of_its_devices(world):
    """The partition feed: each round's changes are written once per partition, and every device of the
    partition receives those very bytes. A row changed and then moved out of the partition, or moved out
    and back, between two syncs of a device arrives as its last state."""
    for name in ("TillN", "Fleet03"):                  # two devices in the north, both at the feed's head
        _ok(world.sync(name))
    rounds = [
        'UPDATE "Store" SET "name" = \'renamed 3\' WHERE "id" = 3;\nUPDATE "Item" SET "n" = 33 WHERE "id" = 3;\n',
        'UPDATE "Store" SET "region" = \'south\' WHERE "id" = 3;\nUPDATE "Store" SET "region" = \'south\' WHERE "id" = 5;\n',
        'UPDATE "Store" SET "region" = \'north\', "name" = \'back 5\' WHERE "id" = 5;\n'
        'INSERT INTO "Sale" ("id", "store_id", "qty") VALUES (901, 1, 9);\n',
    ]
    for sql in rounds:                                 # a round each: a south device's sync closes it
        shell(world.pub_url, sql)
        _ok(world.sync("TillS"))
    bodies = {}
    for name in ("TillN", "Fleet03"):
        with _client(world, world.tokens[name]) as c:  # the download as the device asks for it, not applied
            r = c.post("/v1/sync/download", json={"after": _recgen(world.device_url(name)), "batch": 100})
            assert r.status_code == 200, r.text
            bodies[name] = wire_frames(r.content)
    assert len(bodies["TillN"]) >= 1 + len(rounds), "the download is not made of the rounds' segments"
    assert bodies["TillN"][1:] == bodies["Fleet03"][1:], "the partition's segments differ between its devices"
    for name in ("TillN", "Fleet03"):
        _ok(world.sync(name))
        held = _holds(world, world.device_url(name))
        assert held == _partition(world, "north"), name
        assert 3 not in held["Store"] and held["Store"][5] == (5, "north", "back 5") and 901 in held["Sale"]


def test_a_round_written_by_spark_holds_what_the_server_writes_itself(world, spark, tmp_path):
    """A big round is one Spark job (a task per group of partitions); a small one is read in the server's
    process: the segments are the same, row for row."""
    from sparksync.merge.session.remote.feed import Feed
    from sparksync.web.server.door import Door

    shop = world.topology.publication("Shop")
    said: list[str] = []
    feeds = {"spark": Feed(tmp_path / "spark", lambda: spark, driver_round_changes=0, report=said.append),
             "server": Feed(tmp_path / "server", None, driver_round_changes=10**9)}
    doors = {k: Door(world.topology, said.append, feed=f) for k, f in feeds.items()}
    _ok(world.sync("TillN"))                          # a device the segments are kept for
    for door in doors.values():
        door.round(shop)                              # both feeds start at the publisher's bound
    shell(world.pub_url, 'UPDATE "Item" SET "n" = "n" + 1 WHERE "id" > 15;\n'
                         'UPDATE "Store" SET "name" = "name" || \'!\' WHERE "id" > 6;\n'
                         'UPDATE "Store" SET "region" = \'east\' WHERE "id" = 7;\n')
    written = {}
    for k, door in doors.items():
        door.round(shop)
        index = feeds[k].index("Shop")
        epoch = feeds[k].epoch("Shop", index)
        written[k] = {pid: read_frames(epoch.read(rel), rel)[0][0] for pid, rel in index.segments[-1].files.items()}
    assert said[-1].endswith("(Spark)"), said
    assert set(written["spark"]) == set(written["server"]) and len(written["spark"]) >= 3
    for pid, table in written["spark"].items():
        assert table.num_rows and table.equals(written["server"][pid]), pid
    removals = written["spark"][next(p for p, t in written["spark"].items() if "remove" in t.column("op").to_pylist())]
    assert removals.num_rows
    for name in ("TillN", "TillS"):                   # the devices the next checks use are up to date again
        _ok(world.sync(name))


def test_a_round_never_waits_for_sparks_start_and_goes_to_spark_once_it_is_up(world, spark, tmp_path):
    """A round big enough for Spark while Spark is still starting is read in the door's process (the device does
    not wait for a JVM); the start goes on in the background and a later round is a Spark job."""
    import threading

    from sparksync.merge.session.remote.feed import Feed
    from sparksync.spark.lazy import LazySpark
    from sparksync.web.server.door import Door

    release = threading.Event()
    asked = threading.Event()

    def starting():                  # a Spark start held until the test lets it finish
        asked.set()
        assert release.wait(60), "the test never let Spark start"
        return spark

    lazy = LazySpark(starting)
    said: list[str] = []
    feed = Feed(tmp_path / "feed", lazy.ready, driver_round_changes=0, report=said.append)
    door = Door(world.topology, said.append, feed=feed)
    shop = world.topology.publication("Shop")
    _ok(world.sync("TillN"))
    door.round(shop)                                   # the feed starts
    shell(world.pub_url, 'UPDATE "Item" SET "n" = "n" + 1 WHERE "id" <= 3;\n')
    door.round(shop)                                   # returns while the start is held
    assert asked.wait(30) and not release.is_set(), "the round did not start Spark in the background"
    assert any("Spark is starting" in line for line in said), said
    assert said[-1].startswith("feed Shop: generations") and not said[-1].endswith("(Spark)"), said
    release.set()
    assert lazy.wait_started(60) is spark
    shell(world.pub_url, 'UPDATE "Item" SET "n" = "n" + 1 WHERE "id" <= 3;\n')
    door.round(shop)
    assert said[-1].endswith("(Spark)"), said
    _ok(world.sync("TillN"))


def _door_with_a_started_feed(world, tmp_path, said: list[str]):
    """A door in this process with a feed of its own under ``tmp_path``, started by a round after TillN synced:
    (feed, door, the publication Shop)."""
    from sparksync.merge.session.remote.feed import Feed
    from sparksync.web.server.door import Door

    feed = Feed(tmp_path / "feed", report=said.append)
    feed.start()
    door = Door(world.topology, said.append, feed=feed)
    shop = world.topology.publication("Shop")
    _ok(world.sync("TillN"))
    door.round(shop)
    return feed, door, shop


def test_a_damaged_feed_index_starts_the_feed_again_and_no_device_is_served_from_it(world, tmp_path):
    """The feed's index (shared by every door) overwritten with garbage, then with a valid index of another
    publisher's history (its head's generation not the publisher's): each time the next round starts the feed
    again, saying why, and the device's sync holds exactly its partition."""
    from sparksync.merge.session.remote import feed_index

    said: list[str] = []
    feed, door, shop = _door_with_a_started_feed(world, tmp_path, said)
    folder = feed_index.folder_of(feed.root, "Shop")
    folder.write(feed_index.INDEX, b"\x00 not an index {")
    shell(world.pub_url, 'UPDATE "Store" SET "name" = \'damaged index\' WHERE "id" = 1;\n')
    door.round(shop)
    assert said[-1].startswith("feed Shop: starts at generation"), said
    index = feed.index("Shop", fresh=True)
    assert index is not None
    forged = feed_index.Index(index.publication, index.epoch, index.shape, index.head, "0" * 32, index.segments)
    feed_index.save(feed.root, forged)
    shell(world.pub_url, 'UPDATE "Store" SET "name" = \'forged index\' WHERE "id" = 1;\n')
    door.round(shop)
    assert "is not the one the feed was written from" in said[-1], said
    _ok(world.sync("TillN"))
    assert _holds(world, world.device_url("TillN")) == _partition(world, "north")


def test_a_round_with_nothing_to_do_takes_no_lock_and_no_committed_change_is_skipped(world, spark, tmp_path,
                                                                                    monkeypatch):
    """An idle door's rounds read the publisher's tracking mark once and take no lock while it stays the one taken
    when its last complete round began. A change committed at the publisher, a device's upload through another door
    (the world's ``serve``), and a merge agent's session each move the mark: the next round is a whole one and the
    feed's head passes them. Nothing changed for ``QUIET_FOR`` seconds: a whole round all the same."""
    from sparksync import locks
    from sparksync.web.server import door as door_module

    said: list[str] = []
    feed, door, shop = _door_with_a_started_feed(world, tmp_path, said)
    door.round(shop)                        # the round after one that moved: nothing to do, its mark kept
    taken: list[str] = []
    real = locks.hold

    def hold(topology, command, publications, *args, **kw):
        taken.append(command)
        return real(topology, command, publications, *args, **kw)

    monkeypatch.setattr(locks, "hold", hold)

    def round_after(change) -> tuple[list[str], int, int]:
        head = feed.head("Shop")
        change()
        taken.clear()
        door.round(shop)
        return list(taken), head, feed.head("Shop")

    assert round_after(lambda: None) == ([], feed.head("Shop"), feed.head("Shop"))
    assert round_after(lambda: None)[0] == []

    def at_hq() -> None:
        shell(world.pub_url, 'UPDATE "Store" SET "name" = \'quiet 1\' WHERE "id" = 1;\n')

    def from_a_device() -> None:
        shell(world.device_url("TillS"), "UPDATE Item SET n = 4242 WHERE id = 6;\n")
        _ok(world.sync("TillS"))

    def from_an_agent() -> None:
        shell(world.topology.subscriber_url(world.topology.subscription("Branch")),
              "UPDATE Item SET n = 4343 WHERE id = 7;\n")
        summary = MergeAgent(world.topology, spark).run()
        assert summary.ok, summary.to_dict()

    for change in (at_hq, from_a_device, from_an_agent):
        took, before, after = round_after(change)
        assert took[:2] == ["serve round", "merge"] and after > before, (change.__name__, took, before, after, said)
        door.round(shop)                    # nothing more: quiet again
        assert round_after(lambda: None)[0] == [], change.__name__
    monkeypatch.setattr(door_module, "QUIET_FOR", 0.0)
    assert round_after(lambda: None)[0][:2] == ["serve round", "merge"]
    _ok(world.sync("TillN"))
    assert _holds(world, world.device_url("TillN")) == _partition(world, "north")


def test_a_feed_that_cannot_be_written_is_refused_at_start_and_never_stalls_a_download(world, tmp_path):
    """``feed_dir`` unwritable at start: one message naming it. A round whose segment cannot be written (a
    full or broken disk) stops the feed of that publication, so downloads are read for each device instead
    of ending at a head that no longer moves; the next round starts it again."""
    from sparksync.errors import ConfigurationError
    from sparksync.merge.session.remote.feed import Feed

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with pytest.raises(ConfigurationError, match="feed_dir"):
        Feed(blocked / "feed").start()
    with pytest.raises(ConfigurationError, match=r"feed_dir = 'nosuch://bucket/feed'.*nosuch") as refused:
        Feed("nosuch://user:hunter2@bucket/feed?x=1").start()           # a file system pyarrow does not know
    assert "hunter2" not in refused.value.message
    said: list[str] = []
    feed, door, shop = _door_with_a_started_feed(world, tmp_path, said)
    assert feed.head("Shop") is not None
    folder = feed.epoch("Shop", feed.index("Shop")).local_path()
    shell(world.pub_url, 'UPDATE "Store" SET "name" = \'unwritten\' WHERE "id" = 1;\n')
    shutil.rmtree(folder, ignore_errors=True)          # the feed's folder turns into a file
    folder.write_text("")
    door.round(shop)
    assert feed.head("Shop") is None and "was not written" in said[-1], said
    assert not folder.exists()                         # the broken feed removed: the next round starts it again
    door.round(shop)
    assert feed.head("Shop") is not None, said
    _ok(world.sync("TillN"))
    assert _holds(world, world.device_url("TillN")) == _partition(world, "north")


def test_a_direct_subscriber_and_the_devices_converge(world, spark):
    shell(world.device_url("TillS"), "UPDATE Item SET n = 77 WHERE id = 5;\n")
    _ok(world.sync("TillS"))
    summary = MergeAgent(world.topology, spark).run()
    assert summary.ok, summary.to_dict()
    _ok(world.sync("TillN"))
    assert _holds(world, world.topology.subscriber_url(world.topology.subscription("Branch"))) == _partition(world, "north")
    assert _holds(world, world.device_url("TillN")) == _partition(world, "north")
    assert _rows(world.device_url("TillN"), "Item")[5][2] == 77


# -- the door refuses ---------------------------------------------------------------------------------
def _client(world, token: str | None) -> httpx.Client:
    """A client sending as the device whose token this is (from the file that holds its subscription)."""
    headers = {"Sparksync-Protocol": str(PROTOCOL)} | ({"Authorization": f"Bearer {token}"} if token else {})
    name = next((n for n, t in world.tokens.items() if t == token), None)
    return httpx.Client(base_url=world.server.url, headers=headers | (file_headers(world, name) if name else {}),
                        timeout=30)


def _state(world) -> tuple:
    with connect(world.pub_url) as pub:
        pending.flush(pub)
        return (tuple(sorted(_rows(world.pub_url, "Item").items())), tuple(sorted(_rows(world.pub_url, "Store").items())),
                pub.scalar(f"SELECT count(*) FROM {pub.meta('MSmerge_contents')}"),
                pub.scalar(f"SELECT max(recgen) FROM {pub.meta('sysmergesubscriptions')}"))


def _wire_body(**kw) -> bytes:
    """A body in the wire's own columns (what a client that lies writes), one row."""
    row = {"tablenick": 1, "rowguid": "01a217e4-0b2f-7d64-b858-8c4bd893cad4", "generation": 1, "op": 0,
           "lineage": '{"1": 1}', "colv": None, "row": '{"id": 1}', "guid_in_row": False} | kw
    return _framed(pa.Table.from_pylist([row], wire_schema()))


def _framed(table) -> bytes:
    """``table`` as the wire's frame (``wire.MAGIC``, sizes, zstd of: no metadata, the IPC stream without its
    schema message)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return _frame(META.pack(0) + sink.getvalue().to_pybytes()[len(table.schema.serialize()):])


def _frame(payload: bytes) -> bytes:
    packed = pa.compress(payload, codec="zstd", asbytes=True)
    return MAGIC + HEADER.pack(len(payload), len(packed)) + packed


def _inner(frame: bytes) -> bytes:
    """The payload inside one frame (metadata, the Arrow stream)."""
    size, _ = HEADER.unpack(frame[len(MAGIC):len(MAGIC) + HEADER.size])
    return pa.decompress(frame[len(MAGIC) + HEADER.size:], decompressed_size=size, codec="zstd", asbytes=True)


def test_a_wrong_missing_or_revoked_token_gets_401_and_no_detail(world):
    good = world.tokens["TillN"]
    wrong = good[:-4] + ("0000" if not good.endswith("0000") else "1111")
    for token in (None, "", "nonsense", wrong, good.replace("ssk_", "ssk_f")):
        with _client(world, token) as c:
            r = c.get("/v1/sync/hello")
            assert r.status_code == 401 and r.json() == {"type": "about:blank", "title": "unauthorized", "status": 401}
    with connect(world.pub_url) as pub:
        revoked = tokens.create(pub, "TillS", rotate=True)
        tokens.revoke(pub, "TillS")
    with _client(world, revoked) as c:
        assert c.get("/v1/sync/hello").status_code == 401
    with connect(world.pub_url) as pub:
        world.tokens["TillS"] = tokens.create(pub, "TillS")
    p = world.sync("TillS", token=wrong)
    assert p.returncode != 0 and "token was refused" in p.stderr and wrong.split("_")[-1] not in p.stderr + p.stdout


def test_malformed_uploads_get_a_4xx_naming_the_problem_and_change_nothing(world):
    before = _state(world)
    with connect(world.pub_url) as pub:
        recgen = store.select_rows(pub, "sysmergesubscriptions", {"name": "TillN"})[0]["recgen"]
        nick = next(a["nickname"] for a in store.select_rows(pub, "sysmergearticles") if a["source_table"] == "Item")
    lo, hi = int(recgen), int(recgen) + 1

    def change(**kw):
        row = {"source": "x", "source_nick": 999, "tablenick": nick, "rowguid": "01a217e4-0b2f-7d64-b858-8c4bd893cad4",
               "generation": hi, "op": "upsert", "lineage": '{"1": 5}', "colv": None,
               "row": '{"id": 9999, "v": "x", "n": 1}', "target": None, "partition_id": 0} | kw
        return write_changes(pa.Table.from_pylist([row], change_schema()))

    cases = {
        "truncated": (change()[:-20], "is truncated"),
        "not this protocol's": (b"PAR1" + change()[4:], "this protocol's header"),
        "a size it does not have": (MAGIC + HEADER.pack(1 << 40, len(change()) - 20) + change()[20:], "unpack to more"),
        "a stream cut inside its frame": (_frame(_inner(change())[:-30]), "not an Arrow stream"),
        "a frame after the last": (change() + change()[:15], "does not start with this protocol's header"),
        "another schema": (_framed(pa.Table.from_pylist([{"a": 1}])), "not an Arrow stream of changes"),
        "metadata longer than the frame": (_frame(META.pack(1 << 20) + b"{}"), "longer than its payload"),
        "a column the article lacks": (change(row='{"id": 9999, "v": "x", "secret": 1}'), "'secret' not in the article"),
        "an unknown article": (change(tablenick=4242), "not an article of this publication"),
        "a generation outside the range": (change(generation=hi + 5), "outside the upload's range"),
        "a lineage that is not one": (change(lineage='{"x": "y"}'), "is not nickname: version"),
        "an operation": (_wire_body(op=9), "unknown operation"),
        "a rowguid said to be in the row": (_wire_body(guid_in_row=True), "its rowguid is in its values"),
    }
    with _client(world, world.tokens["TillN"]) as c:
        for what, (body, expected) in cases.items():
            r = c.put(f"/v1/sync/uploads/{lo}-{hi}", content=body)
            assert r.status_code == (413 if what == "a size it does not have" else 400), (what, r.status_code, r.text)
            assert expected in r.json()["detail"], (what, r.json())
        r = c.put(f"/v1/sync/uploads/{lo}-{hi}", content=b"x" * (1024 * 1024 + 10))
        assert r.status_code == 413, r.text
        r = c.put(f"/v1/sync/uploads/{lo + 5}-{hi + 5}", content=change(generation=hi + 5))
        assert r.status_code == 409 and r.json()["expected_lo"] == lo, r.text
        assert c.put("/v1/sync/uploads/x-y", content=change()).status_code == 400
        assert c.post("/v1/sync/download", json={"after": -1}).status_code == 400
        assert c.post("/v1/sync/download", json={"after": 0, "failed": "everything"}).status_code == 400
        r = c.get("/v1/sync/snapshot/whatever/../../../../etc/passwd")
        assert r.status_code in (400, 404, 409), r.text
    assert _state(world) == before


def test_the_same_upload_again_gets_its_answer_and_another_body_is_refused(world):
    shell(world.device_url("TillN"), "UPDATE Item SET v = 'once' WHERE id = 7;\n")
    lo, hi, body = upload_body(world, "TillN")
    with _client(world, world.tokens["TillN"]) as c:
        first = c.put(f"/v1/sync/uploads/{lo}-{hi}", content=body)
        assert first.status_code == 200, first.text
        item = next(k for k in first.json()["stats"] if k.endswith("Item"))
        assert first.json()["stats"][item]["updates"] == 1
        after = _state(world)
        again = c.put(f"/v1/sync/uploads/{lo}-{hi}", content=body)       # a retry whose reply was lost
        assert again.status_code == 200 and again.json() == first.json()
        other = c.put(f"/v1/sync/uploads/{lo}-{hi}", content=write_changes(change_schema().empty_table()))
        assert other.status_code == 409 and "other changes" in other.json()["detail"], other.text
    assert _state(world) == after
    assert _rows(world.pub_url, "Item")[7][1] == "once"
    _ok(world.sync("TillN"))                 # the device learns the publisher has it: nothing sent twice
    assert _rows(world.device_url("TillN"), "Item") == _rows(world.pub_url, "Item")


def test_a_change_to_a_row_of_another_partition_is_refused_and_logged(world):
    with connect(world.pub_url) as pub:
        south = str(pub.scalar(f'SELECT rowguid FROM {rows_of(pub, "Store")} AS t WHERE "region" = \'south\' '
                               'ORDER BY "id" LIMIT 1'))
        before = _rows(world.pub_url, "Store")
    # the device forges it: a row of the south under a rowguid it never received
    with connect(world.device_url("TillN")) as dev:
        forged = insert_with_rowguid_sql(dev, "Store", {"id": 999, "region": "north", "name": "forged"}, south)
    shell(world.device_url("TillN"), forged)
    p = world.sync("TillN")
    _ok(p)
    assert _rows(world.pub_url, "Store") == before, "a row of another partition was changed by a device"
    with connect(world.pub_url) as pub:
        refused = [c for c in store.select_rows(pub, "MSmerge_conflicts_info", {"subscription": "TillN"})
                   if c["reason_code"] == "refused"]
    assert refused and "not in the partition of TillN" in refused[-1]["reason_text"], refused


def test_a_change_that_failed_at_the_publisher_is_sent_again_once_its_obstacle_is_gone(world):
    # the name is taken at the publisher by a store of the south, which the north's till does not hold
    shell(world.device_url("TillN"), "INSERT INTO Store (id, region, name) VALUES (71, 'north', 'store 2');\n")
    _ok(world.sync("TillN"))
    assert 71 not in _rows(world.pub_url, "Store")
    with connect(world.pub_url) as pub:
        assert store.select_rows(pub, "MSmerge_failed_changes"), "the failed change is not listed at the publisher"
    shell(world.pub_url, 'UPDATE "Store" SET "name" = \'store 2b\' WHERE "id" = 2;\n')
    _ok(world.sync("TillN"))                     # the device's row was not changed: it is sent again
    assert _rows(world.pub_url, "Store")[71] == (71, "north", "store 2")
    with connect(world.pub_url) as pub:
        assert not store.select_rows(pub, "MSmerge_failed_changes")


def test_a_change_that_failed_at_the_device_is_sent_again_once_its_obstacle_is_gone(world):
    shell(world.device_url("TillN"), "CREATE TRIGGER local_rule BEFORE INSERT ON Store WHEN NEW.name = 'no such name' "
                                     "BEGIN SELECT RAISE(ABORT, 'a rule of this device'); END;\n")
    shell(world.pub_url, 'INSERT INTO "Store" ("id", "region", "name") VALUES (72, \'north\', \'no such name\');\n')
    _ok(world.sync("TillN"))
    assert 72 not in _rows(world.device_url("TillN"), "Store")
    with connect(world.device_url("TillN")) as dev:
        assert store.select_rows(dev, "MSmerge_failed_changes"), "the failed change is not listed at the device"
    shell(world.device_url("TillN"), "DROP TRIGGER local_rule;\n")
    _ok(world.sync("TillN"))                     # the publisher's row did not change: it is read again for the device
    assert _rows(world.device_url("TillN"), "Store")[72] == (72, "north", "no such name")
    with connect(world.device_url("TillN")) as dev:
        assert not store.select_rows(dev, "MSmerge_failed_changes")


def test_a_lineage_claiming_versions_the_publisher_never_had_is_refused(world):
    with connect(world.pub_url) as pub:
        reg = store.select_rows(pub, "sysmergesubscriptions", {"name": "TillN"})[0]
        guid = str(pub.scalar(f'SELECT rowguid FROM {rows_of(pub, "Item")} AS t WHERE "id" = 9'))
        nick = next(a["nickname"] for a in store.select_rows(pub, "sysmergearticles") if a["source_table"] == "Item")
    lo = int(reg["recgen"])
    forged = {"source": "", "source_nick": 0, "tablenick": nick, "rowguid": guid, "generation": lo + 1, "op": "upsert",
              "lineage": json.dumps({"1": 10**9, str(reg["replnickname"]): 1}), "colv": None,
              "row": '{"id": 9, "v": "forged", "n": 9}', "target": None, "partition_id": 0}
    with _client(world, world.tokens["TillN"]) as c:
        r = c.put(f"/v1/sync/uploads/{lo}-{lo + 1}", content=write_changes(pa.Table.from_pylist([forged], change_schema())))
    assert r.status_code == 200, r.text
    item = next(k for k in r.json()["stats"] if k.endswith("Item"))
    assert r.json()["stats"][item]["failed"] == 1
    assert _rows(world.pub_url, "Item")[9][1] != "forged"
    with connect(world.pub_url) as pub:
        failed = store.select_rows(pub, "MSmerge_failed_changes", {"rowguid": guid})
        assert failed and "lineage claims" in failed[0]["reason"], failed
        store.delete_rows(pub, "MSmerge_failed_changes", {"rowguid": guid})


def test_random_upload_bodies_never_break_the_door(world):
    """Fuzzing: valid bodies with random bytes changed or cut, in the frame or in the Arrow stream inside it
    (framed again): always a 4xx or a 200, never a 5xx."""
    rng = random.Random(1)
    with connect(world.pub_url) as pub:
        lo = int(store.select_rows(pub, "sysmergesubscriptions", {"name": "TillS"})[0]["recgen"])
    base = write_changes(pa.Table.from_pylist([{
        "source": "", "source_nick": 0, "tablenick": 1, "rowguid": "01a217e4-0b2f-7d64-b858-8c4bd893cad4",
        "generation": lo + 1, "op": "upsert", "lineage": '{"5": 1}', "colv": None, "row": '{"id": 1}', "target": None,
        "partition_id": 0}], change_schema()))
    inner = _inner(base)

    def mutated(data: bytes) -> bytes:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out[:rng.randrange(len(out))] if rng.random() < 0.3 else out)

    seen = set()
    with _client(world, world.tokens["TillS"]) as c:
        for k in range(300):
            body = mutated(base) if k % 2 else _frame(mutated(inner))
            r = c.put(f"/v1/sync/uploads/{lo}-{lo + 1}", content=body)
            seen.add(r.status_code)
            assert r.status_code < 500, r.text
    assert 400 in seen
    _ok(world.sync("TillS"))
    assert _holds(world, world.device_url("TillS")) == _partition(world, "south")


def test_a_device_file_belongs_to_one_subscription(world):
    p = world.sync("TillS", database=world.device("TillN"))
    assert p.returncode != 0 and f"{world.device('TillN')} belongs to subscription TillN" in p.stderr, p.stderr


def test_the_device_refuses_to_send_its_token_in_the_clear(world, tmp_path):
    p = world.sync("TillN", "--server", "http://192.0.2.1:8443")
    assert p.returncode == 2 and "in the clear" in p.stderr, p.stderr
    loose = tmp_path / "token"
    loose.write_text(world.tokens["TillN"])
    os.chmod(loose, 0o644)
    p = world.sync("TillN", "--token-file", str(loose), token="")
    assert p.returncode == 2 and "chmod 600" in p.stderr, p.stderr


def test_sync_needs_neither_spark_nor_java_nor_the_server(world, tmp_path):
    """The device's install: pyspark, py4j, Starlette and uvicorn unimportable, no java on PATH."""
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nfor m in ('pyspark', 'py4j', 'starlette', 'uvicorn'):\n    sys.modules[m] = None\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sqlite3",):
        os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
    shell(world.device_url("TillS"), "INSERT INTO Item (id, v, n) VALUES (201, 'no spark', 1);\n")
    p = world.sync("TillS", env={"PYTHONPATH": str(blocker), "PATH": str(bin_dir)})
    _ok(p)
    assert _rows(world.pub_url, "Item")[201] == (201, "no spark", 1)


def test_fifty_devices_sync_at_once_beside_the_merge_agent_and_writers(world, spark):
    """50 device clients at once (threads, each with its own file and connection to the door), while an
    application writes at the publisher and the merge agent syncs the direct subscriber."""
    names = list(FLEET)
    options = {n: DeviceOptions(world.server.url, n, world.device_url(n), world.tokens[n]) for n in names}
    stop = threading.Event()
    hq_rows: list[int] = []
    errors: list[BaseException] = []

    def application() -> None:
        with connect(world.pub_url) as r:
            i = 100_000
            while not stop.is_set():
                with r.transaction():
                    r.execute('INSERT INTO "Store" ("id", "region", "name") VALUES (%s, %s, %s)', (i, "east", f"app {i}"))
                hq_rows.append(i)
                i += 1

    def merges() -> None:
        try:
            while not stop.is_set():
                summary = MergeAgent(world.topology, spark).run()
                assert summary.ok, summary.to_dict()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    background = [threading.Thread(target=application), threading.Thread(target=merges)]
    for t in background:
        t.start()
    try:
        with ThreadPoolExecutor(len(names)) as pool:
            first = list(pool.map(lambda n: sync(options[n]), names))
            assert all(s.ok for s in first), [s.to_dict() for s in first if not s.ok]
            for k, n in enumerate(names):
                shell(world.device_url(n), f"INSERT INTO Store (id, region, name) VALUES ({8000 + k}, '{FLEET[n]}', "
                                           f"'by {n}');\n")
            second = list(pool.map(lambda n: sync(options[n]), names))
            assert all(s.ok for s in second), [s.to_dict() for s in second if not s.ok]
    finally:
        stop.set()
        for t in background:
            t.join()
    assert not errors, errors
    stores = _rows(world.pub_url, "Store")
    assert all(8000 + k in stores for k in range(len(names))), "a device's insert did not reach the publisher"
    assert all(i in stores for i in hq_rows)
    with ThreadPoolExecutor(10) as pool:
        last = list(pool.map(lambda n: sync(options[n]), names))
    assert all(s.ok for s in last)
    for n in names:
        held, want = _holds(world, world.device_url(n)), _partition(world, FLEET[n])
        assert held == want, (n, {t: (sorted(set(held[t]) - set(want[t])), sorted(set(want[t]) - set(held[t])))
                                  for t in held})


def test_a_device_of_the_previous_release_upgrades_on_its_next_sync_and_loses_no_change(world):
    _ok(world.sync("TillN"))
    downgrade(world.device_url("TillN"))       # its file as the release before the tracking log left it
    shell(world.device_url("TillN"), "UPDATE Item SET v = 'old release' WHERE id = 3;\n"
                                     "INSERT INTO Item (id, v, n) VALUES (103, 'old insert', 1);\n")
    with connect(world.device_url("TillN")) as dev:
        before = {int(i): str(g).lower() for i, g in dev.query('SELECT "id", "rowguid" FROM "Item" WHERE "id" <> 103')}
    p = world.sync("TillN")
    _ok(p)
    assert "change tracking upgraded" in p.stdout + p.stderr
    items = _rows(world.pub_url, "Item")
    assert items[3][1] == "old release" and items[103][1] == "old insert"
    with connect(world.device_url("TillN")) as dev:
        assert store.metadata_version(dev) == store.MERGE.version
        # the rowguid column the publisher added left the device's table for its place beside it (the door's hello
        # names those articles), every row keeping its rowguid: the application's table is its own again
        assert dev.reflect(dev.dialect.resolve_name(TableName(None, "Item"))).column("rowguid") is None
        after = {int(i): str(g).lower() for i, g in dev.query(f'SELECT "id", "rowguid" FROM {rows_of(dev, "Item")} AS t')}
        assert {i: after[i] for i in before} == before and 103 in after
    shell(world.device_url("TillN"), "UPDATE Item SET v = 'new release' WHERE id = 4;\n")
    _ok(world.sync("TillN"))
    assert _rows(world.pub_url, "Item")[4][1] == "new release"


def test_a_generation_bigger_than_a_batch_reaches_a_device_in_parts(world):
    """2,500 items inserted in one transaction at the publisher are one generation, bigger than the
    leveling threshold (1,000): a device taking one unit a batch receives it in three batches cut by key,
    every row once; a device of an earlier release (no ``keyset`` in its request) gets it whole."""
    with connect(world.pub_url) as r, r.transaction():
        r.executemany('INSERT INTO "Item" VALUES (%s, %s, %s)', [(i, f"big{i}", i) for i in range(10_000, 12_500)])
    after = _recgen(world.device_url("TillN"))
    with _client(world, world.tokens["TillN"]) as c:     # the door's round closes the generation
        metas = {k: read_frames(c.post("/v1/sync/download", json={"after": after, "batch": 1, **extra}).content,
                                "download")[0][1] for k, extra in (("old", {}), ("new", {"keyset": True}))}
    gens = {k: {g: b for g, b in m["where"].items() if int(g) > 0} for k, m in metas.items()}   # (not removals)
    assert metas["old"]["ranges"] == [] and gens["new"] == {}
    (big,) = {str(r[0]) for r in metas["new"]["ranges"]}
    assert gens["old"] == {big: 0} and [r[3] for r in metas["new"]["ranges"]] == [0, 1, 2]
    assert [b["ends_within"] for b in metas["new"]["batches"]] == [int(big), int(big), 0]
    p = world.sync("TillN", "--json", "--generations-per-batch", "1")
    _ok(p)
    (s,) = json.loads(p.stdout)["subscriptions"]
    assert s["ok"] and s["batches"]["download"] == 3, s
    assert s["download"]["public.Item"]["inserts"] == 2500, s["download"]
    items = _rows(world.device_url("TillN"), "Item")
    assert {i: items.get(i) for i in range(10_000, 12_500)} == {i: (i, f"big{i}", i) for i in range(10_000, 12_500)}
