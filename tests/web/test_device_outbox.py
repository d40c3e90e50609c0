"""A device's application sees what became of its writes: the outbox (each local change and its fate), the conflict
inbox (keep mine or theirs), and change notifications after each download batch. A SQLite and a PostgreSQL
publisher, the door of ``serve`` on a real HTTP connection, the device a SQLite file written with sqlite3, the
commands (``sparksync outbox``, ``sparksync conflicts --database``) run as processes. One topology per publisher;
the checks run in order on it and each compares the outbox with what arrived at the publisher."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import sparksync
from sparksync import failpoints
from sparksync.dialects import connect
from tests.support.shop import Shop, served
from tests.support.web import cli as run_cli

pytestmark = pytest.mark.spark

EXE = str(Path(sys.executable).with_name("sparksync"))


class World(Shop):
    def __init__(self, tmp: Path, pub: str, spark):
        super().__init__(tmp, pub, spark, products=10)
        self.seen: list = []

    def device(self, url: str) -> sparksync.Device:
        d = super().device(url)
        d.on_change(self.seen.append)
        return d

    def local(self, *statements: str) -> None:
        with sqlite3.connect(self.file) as db:
            for s in statements:
                db.execute(s)

    def at_publisher(self, *statements: str) -> None:
        with connect(self.pub) as r:
            for s in statements:
                r.execute(s)

    def row(self, pid: int) -> tuple | None:
        with connect(self.pub) as r:
            return r.query_one(f'SELECT "name", "price", "qty" FROM "Product" WHERE "id" = {pid}')

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        p = run_cli([*args, "--database", str(self.file)])
        assert "Traceback" not in p.stderr + p.stdout, p.stderr
        return p

    def outbox(self, *args: str) -> list[dict]:
        p = self.cli("outbox", "--json", *args)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory, pg_admin_url):
    with served(World, request.param, tmp_path_factory.mktemp(f"outbox-{request.param}"), pg_admin_url, spark) as w:
        yield w


def _by_key(entries: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for e in entries:
        out.setdefault(e["key"]["id"], []).append(e)
    return out


def test_local_changes_are_pending_with_their_operation_until_a_sync(world):
    world.local("INSERT INTO Product (id, name, price, qty) VALUES (100, 'new', 1.5, 1)",
                "UPDATE Product SET name = 'renamed' WHERE id = 1", "DELETE FROM Product WHERE id = 2")
    pending = world.outbox("--pending")
    ops = {e["key"]["id"] if e["key"] else e["rowguid"]: (e["operation"], e["state"]) for e in pending}
    assert ops[100] == ("insert", "pending") and ops[1] == ("update", "pending")
    assert ("delete", "pending") in ops.values() and len(pending) == 3
    summary = world.device(world.url).sync()
    assert summary.ok
    assert world.outbox("--pending") == []
    done = world.outbox()
    assert sorted((e["operation"], e["state"]) for e in done) == [("delete", "applied"), ("insert", "applied"),
                                                                 ("update", "applied")]
    assert world.row(100) == ("new", 1.5, 1) and world.row(1)[0] == "renamed" and world.row(2) is None
    p = world.cli("outbox", "--ack-all")
    assert p.returncode == 0 and "3 change(s) acknowledged" in p.stdout
    assert world.outbox() == []


def test_a_lost_conflict_carries_the_winner_and_keeping_mine_keeps_a_third_partys_later_write(world):
    world.local("UPDATE Product SET price = 111.0 WHERE id = 3")
    world.at_publisher('UPDATE "Product" SET "price" = 222.0 WHERE "id" = 3')
    assert world.device(world.url).sync().ok
    [lost] = [e for e in world.outbox() if e["state"] == "lost"]
    assert lost["key"] == {"id": 3} and lost["operation"] == "update" and lost["winner_replica"] == "HQ"
    assert lost["winner"]["price"] == 222.0 and lost["mine"]["price"] == 111.0 and lost["columns"] == ["price"]
    conflicts = {c["conflict_id"] for c in world.hq.conflicts()}
    assert lost["conflict_id"] in conflicts, "the outbox names a conflict the publisher did not log"
    inbox = json.loads(world.cli("conflicts", "--json").stdout)
    assert [c["change_id"] for c in inbox] == [lost["change_id"]]
    world.at_publisher('UPDATE "Product" SET "name" = \'third party\' WHERE "id" = 3')   # after the conflict
    p = world.cli("conflicts", "--keep", "mine", str(lost["change_id"]))
    assert p.returncode == 0, p.stderr
    assert json.loads(world.cli("conflicts", "--json").stdout) == []
    assert world.device(world.url).sync().ok
    assert world.row(3) == ("third party", 111.0, 3), "keeping mine lost a column the device did not touch"
    assert world.device(world.url).sync().ok
    with sqlite3.connect(world.file) as db:
        assert db.execute("SELECT name, price FROM Product WHERE id = 3").fetchone() == ("third party", 111.0)


def test_settling_twice_or_an_unknown_change_is_refused_and_changes_nothing(world):
    [settled] = [e for e in world.outbox() if e["state"] == "lost"]
    p = world.cli("conflicts", "--keep", "theirs", str(settled["change_id"]))
    assert p.returncode != 0 and "already settled" in p.stderr
    p = world.cli("conflicts", "--keep", "mine", "999999")
    assert p.returncode != 0 and "999999" in p.stderr


def test_a_change_the_publisher_refuses_fails_and_is_tried_again_as_the_same_change(world):
    world.local("UPDATE Product SET qty = -1 WHERE id = 4")          # the publisher's CHECK refuses it
    for tries in (1, 2):
        assert world.device(world.url).sync().ok
        [failed] = [e for e in world.outbox() if e["key"] == {"id": 4}]
        assert failed["state"] == "failed" and failed["tries"] == tries and "failed at the publisher" in failed["reason"]
        assert world.row(4)[2] == 4
    world.local("UPDATE Product SET qty = 40 WHERE id = 4")
    assert world.device(world.url).sync().ok
    entries = _by_key(world.outbox())[4]
    assert [(e["state"], e["change_id"]) for e in entries] == [("applied", failed["change_id"])]
    assert world.row(4)[2] == 40


def test_a_reply_lost_to_a_crash_is_asked_for_and_every_change_appears_once(world, tmp_path, monkeypatch):
    points = tmp_path / "failpoints"
    monkeypatch.setenv("SPARKSYNC_FAILPOINTS", str(points))
    failpoints.arm(str(points), "device.after_upload")
    world.local("UPDATE Product SET name = 'crash' WHERE id = 5", "UPDATE Product SET name = 'crash too' WHERE id = 6")
    with pytest.raises(failpoints.InjectedFault):
        world.device(world.url).sync()
    assert world.row(5)[0] == "crash", "the upload was applied at the publisher before the crash"
    assert {e["key"]["id"]: e["state"] for e in world.outbox("--pending")} == {5: "pending", 6: "pending"}
    assert world.device(world.url).sync().ok
    entries = _by_key(world.outbox())
    assert [e["state"] for e in entries[5]] == ["applied"] and [e["state"] for e in entries[6]] == ["applied"]


def test_each_download_batch_is_notified_once_after_it_commits_and_a_crash_delivers_it_at_the_next_sync(
        world, tmp_path, monkeypatch):
    world.seen.clear()
    world.at_publisher('INSERT INTO "Product" ("id", "name", "price", "qty") VALUES (200, \'from hq\', 2.0, 2)',
                       'UPDATE "Product" SET "price" = 7.5 WHERE "id" = 7', 'DELETE FROM "Product" WHERE "id" = 8')
    summary = world.device(world.url).sync()
    assert summary.ok
    got = {(c.article, c.operation, c.key["id"]) for b in world.seen for c in b.changes}
    article = "public.Product" if world.pub.startswith("postgresql") else "Product"      # the article's name
    assert got == {(article, "inserted", 200), (article, "updated", 7), (article, "deleted", 8)}
    listed = {(a, op, key["id"]) for a, op, _, key in summary.subscriptions[0].changed}
    assert listed == got
    world.seen.clear()
    points = tmp_path / "failpoints"
    monkeypatch.setenv("SPARKSYNC_FAILPOINTS", str(points))
    failpoints.arm(str(points), "device.after_download_batch")      # committed, the callbacks not called yet
    world.at_publisher('UPDATE "Product" SET "price" = 9.5 WHERE "id" = 9')
    with pytest.raises(failpoints.InjectedFault):
        world.device(world.url).sync()
    assert world.seen == []
    assert world.device(world.url).sync().ok
    assert [(c.operation, c.key) for b in world.seen for c in b.changes] == [("updated", {"id": 9})]
    assert world.device(world.url).sync().ok
    assert len(world.seen) == 1, "a batch was notified twice"


def test_notices_stay_exact_when_the_set_based_apply_falls_back_to_one_row_at_a_time(world, monkeypatch):
    """A download's plain changes are told from the apply's own classification. The device's own unique index on the
    name makes the set-based apply fail when a product takes the name another one gives up in the same batch (in one
    of the two directions, whatever order the database updates rows in): the batch goes one row at a time and
    retries, and the notices still say exactly which rows changed, once each."""
    from sparksync.merge.apply import batch

    one_at_a_time: list[str] = []
    real = batch._BatchApplier.one_row

    def one_row(self, w, st):
        one_at_a_time.append(w.inc.rowguid)
        return real(self, w, st)

    assert world.device(world.url).sync().ok        # what earlier checks left to download arrives first
    monkeypatch.setattr(batch._BatchApplier, "one_row", one_row)
    world.local('CREATE UNIQUE INDEX "product_name_here" ON "Product" ("name")')
    try:
        with connect(world.pub) as r:          # three products no other check of this world changes
            first, second, third = (i for (i,) in r.query(
                'SELECT "id" FROM "Product" WHERE "id" NOT IN (3, 7, 8, 9) ORDER BY "id" LIMIT 3'))
        for n, (taker, giver) in enumerate(((first, second), (second, first))):
            world.seen.clear()
            with connect(world.pub) as r, r.transaction():
                name = r.query_one(f'SELECT "name" FROM "Product" WHERE "id" = {giver}')[0]
                r.execute(f'UPDATE "Product" SET "name" = \'given up {n}\' WHERE "id" = {giver}')
                r.execute(f'UPDATE "Product" SET "name" = {r.p} WHERE "id" = {taker}', [name])
                r.execute(f'UPDATE "Product" SET "qty" = "qty" + 1 WHERE "id" = {third}')
            summary = world.device(world.url).sync()
            assert summary.ok, summary.to_dict()
            got = sorted((c.operation, c.key["id"]) for b in world.seen for c in b.changes)
            assert got == sorted([("updated", first), ("updated", second), ("updated", third)]), \
                (got, summary.to_dict())
            with sqlite3.connect(world.file) as db:
                assert db.execute(f'SELECT "name" FROM "Product" WHERE "id" = {taker}').fetchone() == (name,)
    finally:
        world.local('DROP INDEX IF EXISTS "product_name_here"')
    assert one_at_a_time, "the set-based apply never fell back: the test did not test it"


def test_answered_changes_older_than_the_publications_retention_leave_the_outbox_at_a_sync(world):
    world.local("UPDATE Product SET name = 'kept a while' WHERE id = 10")
    assert world.device(world.url).sync().ok
    [entry] = [e for e in world.outbox() if e["key"] == {"id": 10}]
    assert entry["state"] == "applied"
    with sqlite3.connect(world.file) as db:       # answered long ago: past the publication's retention (14 days)
        db.execute("UPDATE MSdevice_outbox SET answered_at = '2000-01-01 00:00:00+00:00' WHERE change_id = ?",
                   (entry["change_id"],))
    kept = {e["change_id"] for e in world.outbox()} - {entry["change_id"]}
    assert world.device(world.url).sync().ok
    assert {e["change_id"] for e in world.outbox()} == kept


def test_an_applied_change_keeps_its_key_when_its_row_is_gone_from_the_device(world):
    """Finding 11 of reliability round 5: an applied change whose row then left the device (a handler moved it out of
    the partition; here the publisher deletes it) was listed with key None. Its key is the row's as it was sent."""
    world.local("UPDATE Product SET name = 'then gone' WHERE id = 9")
    assert world.device(world.url).sync().ok
    world.at_publisher('DELETE FROM "Product" WHERE "id" = 9')
    assert world.device(world.url).sync().ok
    with sqlite3.connect(world.file) as db:
        assert db.execute("SELECT count(*) FROM Product WHERE id = 9").fetchone() == (0,)
    [entry] = [e for e in world.outbox() if e["operation"] == "update" and e["key"] == {"id": 9}]
    assert entry["state"] == "applied" and entry["mine"] is None, entry


