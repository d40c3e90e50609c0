"""Schema evolution with ``sparksync schema-change``, on real databases: a column's type widened (text length,
integer width, numeric precision), narrowed where every replica's values fit (refused by name while one does
not), made NOT NULL, given a default, renamed, dropped and added. SQLite and PostgreSQL publishers, each with a
direct SQLite and a direct PostgreSQL subscriber and a web device that is offline across every change with writes
made under the old schema: they arrive under the new one; a column-tracked article's column versions follow a
rename; an upload made under an older schema that reaches the door after a change is mapped there. A client's own
ALTER at the publisher (a type change on PostgreSQL, a rename on both) is named with the command that replicates
it, and that command then records it without altering the table again."""

from __future__ import annotations

import pytest

from sparksync import api
from sparksync.dialects import connect
from sparksync.errors import SchemaDrift, SchemaError, ValueRejected
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.merge.tracking import pending
from sparksync.metadata import store
from sparksync.metadata.records import FailedChangeRow
from sparksync.names import TableName
from sparksync.validation.subscriptions import validate
from tests.support.databases import databases
from tests.support.web import WebWorld, cli

pytestmark = pytest.mark.spark

ITEM = {
    "sqlite": 'CREATE TABLE "Item" ("id" INTEGER PRIMARY KEY, "Phone" VARCHAR(20), "qty" SMALLINT, '
              '"price" NUMERIC(8,2), "note" TEXT, "flag" INTEGER, "spare" TEXT)',
    "postgresql": 'CREATE TABLE "Item" ("id" integer PRIMARY KEY, "Phone" varchar(20), "qty" smallint, '
                  '"price" numeric(8,2), "note" text, "flag" integer, "spare" text)',
}
BIGGER_INT = {"sqlite": "BIGINT", "postgresql": "integer"}


def column(url: str, name: str):
    with connect(url) as r:
        info = r.reflect(TableName(None, "Item"))
        assert info is not None
        return info.column(name)


def value(url: str, col: str, id_: int):
    with connect(url) as r:
        return r.scalar(f'SELECT "{col}" FROM "Item" WHERE "id" = {int(id_)}')


def merge(w: WebWorld, spark) -> None:
    summary = MergeAgent(w.topology, spark).run(MergeOptions())
    assert summary.ok, summary.to_dict()


