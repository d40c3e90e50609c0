"""A business logic handler at the web door: a device's upload is applied at the publisher by ``serve``, which calls
the article's handler (imported from the configuration's folder) for each row, never the device. SQLite and
PostgreSQL publishers; the device syncs with ``sparksync sync`` in a process of its own."""

from __future__ import annotations

import shutil

import pytest

from sparksync.dialects import connect
from sparksync.metadata import store
from tests.support import handlers
from tests.support.databases import databases
from tests.support.web import Server, WebWorld, file_headers

pytestmark = pytest.mark.spark

HANDLER = "ticket_logic:Tickets"


def _ticket(kind: str) -> str:
    integer = "INTEGER" if kind == "sqlite" else "integer"
    return (f'CREATE TABLE "Ticket" ("id" {integer} PRIMARY KEY, "code" text NOT NULL UNIQUE, "v" text, '
            f'"n" {integer}, "deleted" {integer} NOT NULL DEFAULT 0)')


def _row(url: str, id_: int) -> dict | None:
    with connect(url) as r:
        rows = r.query(f'SELECT "v", "n", "deleted" FROM "Ticket" WHERE "id" = {r.p}', [id_])
    return dict(zip(("v", "n", "deleted"), rows[0])) if rows else None


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def door(request, spark, tmp_path_factory):
    kind = request.param
    folder = tmp_path_factory.mktemp(f"door-handlers-{kind}")
    shutil.copy(handlers.__file__, folder / "ticket_logic.py")       # beside the configuration, as users put it
    with databases(folder, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        pub = dbs.url(kind, "doorpub")
        with connect(pub) as r:
            r.execute(_ticket(kind))
            r.executemany(f'INSERT INTO "Ticket" ("id", "code", "v", "n") VALUES ({r.p}, {r.p}, {r.p}, 10)',
                          [(i, f"C{i}", f"v{i}") for i in range(1, 11)])
        w = WebWorld(folder, {
            "publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(folder / "snap")},
            "publications": [{"name": "Pub", "articles": [{"table": "Ticket", "business_logic": HANDLER,
                                                            "business_logic_timeout_s": 1}]}],
            "subscriptions": [{"name": "Van", "publication": "Pub", "transport": "web"}]}, spark)
        probe = pub.removeprefix("sqlite:///") if kind == "sqlite" else ""
        w.server = Server(w.config, w.port, folder / "serve.log", env={"TICKETS_PROBE_DB": probe})
        w.kind = kind
        w.server.start()
        try:
            first = w.sync("Van")
            assert first.returncode == 0, first.stderr
            with connect(w.device_url("Van")) as d:
                insert = 'INSERT INTO "Ticket" ("id", "code", "v", "n", "deleted") VALUES (?, ?, ?, 1, 0)'
                d.execute(insert, [201, "R", "reject"])
                d.execute(insert, [202, "L", "lower:XYZ"])
                d.execute('DELETE FROM "Ticket" WHERE "id" = 3')
                d.execute('UPDATE "Ticket" SET "n" = -1 WHERE "id" = 4')
            w.syncs = [w.sync("Van"), w.sync("Van")]     # the upload, then what the door made of it
            yield w
        finally:
            w.server.stop()


def test_the_devices_syncs_succeed(door):
    for p in door.syncs:
        assert p.returncode == 0, p.stderr
        assert "Traceback" not in p.stderr


def test_the_door_applies_a_devices_upload_through_the_handler_and_the_device_gets_its_rows_back(door):
    pub, dev = door.pub_url, door.device_url("Van")
    assert _row(pub, 201) is None and _row(dev, 201) is not None       # rejected: the device keeps it
    for url in (pub, dev):
        assert _row(url, 202)["v"] == "lower:xyz", url
        assert _row(url, 3) == {"v": "v3", "n": 10, "deleted": 1}, url   # the device's delete: a soft delete
        assert _row(url, 4)["n"] == 0, url


def test_the_devices_outbox_says_which_changes_a_handler_replaced_and_by_whom(door):
    """Finding 11 of reliability round 5: a delete the handler kept as a soft delete showed ``applied`` in the
    device's outbox. Now a change the publisher's handler answered with a row of its own is ``replaced``, its
    reason naming the handler and its method; the row as sent stays shown; a rejected one is ``failed``."""
    from sparksync import api

    states = {(tuple(sorted((c.key or {}).items())), c.operation): c for c in
              api.Device(door.device_url("Van")).outbox()}
    deleted, lowered, zeroed = states[((("id", 3),), "delete")], states[((("id", 202),), "insert")], \
        states[((("id", 4),), "update")]
    assert deleted.state == "replaced", deleted
    assert deleted.reason == (f"business logic handler {HANDLER}.delete kept the row (a row of its own) instead "
                              "of deleting it"), deleted.reason
    assert lowered.state == zeroed.state == "replaced", (lowered, zeroed)
    assert lowered.reason == f"business logic handler {HANDLER}.insert applied a row of its own instead of this insert"
    assert lowered.mine is not None and lowered.mine["v"] == "lower:XYZ"          # what the device sent
    assert states[((("id", 201),), "insert")].state == "failed"                   # rejected: failed, not replaced


def test_a_device_that_speaks_protocol_3_is_not_told_of_replaced_changes(door):
    """A device of the previous protocol reads the fates it knows: the door leaves ``replaced`` out of the reply
    it gives such a device (the lookup of an earlier upload here), which records those changes as applied."""
    import httpx

    from sparksync.web.protocol import OLDEST_PROTOCOL, PROTOCOL

    with connect(door.device_url("Van")) as d:
        lo, hi = d.query(f"SELECT lo, hi FROM {d.meta('MSdevice_outbox')} WHERE state = 'replaced' LIMIT 1")[0]
    for version, told in ((PROTOCOL, True), (OLDEST_PROTOCOL, False)):
        headers = {"Sparksync-Protocol": str(version), "Authorization": f"Bearer {door.tokens['Van']}",
                   **file_headers(door, "Van")}
        with httpx.Client(base_url=door.server.url, headers=headers, timeout=60) as c:
            r = c.get(f"/v1/sync/uploads/{lo}-{hi}")
        assert r.status_code == 200, r.text
        fates = [c["fate"] for c in r.json()["reply"]["conflicts"]]
        assert ("replaced" in fates) is told, (version, fates)


def test_a_rejected_upload_is_listed_and_what_the_handler_logged_is_in_the_doors_history(door):
    with connect(door.pub_url) as r:
        reasons = [f["reason"] for f in store.select_rows(r, "MSmerge_failed_changes")]
        history = [h["message"] or "" for h in store.select_rows(r, "MSmerge_sessions", {"subscription": "Van"})]
    assert any(f"rejected by business logic handler {HANDLER}: tickets marked reject are not taken" in x
               for x in reasons), reasons
    assert any("refused ticket 201 from Van" in m for m in history), history
    assert "refused ticket" not in "".join(p.stdout + p.stderr for p in door.syncs)     # the door's words, not sent


def test_a_device_cannot_pass_its_delete_off_as_the_agents_compensating_one(door):
    """The agent's compensating deletes are not given to handlers; a device that marks its own delete as one (over
    a real HTTP connection) still has it given to the handler: the door drops the mark."""
    import httpx
    import pyarrow as pa

    from sparksync.merge.session.changes import COMPENSATING_COLV
    from sparksync.merge.session.remote.frames import read_changes, write_changes
    from sparksync.web.protocol import PROTOCOL
    from tests.support.web import upload_body

    with connect(door.device_url("Van")) as d:
        d.execute('DELETE FROM "Ticket" WHERE "id" = 8')
    lo, hi, body = upload_body(door, "Van")
    rows, _ = read_changes(body, "test")
    ops = rows.column("op").to_pylist()
    assert "delete" in ops
    forged = rows.set_column(rows.schema.get_field_index("colv"), "colv", pa.array(
        [COMPENSATING_COLV if op == "delete" else c for op, c in zip(ops, rows.column("colv").to_pylist())],
        rows.schema.field("colv").type))
    headers = {"Sparksync-Protocol": str(PROTOCOL), "Authorization": f"Bearer {door.tokens['Van']}",
               **file_headers(door, "Van")}
    with httpx.Client(base_url=door.server.url, headers=headers, timeout=60) as c:
        r = c.put(f"/v1/sync/uploads/{lo}-{hi}", content=write_changes(forged))
    assert r.status_code == 200, r.text
    assert _row(door.pub_url, 8) == {"v": "v8", "n": 10, "deleted": 1}       # the handler's soft delete
    p = door.sync("Van")
    assert p.returncode == 0, p.stderr
    assert _row(door.device_url("Van"), 8) == {"v": "v8", "n": 10, "deleted": 1}


def test_a_slow_handler_holds_no_lock_and_its_change_fails_once_past_its_bound(door):
    """Finding 7 of reliability round 5: a handler taking 10 s held a SQLite HQ's write lock all along (HQ's own
    application failed with "database is locked", other devices waited). Now a SQLite destination's handler calls
    are made before the write lock is taken: while the slow call runs, the publisher takes a write at once (the
    handler's own probe, and an application's write meanwhile). A call past ``business_logic_timeout_s`` fails its
    change, named, tried again at the next sync (PostgreSQL: the call is not cut, its row locks are its batch's)."""
    import subprocess
    import time

    from tests.support.web import EXE, _environ

    with connect(door.device_url("Van")) as d:
        d.execute('UPDATE "Ticket" SET "v" = \'slow:6\' WHERE "id" = 5')
        d.execute('UPDATE "Ticket" SET "v" = \'fine\' WHERE "id" = 6')
    started = door.folder / "slow.started"
    sync = subprocess.Popen([EXE, "sync", "--server", door.server.url, "--subscription", "Van", "--database",
                             str(door.device("Van"))], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_environ() | {"SPARKSYNC_TOKEN": door.tokens["Van"]})
    deadline = time.monotonic() + 120
    while not started.exists():                       # the slow call has begun
        assert sync.poll() is None and time.monotonic() < deadline, sync.communicate()
        time.sleep(0.05)
    with connect(door.pub_url) as r:                  # HQ's application writes while the handler runs
        r.execute('UPDATE "Ticket" SET "n" = 77 WHERE "id" = 9')
    out, err = sync.communicate(timeout=120)
    assert "Traceback" not in err, err
    if door.kind == "sqlite":
        assert (door.folder / "slow-5").read_text(encoding="utf-8") == "free"
    with connect(door.pub_url) as r:
        reasons = [f["reason"] for f in store.select_rows(r, "MSmerge_failed_changes")]
    assert any("business_logic_timeout_s = 1" in x and f"{HANDLER}.update" in x for x in reasons), reasons
    assert _row(door.pub_url, 5)["v"] == "v5" and _row(door.pub_url, 9)["n"] == 77
    for _ in range(2):                                # sent again: the handler answers at once now
        p = door.sync("Van")
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert _row(door.pub_url, 5)["v"] == "slow:6" and _row(door.pub_url, 6)["v"] == "fine"