def test_one_sync_of_a_file_at_a_time_across_processes(world):
    """Another process holds the file's sync lock (a second copy of the application, a shell's sparksync sync): a
    sync waits for it, then says who it waited for; once the holder ends, the sync runs."""
    from sparksync.errors import DeviceBusy
    from sparksync.web.device.sync import DeviceOptions, sync

    holder = subprocess.Popen([sys.executable, "-c", "import sys\nfrom sparksync.web.device.lock import sync_lock\n"
                               f"with sync_lock({'sqlite:///' + str(world.file)!r}, 5):\n"
                               "    print('held', flush=True)\n    sys.stdin.read()\n"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        options = DeviceOptions(world.url, "Till", f"sqlite:///{world.file}", world.token, lock_wait=0.5)
        with pytest.raises(DeviceBusy) as e:
            sync(options)
        assert str(world.file) in e.value.message
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert sync(options).ok


def test_keeping_theirs_leaves_the_winner_and_empties_the_inbox(world):
    world.local("UPDATE Product SET price = 333.0 WHERE id = 5")
    world.at_publisher('UPDATE "Product" SET "price" = 444.0 WHERE "id" = 5')
    assert world.device(world.url).sync().ok
    [lost] = [e for e in world.outbox() if e["state"] == "lost" and e["key"] == {"id": 5}]
    p = world.cli("conflicts", "--keep", "theirs", str(lost["change_id"]))     # a process of its own: a new connection
    assert p.returncode == 0, p.stderr
    assert json.loads(world.cli("conflicts", "--json").stdout) == []
    assert world.device(world.url).sync().ok
    assert world.row(5)[1] == 444.0
    with sqlite3.connect(world.file) as db:
        assert db.execute("SELECT price FROM Product WHERE id = 5").fetchone() == (444.0,)


def test_a_failed_change_sent_again_after_a_schema_change_is_tried_again_not_refused(world):
    """Found by the randomized lifecycle test: a device's failed change is sent again at every sync, in an upload
    of no generation ((G, G]); once a column was added, the row it sends holds it too, and the door refused the
    same range with another body (409) at every sync from then on. Now such an upload is a new one each time: the
    change fails again, counted, and applies once corrected."""
    world.local("UPDATE Product SET qty = -5 WHERE id = 6")          # the publisher's CHECK refuses it
    for _ in range(2):                                               # sent, then sent again alone: (G, G]
        assert world.device(world.url).sync().ok
    world.hq.schema_change("Shop", "Product", add_column="memo text")
    world.hq.snapshot()
    summary = world.device(world.url).sync()                         # replays the column, sends the row with it
    assert summary.ok, summary
    [failed] = [e for e in world.outbox() if e["key"] == {"id": 6} and e["state"] != "applied"]
    assert failed["state"] == "failed" and failed["tries"] == 3, failed
    world.local("UPDATE Product SET qty = 6, memo = 'counted' WHERE id = 6")
    assert world.device(world.url).sync().ok
    with connect(world.pub) as r:
        assert r.query_one('SELECT "qty", "memo" FROM "Product" WHERE "id" = 6') == (6, "counted")
