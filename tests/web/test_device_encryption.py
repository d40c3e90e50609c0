"""A device file encrypted at rest (SQLCipher) beside a plain one, in one publication: ``sparksync serve`` and
``sparksync sync`` as processes of their own, each device with a temporary folder of its own (``TMPDIR``) so that
what a sync leaves there can be read back. The values the publisher's rows hold are random: found in a file's
bytes, they were written in the clear. The plain device is the control: what the scan finds there proves it would
find it in the encrypted one's folder."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

import sparksync
from sparksync import failpoints
from sparksync.api import key_from_file
from sparksync.dialects import connect
from tests.support.web import EXE, WebWorld

pytestmark = pytest.mark.spark

PASSPHRASE = "correct horse battery staple"
SECRETS = [uuid.uuid4().hex for _ in range(12)]          # one per row: the product's name


def _leaks(*folders: Path) -> dict[str, list[str]]:
    """Each file under ``folders`` whose bytes hold one of the rows' values, with the values found."""
    found: dict[str, list[str]] = {}
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                hits = [s for s in SECRETS if s.encode() in data]
                if hits:
                    found[str(path)] = hits
    return found


class World(WebWorld):
    def __init__(self, folder: Path, spark):
        with connect(f"sqlite:///{folder / 'hq.db'}") as r:
            r.execute('CREATE TABLE "Product" ("id" integer PRIMARY KEY, "name" varchar(40) NOT NULL, "qty" integer)')
            r.executemany('INSERT INTO "Product" VALUES (?, ?, ?)', [(i, s, i) for i, s in enumerate(SECRETS, 1)])
        super().__init__(folder, {
            "publisher": {"name": "HQ", "database": f"sqlite:///{folder / 'hq.db'}"},
            "publications": [{"name": "Shop", "articles": [{"table": "Product"}]}],
            "subscriptions": [{"name": n, "publication": "Shop", "transport": "web"} for n in ("Till", "Kiosk")],
            "device_groups": [{"name": "Pads", "publication": "Shop"}]},
            spark)
        self.key_file = folder / "till.key"
        self.key_file.write_text(PASSPHRASE + "\n")
        self.key_file.chmod(0o600)
        for name in ("Till", "Kiosk"):
            self.home(name).mkdir()
            self.tmp(name).mkdir()

    def home(self, name: str) -> Path:
        return self.folder / name.lower()

    def tmp(self, name: str) -> Path:
        return self.folder / f"{name.lower()}-tmp"

    def device(self, name: str) -> Path:
        return self.home(name) / "device.db"

    def sync_device(self, name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        key = ("--key-file", str(self.key_file)) if name == "Till" else ()
        return self.sync(name, *key, *args, env={"TMPDIR": str(self.tmp(name))} | (env or {}))

    def cli(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        p = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=60, env=os.environ | (env or {}))
        assert "Traceback" not in p.stdout + p.stderr, p.stderr
        return p


@pytest.fixture(scope="module")
def world(spark, tmp_path_factory):
    w = World(tmp_path_factory.mktemp("encrypted"), spark)
    w.server.start()
    try:
        yield w
    finally:
        w.server.stop()


def test_a_killed_first_sync_leaves_nothing_in_the_clear_where_a_plain_device_leaves_the_snapshot(world, tmp_path):
    for name in ("Till", "Kiosk"):
        points = tmp_path / f"{name}.failpoints"
        failpoints.arm(str(points), "device.snapshot_downloaded !kill")   # every file downloaded, none loaded
        p = world.sync_device(name, env={"SPARKSYNC_FAILPOINTS": str(points)})
        assert p.returncode == -9, p.stderr
    assert _leaks(world.home("Kiosk"), world.tmp("Kiosk")), "the control: a plain device's download is in the clear"
    assert _leaks(world.home("Till"), world.tmp("Till")) == {}
    assert list(world.tmp("Till").rglob("*.parquet")) == [], "a snapshot file was written in the clear"


def test_an_encrypted_and_a_plain_device_sync_side_by_side(world):
    for name in ("Till", "Kiosk"):
        p = world.sync_device(name)
        assert p.returncode == 0, p.stderr
    till = sparksync.Device(str(world.device("Till")), key=key_from_file(world.key_file))
    with till.connect() as db:
        assert db.execute("SELECT count(*) FROM Product").fetchone() == (len(SECRETS),)
        db.execute("UPDATE Product SET qty = 100 WHERE id = 1")
    with sqlite3.connect(world.device("Kiosk")) as db:
        db.execute("UPDATE Product SET qty = 200 WHERE id = 2")
    assert [c.key for c in till.outbox(pending=True)] == [{"id": 1}]
    for name in ("Till", "Kiosk", "Till"):
        assert world.sync_device(name).returncode == 0
    with connect(world.pub_url) as r:
        assert r.query('SELECT "qty" FROM "Product" WHERE "id" IN (1, 2) ORDER BY "id"') == [(100,), (200,)]
    with till.connect() as db:
        assert db.execute("SELECT qty FROM Product WHERE id = 2").fetchone() == (200,)
    shell = subprocess.run(["sqlite3", str(world.device("Till")), "SELECT count(*) FROM Product"],
                           capture_output=True, text=True)
    assert shell.returncode != 0 and "not a database" in shell.stderr
    shell = subprocess.run(["sqlite3", str(world.device("Kiosk")), "SELECT count(*) FROM Product"],
                           capture_output=True, text=True)
    assert shell.stdout.strip() == str(len(SECRETS))


def test_nothing_in_the_clear_after_syncs_and_a_sync_killed_in_its_download(world, tmp_path):
    with connect(world.pub_url) as r:
        r.execute('UPDATE "Product" SET "qty" = "qty" + 1')
    points = tmp_path / "failpoints"
    failpoints.arm(str(points), "device.after_download_batch !kill")       # committed, then killed
    assert world.sync_device("Till", env={"SPARKSYNC_FAILPOINTS": str(points)}).returncode == -9
    assert _leaks(world.home("Till"), world.tmp("Till")) == {}
    assert world.sync_device("Till").returncode == 0
    assert _leaks(world.home("Till"), world.tmp("Till")) == {}
    assert str(world.device("Kiosk")) in _leaks(world.home("Kiosk"))       # the control, again


def test_the_outbox_of_an_encrypted_file_needs_its_key_and_a_wrong_or_missing_one_is_one_message(world):
    database = ("--database", str(world.device("Till")))
    p = world.cli("outbox", "--json", *database, "--key-file", str(world.key_file))
    assert p.returncode == 0 and json.loads(p.stdout) != [], p.stderr
    p = world.cli("outbox", "--json", *database)
    assert p.returncode == 2 and "not a plain SQLite file: an encrypted device file" in p.stderr, p.stderr
    p = world.cli("outbox", *database, "--key-env", "TILL_KEY", env={"TILL_KEY": "not the key"})
    assert p.returncode == 2 and "does not open this encrypted file" in p.stderr and "not the key" not in p.stderr
    p = world.cli("outbox", *database, "--key-env", "NO_SUCH_VARIABLE")
    assert p.returncode == 2 and "NO_SUCH_VARIABLE" in p.stderr
    world.key_file.chmod(0o644)
    try:
        p = world.cli("conflicts", *database, "--key-file", str(world.key_file))
        assert p.returncode == 2 and "can be read by others" in p.stderr
    finally:
        world.key_file.chmod(0o600)
    p = world.sync_device("Kiosk", "--key-env", "TILL_KEY", env={"TILL_KEY": PASSPHRASE})
    assert p.returncode == 2 and "plain SQLite file, not an encrypted one" in p.stderr
    assert PASSPHRASE not in p.stdout + p.stderr


def test_an_enrolled_device_keeps_its_credential_encrypted_with_its_file(world, spark):
    secret, _ = sparksync.api.enroll_token(world.topology, "Pads", uses=2, spark=spark)
    pad, plain = world.folder / "pad.db", world.folder / "plain-pad.db"
    key = key_from_file(world.key_file)
    first = sparksync.Device(str(pad), server=world.server.url, key=key).enroll(secret)      # the Python API
    assert first is not None and first.ok
    sparksync.Device(str(plain), server=world.server.url).enroll(secret)
    with connect(f"sqlite:///{plain}") as d:                          # the control: a plain file holds it readably
        token = d.scalar("SELECT token FROM MSweb_credential")
    assert token.startswith("ssk_") and token.split("_")[-1].encode() in plain.read_bytes()
    assert not any(s.encode() in pad.read_bytes() for s in SECRETS)
    assert b"ssk_" not in pad.read_bytes() and b"MSweb_credential" not in pad.read_bytes()
    # later syncs: the key, the server and the file; no token, no subscription, no secret
    p = world.cli("sync", "--server", world.server.url, "--database", str(pad), "--key-file", str(world.key_file))
    assert p.returncode == 0, p.stderr
    p = world.cli("sync", "--server", world.server.url, "--database", str(pad))
    assert p.returncode == 2 and "key" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