def device_sync(w: WebWorld) -> None:
    for _ in range(2):                 # the upload, then what the others made meanwhile
        p = w.sync("Van")
        assert p.returncode == 0, p.stderr
        assert "Traceback" not in p.stderr


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory):
    kind = request.param
    folder = tmp_path_factory.mktemp(f"evolution-{kind}")
    with databases(folder, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        pub = dbs.url(kind, "evopub")
        with connect(pub) as r:
            r.execute(ITEM[kind])
            r.executemany(f'INSERT INTO "Item" VALUES ({r.p}, {r.p}, 1, 10.5, {r.p}, 0, \'s\')',
                          [(i, f"555-{i:04d}", f"note {i}") for i in range(1, 21)])
        w = WebWorld(folder, {
            "publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(folder / "snap")},
            "publications": [{"name": "Sales", "articles": [{"table": "Item", "column_tracking": True}]}],
            "subscriptions": [{"name": "S1", "publication": "Sales", "database": dbs.url("sqlite", "evos1")},
                              {"name": "S2", "publication": "Sales", "database": dbs.url("postgresql", "evos2")},
                              {"name": "Van", "publication": "Sales", "transport": "web"}]}, spark)
        w.kind = kind
        w.urls = {"HQ": pub, "S1": w.topology.subscriber_url(w.topology.subscription("S1")),
                  "S2": w.topology.subscriber_url(w.topology.subscription("S2")), "Van": w.device_url("Van")}
        w.server.start()
        try:
            merge(w, spark)
            device_sync(w)
            # a conflict the device loses: its outbox keeps the winning row, under the names of the time
            with connect(w.urls["Van"]) as d:
                d.execute('UPDATE "Item" SET "Phone" = \'van-4\' WHERE "id" = 4')
            with connect(pub) as r:
                r.execute('UPDATE "Item" SET "Phone" = \'hq-4\' WHERE "id" = 4')
            device_sync(w)
            # offline across every change below: the device and S1 write under the old schema
            with connect(w.urls["Van"]) as d:
                d.execute('UPDATE "Item" SET "Phone" = \'van-phone\' WHERE "id" = 1')
                d.execute('INSERT INTO "Item" ("id", "Phone", "qty", "price", "note", "flag") '
                          'VALUES (100, \'van-new\', 3, 1.25, \'from the van\', 0)')
            with connect(w.urls["S1"]) as s1:
                s1.execute('UPDATE "Item" SET "Phone" = \'s1-phone\' WHERE "id" = 2')
            w.lines = []
            for kw in ({"alter_column": "Phone varchar(40)"}, {"alter_column": f"qty {BIGGER_INT[kind]}"},
                       {"alter_column": "price numeric(12,2)"}, {"alter_column": "note NOT NULL"},
                       {"alter_column": "flag DEFAULT 1"}, {"rename_column": "Phone PhoneNumber"},
                       {"drop_column": "spare"}, {"add_column": "added text"}):
                w.lines += api.schema_change(w.topology, "Sales", "Item", **kw)
            with connect(pub) as r:               # data that needs the new shapes
                r.execute('UPDATE "Item" SET "PhoneNumber" = \'a number longer than twenty\', "qty" = 100000, '
                          '"price" = 1234567890.25, "added" = \'new\' WHERE "id" = 3')
            merge(w, spark)
            device_sync(w)
            merge(w, spark)
            yield w
        finally:
            w.server.stop()


def test_each_change_is_recorded_in_order_with_what_it_did(world):
    said = "\n".join(world.lines)
    for expected in ("altered column Phone (type text(40))", "altered column note (NOT NULL)",
                     "altered column flag (DEFAULT 1)", "renamed column Phone to PhoneNumber"):
        assert expected in said, said
    with connect(world.pub_url) as r:
        kinds = [(c["schematype"], c["column_name"]) for c in store.select_rows(r, "sysmergeschemachange",
                                                                                  order_by=("schemaversion",))]
    assert kinds == [("alter_column", "Phone"), ("alter_column", "qty"), ("alter_column", "price"),
                     ("alter_column", "note"), ("alter_column", "flag"), ("rename_column", "Phone"),
                     ("drop_column", "spare"), ("add_column", "added")]


@pytest.mark.parametrize("replica", ["HQ", "S1", "S2", "Van"])
def test_every_replica_has_the_new_shape(world, replica):
    url = world.urls[replica]
    assert column(url, "Phone") is None and column(url, "spare") is None and column(url, "added") is not None
    phone, qty, price, note = (column(url, c) for c in ("PhoneNumber", "qty", "price", "note"))
    assert phone is not None and phone.type.length == 40, phone
    assert qty.type.kind.value in ("integer", "bigint"), qty
    assert (price.type.precision, price.type.scale) == (12, 2), price
    assert not note.nullable, note
    assert "1" in str(column(url, "flag").default), column(url, "flag")


@pytest.mark.parametrize("replica", ["HQ", "S1", "S2", "Van"])
def test_writes_made_under_the_old_schema_arrive_under_the_new_one(world, replica):
    url = world.urls[replica]
    assert value(url, "PhoneNumber", 1) == "van-phone"          # the device's update of Phone, offline
    assert value(url, "PhoneNumber", 100) == "van-new"          # and its insert
    assert value(url, "PhoneNumber", 2) == "s1-phone"           # a direct subscriber's
    assert value(url, "PhoneNumber", 3) == "a number longer than twenty"      # values only the new shapes hold
    assert value(url, "qty", 3) == 100000
    assert str(value(url, "price", 3)).startswith("1234567890.25")
    assert value(url, "added", 3) == "new"


def test_a_column_tracked_articles_versions_follow_the_rename(world):
    for name, url in world.urls.items():
        with connect(url) as r:
            pending.flush(r)
            colvs = [str(c) for (c,) in r.query(f"SELECT colv FROM {r.meta('MSmerge_contents')} WHERE colv IS NOT NULL")]
        assert any("PhoneNumber" in c for c in colvs), name
        assert not any('"Phone"' in c for c in colvs), (name, colvs[:3])


def test_the_rows_a_devices_outbox_keeps_follow_a_rename_and_a_drop(world):
    with connect(world.urls["Van"]) as d:
        lost = [(w, m) for w, m in d.query(f"SELECT winner_row, mine FROM {d.meta('MSdevice_outbox')} "
                                           "WHERE state = 'lost'")]
    assert lost, "the device lost no conflict"
    for winner, mine in lost:
        assert '"PhoneNumber":"hq-4"' in winner.replace(" ", "") and '"Phone"' not in winner, winner
        assert '"spare"' not in winner, winner                          # a dropped column: gone from it too
        assert mine is None or ('"Phone"' not in mine and '"spare"' not in mine), mine


def test_the_direct_subscribers_validate(world, spark):
    report = validate(world.topology, lambda: spark, checksum=True)
    assert report.ok, [(s.subscription, s.error) for s in report.subscriptions if not s.ok]


def test_after_the_changes_every_replica_keeps_replicating_the_renamed_column(world, spark):
    with connect(world.urls["Van"]) as d:
        d.execute('UPDATE "Item" SET "PhoneNumber" = \'van-again\' WHERE "id" = 5')
    with connect(world.urls["S2"]) as s2:
        s2.execute('INSERT INTO "Item" ("id", "PhoneNumber", "note") VALUES (200, \'s2\', \'n\')')   # flag: default
    device_sync(world)
    merge(world, spark)
    device_sync(world)
    for name, url in world.urls.items():
        assert value(url, "PhoneNumber", 5) == "van-again", name
        assert value(url, "flag", 200) == 1, name


def test_a_narrowing_is_refused_naming_the_replica_whose_value_does_not_fit_then_made_once_all_fit(world, spark):
    long = "x" * 30
    with connect(world.urls["S2"]) as s2:
        s2.execute(f'UPDATE "Item" SET "PhoneNumber" = \'{long}\' WHERE "id" = 7')     # not merged yet
    with connect(world.pub_url) as r:
        before = len(store.select_rows(r, "sysmergeschemachange"))
    with pytest.raises(SchemaError, match=r"column PhoneNumber cannot become text\(28\): subscriber S2: 1 row\(s\) "
                                          r"hold a value that does not fit \(the first: id=7\)"):
        api.schema_change(world.topology, "Sales", "Item", alter_column="PhoneNumber varchar(28)")
    with pytest.raises(SchemaError, match="not of one family"):
        api.schema_change(world.topology, "Sales", "Item", alter_column="PhoneNumber integer")
    with connect(world.pub_url) as r:
        assert len(store.select_rows(r, "sysmergeschemachange")) == before
    assert column(world.pub_url, "PhoneNumber").type.length == 40
    api.schema_change(world.topology, "Sales", "Item", alter_column="PhoneNumber varchar(35)")   # every value fits
    merge(world, spark)
    device_sync(world)
    for name, url in world.urls.items():
        assert column(url, "PhoneNumber").type.length == 35, name
        assert value(url, "PhoneNumber", 7) == long, name


def test_a_clients_own_alter_at_the_publisher_is_named_with_the_command_that_replicates_it(world, spark):
    """A type change (PostgreSQL: SQLite has no ALTER COLUMN) and a rename (both) made with a client, not with
    schema-change: the next merge names the command; the command then records what the client did."""
    if world.kind == "postgresql":
        with connect(world.pub_url) as r:
            r.execute('ALTER TABLE "Item" ALTER COLUMN "note" TYPE varchar(300)')
        with pytest.raises(SchemaDrift) as e:
            MergeAgent(world.topology, spark).run(MergeOptions())
        assert ("sparksync schema-change --publication Sales --article public.Item --alter-column "
                '"note varchar(300)"') in e.value.message
        api.schema_change(world.topology, "Sales", "Item", alter_column="note varchar(300)")   # recorded, not redone
    with connect(world.pub_url) as r:
        r.execute('ALTER TABLE "Item" RENAME COLUMN "flag" TO "flags"')
    with pytest.raises(SchemaDrift, match=r'--rename-column "flag flags"'):
        MergeAgent(world.topology, spark).run(MergeOptions())
    api.schema_change(world.topology, "Sales", "Item", rename_column="flag flags")
    with connect(world.pub_url) as r:
        r.execute('UPDATE "Item" SET "flags" = 7 WHERE "id" = 8')
    merge(world, spark)
    device_sync(world)
    for name, url in world.urls.items():
        if world.kind == "postgresql":
            assert column(url, "note").type.length == 300, name
        assert column(url, "flags") is not None and column(url, "flag") is None, name
        assert value(url, "flags", 8) == 7, name


def test_an_upload_made_under_an_older_schema_is_mapped_at_the_door(world):
    """A schema change lands between a device's reading of its upload and the upload's arrival: the door maps the
    rows by the changes since the version the upload names (a renamed column's values under the new name; a
    column added since keeps the publisher's value), over a real HTTP connection."""
    import httpx

    from sparksync.web.protocol import PROTOCOL
    from tests.support.web import file_headers, upload_body

    with connect(world.urls["Van"]) as d:
        version = store.select_rows(d, "sysmergepublications", {"name": "Sales"})[0]["schema_version"]
        d.execute('UPDATE "Item" SET "note" = \'raced\' WHERE "id" = 9')
    lo, hi, body = upload_body(world, "Van", {"schema_version": version})
    api.schema_change(world.topology, "Sales", "Item", rename_column="note memo")
    api.schema_change(world.topology, "Sales", "Item", add_column="extra integer")
    with connect(world.pub_url) as r:
        r.execute('UPDATE "Item" SET "extra" = 9 WHERE "id" = 9')
    headers = {"Sparksync-Protocol": str(PROTOCOL), "Authorization": f"Bearer {world.tokens['Van']}",
               **file_headers(world, "Van")}
    with httpx.Client(base_url=world.server.url, headers=headers, timeout=60) as c:
        forged = c.put(f"/v1/sync/uploads/{lo}-{hi}", content=upload_body(world, "Van", {"schema_version": 999})[2])
        assert forged.status_code == 400 and "schema version 999" in forged.json()["detail"], forged.text
        r = c.put(f"/v1/sync/uploads/{lo}-{hi}", content=body)
    assert r.status_code == 200, r.text
    assert value(world.pub_url, "memo", 9) == "raced"
    assert value(world.pub_url, "extra", 9) == 9                  # not emptied by a row that never had the column
    device_sync(world)
    assert value(world.urls["Van"], "memo", 9) == "raced" and value(world.urls["Van"], "extra", 9) == 9


def test_a_schema_change_killed_at_the_publisher_or_in_a_replay_leaves_every_replica_whole(world, spark):
    """kill -9 inside the publisher's transaction (altered, not yet recorded), then inside a SQLite subscriber's
    replay (its declaration rewritten, not yet committed): each replica is as it was, its file intact, and the
    command or the next merge finishes the change."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    exe, fp = Path(sys.executable).with_name("sparksync"), world.folder / "schema-failpoints"

    def killed(*args: str, failpoint: str) -> subprocess.CompletedProcess:
        fp.write_text(failpoint + "\n", encoding="utf-8")
        env = {**os.environ, "SPARKSYNC_FAILPOINTS": str(fp), "SPARK_MASTER": "local[1]"}
        return subprocess.run([str(exe), *args, "-c", str(world.config)], capture_output=True, text=True, env=env,
                              timeout=300)

    def versions() -> dict[str, int]:
        out = {}
        for name in ("HQ", "S1", "S2"):
            with connect(world.urls[name]) as r:
                out[name] = store.select_rows(r, "sysmergepublications", {"name": "Sales"})[0]["schema_version"]
        return out

    before = versions()
    p = killed("schema-change", "-p", "Sales", "-a", "Item", "--alter-column", "PhoneNumber varchar(60)",
               failpoint="schema_change.altered Sales !kill")
    assert p.returncode == -9, p.stderr[-2000:]
    assert versions() == before and column(world.pub_url, "PhoneNumber").type.length == 35
    with connect(world.pub_url) as r:                       # its triggers are there: a write is still tracked
        r.execute('UPDATE "Item" SET "PhoneNumber" = \'after the kill\' WHERE "id" = 6')
    merge(world, spark)
    assert value(world.urls["S1"], "PhoneNumber", 6) == "after the kill"
    api.schema_change(world.topology, "Sales", "Item", alter_column="PhoneNumber varchar(60)")
    p = killed("merge", failpoint="schema_change.replayed S1 !kill")
    assert p.returncode == -9, p.stderr[-2000:]
    with connect(world.urls["S1"]) as r:
        assert r.query("PRAGMA integrity_check") == [("ok",)]
    assert versions()["S1"] == before["HQ"] and column(world.urls["S1"], "PhoneNumber").type.length == 35
    merge(world, spark)
    device_sync(world)
    for name, url in world.urls.items():
        assert column(url, "PhoneNumber").type.length == 60, name
    report = validate(world.topology, lambda: spark, checksum=True)
    assert report.ok, [(s.subscription, s.error) for s in report.subscriptions if not s.ok]


def _outbox(w: WebWorld) -> dict[int, dict]:
    """The device's outbox (``sparksync outbox --json``), by the row's id."""
    import json


    p = cli(["outbox", "--database", str(w.device("Van")), "--json"])
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    out = {}
    for c in json.loads(p.stdout or "[]"):
        key = json.loads(c["key"]) if isinstance(c["key"], str) else c["key"]
        out[int(key["id"])] = c
    return out


def test_a_device_value_a_narrowing_or_not_null_does_not_admit_fails_by_name_and_its_other_writes_arrive(world, spark):
    """Findings 3 and 4 of reliability round 5: a device offline across a narrowing (qty smallint) and a NOT NULL
    (extra), holding a value neither admits. The command says the device was not counted; the device's sync uploads
    every write under its old schema: the honest one arrives, each one that does not fit is a failed change naming
    its column (not applied as is at a SQLite HQ), its outbox says failed, and the sync exits non-zero naming the rows
    to correct. Once its application corrects them, the next sync replays the changes and brings them."""
    with connect(world.pub_url) as r:
        r.execute('UPDATE "Item" SET "extra" = 0 WHERE "extra" IS NULL')
        r.execute('UPDATE "Item" SET "qty" = 1 WHERE "qty" > 32767')
    merge(world, spark)
    device_sync(world)
    with connect(world.urls["Van"]) as d:
        d.execute('UPDATE "Item" SET "qty" = 70000 WHERE "id" = 10')
        d.execute('INSERT INTO "Item" ("id", "PhoneNumber", "qty", "price", "memo", "flags", "extra") '
                  "VALUES (300, 'van-null', 1, 1, 'm', 0, NULL)")
        d.execute('UPDATE "Item" SET "memo" = \'honest\' WHERE "id" = 11')
    said = api.schema_change(world.topology, "Sales", "Item", alter_column="qty smallint")
    assert any("not counted" in line and "Van" in line and "failed change naming column qty" in line
               for line in said), said
    said = api.schema_change(world.topology, "Sales", "Item", alter_column="extra NOT NULL")
    assert any("names the rows its application must fill" in line for line in said), said
    merge(world, spark)

    p = world.sync("Van")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "correct those rows and sync again" in p.stderr and "id=10" in p.stderr and "id=300" in p.stderr, p.stderr
    assert value(world.pub_url, "memo", 11) == "honest"                      # its honest write arrived
    assert value(world.pub_url, "qty", 10) == 1 and value(world.pub_url, "extra", 300) is None
    box = _outbox(world)
    assert box[11]["state"] == "applied", box[11]
    for id_, col in ((10, "qty"), (300, "extra")):
        assert box[id_]["state"] == "failed" and col in (box[id_].get("reason") or ""), box[id_]
    with connect(world.pub_url) as r:
        reasons = [f.reason for f in store.select(r, FailedChangeRow, {})]
    assert any("does not fit column qty (smallint)" in x for x in reasons), reasons

    with connect(world.urls["Van"]) as d:                 # the application corrects the rows it was told of
        d.execute('UPDATE "Item" SET "qty" = 7 WHERE "id" = 10')
        d.execute('UPDATE "Item" SET "extra" = 3 WHERE "id" = 300')
    device_sync(world)
    assert value(world.pub_url, "qty", 10) == 7 and value(world.pub_url, "extra", 300) == 3
    assert str(column(world.urls["Van"], "qty").type) == "smallint" and not column(world.urls["Van"], "extra").nullable
    box = _outbox(world)
    assert all(box[i]["state"] == "applied" for i in (10, 300) if i in box), box


def test_a_value_stored_outside_its_declared_type_fails_by_name_where_it_goes_and_validation_says_so(world, spark):
    """A SQLite publisher stores what it is given (its type affinity refuses nothing): 70000 written there into the
    smallint column is a failed change naming the column at every subscriber, SQLite or PostgreSQL, and the
    validation that follows reads the value (no crash) and says which subscriptions differ."""
    with connect(world.pub_url) as r:
        if world.kind == "postgresql":           # PostgreSQL refuses it when it is written: it never travels
            with pytest.raises(ValueRejected, match="out of range"):
                r.execute('UPDATE "Item" SET "qty" = 70000 WHERE "id" = 12')
            return
        r.execute('UPDATE "Item" SET "qty" = 70000 WHERE "id" = 12')
    MergeAgent(world.topology, spark).run(MergeOptions())
    for name in ("S1", "S2"):
        assert value(world.urls[name], "qty", 12) != 70000, name
        with connect(world.urls[name]) as r:
            reasons = [f.reason for f in store.select(r, FailedChangeRow, {})]
        assert any("does not fit column qty (smallint): 70000" in x for x in reasons), (name, reasons)
    report = validate(world.topology, lambda: spark, checksum=True)
    bad = {s.subscription for s in report.subscriptions if not s.ok}
    assert {"S1", "S2"} <= bad, [(s.subscription, s.error) for s in report.subscriptions]
    with connect(world.pub_url) as r:
        r.execute('UPDATE "Item" SET "qty" = 12 WHERE "id" = 12')
    merge(world, spark)
    assert value(world.urls["S1"], "qty", 12) == 12 and value(world.urls["S2"], "qty", 12) == 12
