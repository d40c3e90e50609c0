"""A device file has an identity of its own (docs/web-sync.md, "Which file holds a subscription"): a second file of a
subscription — a typo'd path, a clone of the till's file, a file restored from a backup — is told apart at its first
request and never changes the standing of the file that holds the subscription; no path reloads a file in place
while it holds changes the publisher has not acknowledged. ``sparksync serve`` and ``sparksync sync`` as processes,
on a SQLite and a PostgreSQL publisher; one topology per dialect, the checks in order on it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from sparksync import api
from sparksync import failpoints as fp
from sparksync.config import AlertsConfig
from sparksync.dialects import connect
from sparksync.errors import OtherFile, ReplayBlocked, SchemaError, SparksyncError
from sparksync.metadata import store
from sparksync.metadata.records import FailedChangeRow
from sparksync.monitor.alerts import Evaluator
from sparksync.monitor.rollup import cadences_of, roll_up
from sparksync.status import gather_status
from sparksync.web.protocol import PROTOCOL
from tests.support.clients import shell
from tests.support.databases import databases
from tests.support.service import wait_until
from tests.support.web import Server, WebWorld, cli, serving

pytestmark = pytest.mark.spark

TILLS = ("Till", "Other")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request, spark, tmp_path_factory):
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"identity-{kind}")
    failpoints = tmp / "failpoints"
    with databases(tmp, lambda: request.getfixturevalue("pg_admin_url")) as dbs:
        pub = dbs.url(kind, "idpub")
        with connect(pub) as r:
            r.execute('CREATE TABLE "Sale" ("id" integer PRIMARY KEY, "till" text NOT NULL, "qty" integer)')
            r.executemany(f'INSERT INTO "Sale" VALUES ({r.p}, {r.p}, {r.p})', [(i, "hq", i) for i in range(1, 11)])
        data = {"publisher": {"name": "HQ", "database": pub, "snapshot_dir": str(tmp / "snap")},
                "publications": [{"name": "Shop", "articles": [{"table": "Sale"}]}],
                "subscriptions": [{"name": n, "publication": "Shop", "transport": "web"} for n in TILLS]}
        w = WebWorld(tmp, data, spark)
        w.failpoints = failpoints
        w.kind, w.spark = kind, spark
        w.server = Server(w.config, w.port, tmp / "serve.log", env={"SPARKSYNC_FAILPOINTS": str(failpoints)})
        with serving(w):
            for n in TILLS:
                _ok(w.sync(n))
            yield w


def _ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, f"exit {p.returncode}: {p.stdout}\n{p.stderr}"
    assert "Traceback" not in p.stderr + p.stdout
    return p


def _refused(p: subprocess.CompletedProcess, *said: str) -> str:
    text = p.stdout + p.stderr
    assert p.returncode != 0 and "Traceback" not in text, text
    assert "does not hold the subscription" in text, text
    for s in said:
        assert s in text, text
    return text


def _sales(url: str) -> dict[int, tuple]:
    with connect(url) as r:
        return {row[0]: tuple(row) for row in r.query('SELECT "id", "till", "qty" FROM "Sale" ORDER BY "id"')}


def _sell(w, path, key: int, till: str = "till") -> None:
    shell(f"sqlite:///{path}", f"INSERT INTO Sale (id, till, qty) VALUES ({key}, '{till}', 1);\n")


def _status(w) -> tuple[int, dict]:
    p = cli(["status", "-c", str(w.config), "--json"])
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)


def _entry(w, name: str) -> dict:
    return next(s for s in _status(w)[1]["subscriptions"] if s["name"] == name)


def _outbox(path) -> dict[int, str]:
    """The sales' fates in a device file's outbox (``sparksync outbox --json``)."""
    p = cli(["outbox", "--database", str(path), "--json"])
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return {int(json.loads(c["key"])["id"]) if isinstance(c["key"], str) else int(c["key"]["id"]): c["state"]
            for c in json.loads(p.stdout)} if p.stdout.strip() else {}


def _move(src, dst) -> None:
    _copy(src, dst)
    for suffix in ("", "-wal", "-shm"):
        (src.parent / (src.name + suffix)).unlink(missing_ok=True)


def _copy(src, dst) -> None:
    for suffix in ("", "-wal", "-shm"):
        if (src.parent / (src.name + suffix)).exists():
            shutil.copyfile(src.parent / (src.name + suffix), dst.parent / (dst.name + suffix))


def _runs(w, name: str) -> list[str]:
    with connect(w.pub_url) as pub:
        return [r["status"] for r in store.select_rows(pub, "MSmerge_sessions", {"subscription": name})]


def test_a_second_file_synced_as_the_till_is_refused_and_the_tills_unsent_sale_arrives(world, tmp_path):
    """Finding 1: a typo'd path (or a second till given the same token) synced as Till, its first sync cut while
    initializing, made the real file's next sync reload it in place: its unsent sale gone. Now the second file is
    refused at its first request, nothing changes at the door, and the real file's sale arrives."""
    w = world
    _sell(w, w.device("Till"), 101)
    runs = len(_runs(w, "Till"))
    typo = tmp_path / "tll.db"
    fp.arm(str(w.failpoints), "device.snapshot_downloaded Till !kill")     # were it to initialize, it would be cut there
    text = _refused(w.sync("Till", database=typo, env={"SPARKSYNC_FAILPOINTS": str(w.failpoints)}),
                    "a new file", "--reinitialize")
    w.failpoints.write_text("")
    assert "tll.db" in text
    assert len(_runs(w, "Till")) == runs, "the refused file's sync was recorded as a run of the subscription"
    entry = _entry(w, "Till")
    assert entry["status"] == "active" and [f["described"] for f in entry["other_files"]] == \
        [f"{__import__('socket').gethostname()}:{typo}"], entry
    assert any("a file that does not hold it tried to sync" in p for p in _status(w)[1]["problems"])
    status, now = gather_status(w.topology), dt.datetime.now(dt.UTC)     # the monitor and the alerts say it too
    rolled = roll_up(status, AlertsConfig(), set(), now, cadences_of(w.topology))
    assert rolled["subscriptions"]["Till"]["state"] == "error" and "refused" in rolled["subscriptions"]["Till"]["why"]
    fired = Evaluator(AlertsConfig()).evaluate(status, rolled, [], now)
    assert any(a.subscription == "Till" and a.name == "error" for a in fired), fired
    p = _ok(w.sync("Till"))
    assert "validation" not in p.stderr or "failed" not in p.stderr
    assert 101 in _sales(w.pub_url)
    assert _outbox(w.device("Till"))[101] == "applied"
    assert not list(w.folder.glob("till.db.replaced-*"))
    # the operator dealt with the second file: forgetting it clears status, the roll-up and the alert
    assert "Till" in {e["name"] for e in _status(w)[1]["subscriptions"] if e.get("other_files")}
    p = cli(["devices", "-c", str(w.config), "--forget-strays", "Till"])
    assert p.returncode == 0 and "tll.db" in p.stderr and "a new file" in p.stderr, p.stderr
    entry = _entry(w, "Till")
    assert "other_files" not in entry and not any("does not hold it" in x for x in _status(w)[1]["problems"]), entry
    status, now = gather_status(w.topology), dt.datetime.now(dt.UTC)
    assert roll_up(status, AlertsConfig(), set(), now, cadences_of(w.topology))["subscriptions"]["Till"]["state"] != "error"
    p = cli(["devices", "-c", str(w.config), "--forget-strays", "Till"])
    assert p.returncode == 0 and "no refused file" in p.stderr, p.stderr
    p = cli(["devices", "-c", str(w.config), "--forget-strays", "Ti'll"])
    assert p.returncode != 0 and "Ti'll" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_cloned_till_is_refused_at_its_first_sync_and_the_original_keeps_syncing(world, tmp_path):
    """Finding 2: two copies of one till's file. The copy that syncs second presents an older epoch: refused by name,
    nothing applied, its sales kept in it (its outbox does not say applied; the refusal and status count them); the
    original keeps its standing."""
    w = world
    clone = tmp_path / "clone.db"
    _copy(w.device("Till"), clone)
    _sell(w, w.device("Till"), 201)
    _sell(w, clone, 202, "clone")
    _sell(w, clone, 204, "clone")
    _ok(w.sync("Till"))
    text = " ".join(_refused(w.sync("Till", database=clone), "a copy", "--recover").split())
    assert "It holds 2 change(s) the publisher has not received; they stay in it." in text, text
    assert [f["unsent"] for f in _entry(w, "Till")["other_files"] if f["described"].endswith(str(clone))] == [2]
    assert 201 in _sales(w.pub_url) and 202 not in _sales(w.pub_url)
    assert _outbox(clone).get(202) != "applied"
    _sell(w, w.device("Till"), 203)
    _ok(w.sync("Till"))
    assert 203 in _sales(w.pub_url) and _entry(w, "Till")["status"] == "active"


def test_two_clones_syncing_at_the_same_moment_one_is_refused_and_nothing_is_skipped(world, tmp_path):
    """Finding 2, at once: both copies sync together with the one token. One is served, the other refused at its
    first request (the door serializes them); neither skips a generation; the refused copy's sale is not at HQ and its
    outbox does not say applied."""
    w = world
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _ok(w.sync("Other"))
    _copy(w.device("Other"), a)
    _copy(w.device("Other"), b)
    _sell(w, a, 301, "a")
    _sell(w, b, 302, "b")
    out: dict[str, subprocess.CompletedProcess] = {}
    go = threading.Barrier(2)

    def run(name, path):
        go.wait()
        out[name] = w.sync("Other", database=path)

    threads = [threading.Thread(target=run, args=(n, p)) for n, p in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    served = [n for n, p in out.items() if p.returncode == 0]
    assert len(served) == 1, {n: p.stderr for n, p in out.items()}
    loser = "b" if served == ["a"] else "a"
    _refused(out[loser])
    sales = _sales(w.pub_url)
    won, lost = (301, 302) if served == ["a"] else (302, 301)
    assert won in sales and lost not in sales
    assert _outbox(a if loser == "a" else b).get(lost) != "applied"
    again = (a if served == ["a"] else b)
    _sell(w, again, 303)
    _ok(w.sync("Other", database=again))
    assert 303 in _sales(w.pub_url)


def test_a_file_restored_from_a_backup_takes_the_subscription_with_recover(world, tmp_path):
    """The way out the refusal names for a restored file whose newer file is gone: ``--recover`` makes it the holder,
    its changes since the copy uploaded; the newer file is refused from then on."""
    w = world
    backup = tmp_path / "till-backup.db"
    _copy(w.device("Till"), backup)
    _sell(w, w.device("Till"), 401)
    _ok(w.sync("Till"))
    newer = tmp_path / "till-newer.db"
    _copy(w.device("Till"), newer)
    _copy(backup, w.device("Till"))
    _sell(w, w.device("Till"), 402)
    _refused(w.sync("Till"), "a copy")
    p = _ok(w.sync("Till", "--recover"))
    assert "takes the subscription over" in p.stdout + p.stderr
    sales = _sales(w.pub_url)
    assert 401 in sales and 402 in sales
    assert set(_sales(w.device_url("Till"))) == set(sales)           # what it lacked came back
    _refused(w.sync("Till", database=newer))
    _sell(w, w.device("Till"), 403)
    _ok(w.sync("Till"))
    assert 403 in _sales(w.pub_url)


def test_a_new_file_takes_the_subscription_over_only_with_reinitialize(world, tmp_path):
    """A device that lost its file starts a new one on purpose (``--reinitialize``, nothing to set aside); the old
    file, if it comes back, is refused by name and changes nothing."""
    w = world
    old = tmp_path / "old-other.db"
    _copy(w.device("Other"), old)
    for f in w.folder.glob("other.db*"):
        f.unlink()
    _refused(w.sync("Other"), "a new file")
    p = _ok(w.sync("Other", "--reinitialize"))
    assert "set aside" not in p.stdout + p.stderr
    assert set(_sales(w.device_url("Other"))) == set(_sales(w.pub_url))
    _sell(w, old, 501)
    _refused(w.sync("Other", database=old), "another file holds")
    assert 501 not in _sales(w.pub_url)
    _ok(w.sync("Other"))


def test_a_file_whose_initialization_the_door_never_heard_end_keeps_what_was_written_to_it(world, tmp_path):
    """Finding 1's mechanism, closed at the device: a file whose initialization committed here while the door was
    never told (a kill), then written to by its application, was loaded again in place. Now it tells the door again
    and its sale arrives; nothing is reloaded or set aside."""
    w = world
    fp.arm(str(w.failpoints), "device.initialized Other !kill")
    p = w.sync("Other", "--reinitialize", env={"SPARKSYNC_FAILPOINTS": str(w.failpoints)})
    w.failpoints.write_text("")
    assert p.returncode == -9, p.stdout
    _sell(w, w.device("Other"), 601)
    aside = set(w.folder.glob("other.db.replaced-*"))
    p = _ok(w.sync("Other"))
    assert "told again" in p.stdout + p.stderr and "set aside" not in p.stdout + p.stderr, p.stdout
    assert 601 in _sales(w.pub_url) and _outbox(w.device("Other"))[601] == "applied"
    assert set(w.folder.glob("other.db.replaced-*")) == aside


def test_a_web_subscription_reinitialized_at_the_publisher_sets_its_file_aside_never_reloads_it(world):
    """Finding 11: ``reinit -s TillS --yes`` dropped a web subscription's registration and then failed ("its database
    is on the device"). Now it registers the subscription anew (``--upload-first`` names the device's way); the
    device's file, holding a sale the publisher never received, is set aside whole at its next sync, said so, a new
    file is initialized, and the new file's outbox names where the old one went."""
    w = world
    _sell(w, w.device("Other"), 701)
    p = cli(["reinit", "-c", str(w.config), "-s", "Other", "--upload-first"])
    assert p.returncode != 0 and "sync --reinitialize --upload-first" in p.stderr and "Traceback" not in p.stderr, \
        p.stderr
    p = cli(["reinit", "-c", str(w.config), "-s", "Other"])
    assert p.returncode != 0 and "--yes" in p.stderr, p.stderr
    _ok(cli(["reinit", "-c", str(w.config), "-s", "Other", "--yes"]))
    assert _entry(w, "Other")["status"] == "waiting for its device's first sync"
    p = _ok(w.sync("Other"))
    aside = [f for f in w.folder.glob("other.db.replaced-*") if not f.name.endswith(("-wal", "-shm"))]
    assert "set aside as" in p.stdout + p.stderr, p.stdout
    assert any(701 in _sales(f"sqlite:///{f}") for f in aside)
    assert 701 not in _sales(w.device_url("Other")) and set(_sales(w.device_url("Other"))) == set(_sales(w.pub_url))
    o = cli(["outbox", "--database", str(w.device("Other"))])
    assert "other.db.replaced-" in o.stdout, o.stdout + o.stderr
    assert _entry(w, "Other")["status"] == "active"


def test_a_request_that_does_not_say_its_file_or_lies_about_it_is_refused(world):
    """A client that lies about itself: no file identity is a 400; another file's identity with the token is refused
    at the first request and changes nothing; a request of the holder's file with a stale epoch too."""
    w = world
    with connect(w.pub_url) as pub:
        holder = store.select_rows(pub, "MSweb_holders", {"subscription": "Till"})[0]
    base = {"Authorization": f"Bearer {w.tokens['Till']}", "Sparksync-Protocol": str(PROTOCOL)}
    with httpx.Client(base_url=w.server.url, timeout=30) as c:
        r = c.get("/v1/sync/hello", headers=base)
        assert r.status_code == 400 and "Sparksync-File" in r.json()["detail"], r.text
        r = c.get("/v1/sync/hello", headers={**base, "Sparksync-File": "not-a-guid"})
        assert r.status_code == 400
        forged = {**base, "Sparksync-File": holder["file_id"], "Sparksync-Epoch": "0" * 8 + "-0000-0000-0000-" + "0" * 12}
        r = c.post("/v1/sync/done", headers=forged, json={"seconds": 1})
        assert r.status_code == 409 and r.json()["title"] == "other_file", r.text
        r = c.get("/v1/sync/hello", headers={**forged, "Sparksync-Bound": "1"})
        assert r.status_code == 409
    with connect(w.pub_url) as pub:
        assert store.select_rows(pub, "MSweb_holders", {"subscription": "Till"})[0] == holder
    _ok(w.sync("Till"))


def test_a_sync_that_failed_before_uploading_is_recorded_as_it_happened(world):
    """Finding 10: a sync that failed before any upload was recorded with "counts not known: serve restarted during
    the sync" (serve never restarted) and the duration of a fraction of it. Now its row says the device's own error,
    and its duration runs from its ``hello``. (Near the end of the module: the till holds a NULL the NOT NULL does not
    admit until its application fills it; the publisher's snapshot is older than the change.)"""
    w = world
    shell(w.device_url("Till"), "INSERT INTO Sale (id, till, qty) VALUES (901, 'till', NULL);\n")
    _ok(cli(["schema-change", "-c", str(w.config), "--publication", "Shop", "--article", "Sale",
                        "--alter-column", "qty NOT NULL"]))
    p = w.sync("Till")
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    with connect(w.pub_url) as pub:
        rows = store.select_rows(pub, "MSmerge_sessions", {"subscription": "Till"})
    last = max(rows, key=lambda r: str(r["end_time"]))
    assert last["status"] == "failed" and last["message"].startswith("the device says:"), last
    assert "restarted" not in last["message"] and last["duration"] > 0, last
    assert "id=901" in p.stderr and "correct those rows" in p.stderr, p.stderr       # what the application must fill


def test_a_way_out_that_failed_halfway_is_a_problem_naming_the_command_that_completes_it(world):
    """Finding 8: a device's ``sync --reinitialize --upload-first`` set its file aside, then its initialization was
    refused (the snapshot is older than the last schema change); status and the monitor said "waiting for its
    device's first sync", nothing red. Now the subscription is stopped, its problem names ``sparksync snapshot``, the
    monitor rolls it up as an error; once the snapshot is made the device's next sync completes the way out."""
    w = world
    _sell(w, w.device("Other"), 951)
    p = w.sync("Other", "--reinitialize", "--upload-first")
    assert p.returncode != 0 and "Traceback" not in p.stderr and "sparksync snapshot" in p.stderr, p.stderr
    assert 951 in _sales(w.pub_url)                                    # uploaded first, then set aside
    code, doc = _status(w)
    entry = next(s for s in doc["subscriptions"] if s["name"] == "Other")
    assert code != 0 and entry["status"] == "stopped", entry
    assert "is not initialized" in entry["problems"][0] and "sparksync snapshot --publication Shop" in \
        entry["problems"][0], entry
    status, now = gather_status(w.topology), dt.datetime.now(dt.UTC)
    rolled = roll_up(status, AlertsConfig(), set(), now, cadences_of(w.topology))["subscriptions"]
    assert rolled["Other"]["state"] == "error", rolled["Other"]
    api.snapshot(w.topology, ["Shop"], spark=w.spark)        # what the problem names (the command's function)
    _ok(w.sync("Other"))
    assert _entry(w, "Other")["status"] == "active" and 951 in _sales(w.device_url("Other"))


# -- randomized: a device file's lifecycle --------------------------------------------------------------------------
class Lifecycle:
    """The randomized lifecycle test's actors: each till's application writing sales to the file that holds its
    subscription, and whoever handles the tills' files: clones, backups restored, wrong paths, reinitializations,
    kill -9s of a sync and of the door, schema changes. What each write became is followed (``written``: sale ->
    the file it was written to)."""

    def __init__(self, w, rng, seed: int):
        self.w, self.rng = w, rng
        self.ids = iter(range((seed + 1) * 10**6, (seed + 2) * 10**6))      # seeds run one after another: apart
        self.written: dict[int, Path] = {}
        self.gone: set[int] = set()              # written to a newer copy the test itself threw away (a restore)
        self.backups: dict[str, list[Path]] = {}
        self.strays: dict[str, list[Path]] = {n: [] for n in TILLS}      # refused copies: named by status
        self.aside: dict[str, list[Path]] = {n: [] for n in TILLS}       # files set aside: named by the new file
        self.notes: list[str] = []                 # the note columns added so far (renamed in place)
        self.renamed: dict[int, str] = {}          # sale -> the column its note was written to before a rename
        self.n = 0

    def device(self, name: str, path: Path | None = None):
        import sparksync

        return sparksync.Device(str(path or self.w.device(name)), self.w.server.url, name, self.w.tokens[name])

    def path(self, what: str) -> Path:
        self.n += 1
        return self.w.folder / f"life-{self.n}-{what}.db"

    def write(self, name: str, path: Path | None = None) -> int:
        i = next(self.ids)
        _sell(self.w, path or self.w.device(name), i, name.lower())
        self.written[i] = path or self.w.device(name)
        return i

    def sync(self, name: str, **kw) -> None:
        """The holder's sync, which must succeed (a file whose rows a schema change does not admit is corrected by
        its application first, as the sync says); then nothing written to it before is left behind."""
        before = [i for i, p in self.written.items() if p == self.w.device(name)]
        try:
            self.device(name).sync(**kw)
        except ReplayBlocked as e:
            shell(self.w.device_url(name), "UPDATE Sale SET qty = 1 WHERE qty > 32767;\n")     # corrected, as told
            assert e.rows, e
            self.device(name).sync()
        self.left_behind(name, before)

    def left_behind(self, name: str, sales: list[int]) -> None:
        at_hq = _sales(self.w.pub_url)
        fates = {int(c.key["id"]): c for c in self.device(name).outbox() if c.key}
        for i in sales:
            assert i in at_hq or (i in fates and fates[i].state in ("refused", "failed", "lost") and fates[i].reason), \
                (i, name, fates.get(i))

    # -- the steps --------------------------------------------------------------------------------------------
    def step_write(self, name: str) -> str:
        self.write(name)
        return "write"

    def step_sync(self, name: str) -> str:
        self.sync(name)
        return "sync"

    def step_clone(self, name: str) -> str:
        """The till's file copied to a second till, each writing. The first of the two to sync holds the subscription
        (the copies are the same file until then); the other is refused by name from then on."""
        holder, clone = self.w.device(name), self.path("clone")
        _copy(holder, clone)
        self.write(name, clone)
        if self.rng.random() < 0.5:
            self.sync(name)
            with pytest.raises(OtherFile):
                self.device(name, clone).sync()
            self.strays[name].append(clone)
            return "clone, refused"
        self.device(name, clone).sync()                 # the clone went first: the till's file is the stray now
        self.write(name)
        original = self.path("original")
        _move(holder, original)
        _move(clone, holder)
        for i, p in list(self.written.items()):
            self.written[i] = original if p == holder else holder if p == clone else p
        with pytest.raises(OtherFile):
            self.device(name, original).sync()
        self.strays[name].append(original)
        return "clone, synced first: the original refused"

    def step_backup(self, name: str) -> str:
        copy = self.path("backup")
        _copy(self.w.device(name), copy)
        self.backups.setdefault(name, []).append(copy)
        return "backup"

    def step_restore(self, name: str) -> str:
        if not self.backups.get(name):
            return "restore: no backup"
        backup = self.backups[name].pop(self.rng.randrange(len(self.backups[name])))
        self.sync(name)                                  # what the newer file holds is at HQ before it is lost
        self.gone |= {i for i, p in self.written.items() if p == self.w.device(name) and i not in _sales(self.w.pub_url)}
        for suffix in ("", "-wal", "-shm"):
            self.w.device(name).with_name(self.w.device(name).name + suffix).unlink(missing_ok=True)
        _copy(backup, self.w.device(name))
        for i, p in list(self.written.items()):           # the backup's own writes live in the restored file now
            if p == backup:
                self.written[i] = self.w.device(name)
        try:
            self.device(name).sync()
            return "restore: recovered at once"
        except OtherFile:
            pass
        try:
            if self.rng.random() < 0.5:
                return self.recover_killed(name)
            self.sync(name, recover=True)
            return "restore: --recover"
        except OtherFile:      # a backup of an earlier file of the subscription: refused; a new file, it set aside
            self.device(name).sync(reinitialize=True)
            self.set_aside(name)
            return "restore of an earlier file: refused, then --reinitialize"

    def recover_killed(self, name: str) -> str:
        """``--recover`` killed once the publisher recovered the file, before the file knows: the next sync
        finishes it (or, had the publisher refused it, the caller's way out follows)."""
        fp.arm(str(self.w.failpoints), f"device.recovered {name} !kill")
        p = self.w.sync(name, "--recover", env={"SPARKSYNC_FAILPOINTS": str(self.w.failpoints)})
        self.w.failpoints.write_text("")
        assert "Traceback" not in p.stderr, p.stderr
        if p.returncode == 0:                  # not recovered at all (nothing to recover): a plain sync
            self.left_behind(name, [i for i, q in self.written.items() if q == self.w.device(name)])
            return "restore: --recover (not killed)"
        try:
            self.sync(name)
        except OtherFile:
            self.sync(name, recover=True)
        return f"restore: --recover killed once recovered (exit {p.returncode}), then synced"

    def set_aside(self, name: str) -> None:
        """The file the till's new file names as the one it replaced: the writes it held are there."""
        replaced = self.device(name).replaced()
        if replaced and Path(replaced) not in self.aside[name]:
            old = Path(replaced)
            self.aside[name].append(old)
            held = set(_sales(f"sqlite:///{old}"))
            for i, p in list(self.written.items()):
                if p == self.w.device(name) and i in held:
                    self.written[i] = old

    def step_wrong_path(self, name: str) -> str:
        typo = self.path("typo")
        with pytest.raises(OtherFile):
            self.device(name, typo).sync()
        self.strays[name].append(typo)
        return "wrong path"

    def step_reinitialize(self, name: str) -> str:
        first = self.rng.random() < 0.5
        if first:
            self.device(name).sync(reinitialize=True, upload_first=True)
        else:
            self.device(name).sync(reinitialize=True)
        self.set_aside(name)
        self.sync(name)
        return f"reinitialize (upload first: {first})"

    def step_kill(self, name: str) -> str:
        point = self.rng.choice(["device.after_upload", "device.after_download_batch", "device.initialized",
                                 "device.snapshot_downloaded"])
        args = () if point.startswith("device.after") else ("--reinitialize", "--upload-first")
        if point == "device.after_download_batch":
            self.step_hq(name)                           # something to download
        self.write(name)
        fp.arm(str(self.w.failpoints), f"{point} {name} !kill")
        p = self.w.sync(name, *args, env={"SPARKSYNC_FAILPOINTS": str(self.w.failpoints)})
        self.w.failpoints.write_text("")
        assert "Traceback" not in p.stderr, p.stderr
        self.set_aside(name)
        self.sync(name)
        self.set_aside(name)
        return f"kill at {point} (exit {p.returncode})"

    def step_door(self, name: str) -> str:
        """The door killed in the till's sync and started again at once: the sync, retrying, meets the new door
        (or fails, if the start outlasts its retries); the next sync brings everything."""
        point = self.rng.choice(["door.after_upload_commit", "door.download"])
        self.write(name)
        if point == "door.download":
            self.step_hq(name)
        fp.arm(str(self.w.failpoints), f"{point} {name} !kill")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            syncing = pool.submit(self.device(name).sync)
            wait_until(lambda: self.w.server.proc.poll() is not None or syncing.done(), "the door killed in the sync")
            self.w.failpoints.write_text("")
            if self.w.server.proc.poll() is None:
                self.w.server.stop()
            self.w.server.start()
            with contextlib.suppress(SparksyncError):
                syncing.result()
        self.sync(name)
        return "door killed after an upload's commit" if point == "door.after_upload_commit" else \
            "door killed in a download"

    def step_schema(self, name: str) -> str:
        roll = self.rng.random()
        if roll < 0.35 or (roll < 0.6 and not self.notes):
            self.notes.append(f"note{next(self.ids)}")
            api.schema_change(self.w.topology, "Shop", "Sale", add_column=f"{self.notes[-1]} text")
            api.snapshot(self.w.topology, ["Shop"], spark=self.w.spark)
            return "schema: a column added"
        if roll < 0.6:
            return self.rename(name)
        shell(self.w.device_url(name), "UPDATE Sale SET qty = 40000 WHERE id = (SELECT max(id) FROM Sale);\n")
        try:
            api.schema_change(self.w.topology, "Shop", "Sale", alter_column="qty smallint")
        except SchemaError:
            return "schema: narrowing refused"
        api.snapshot(self.w.topology, ["Shop"], spark=self.w.spark)        # the operator's duty after a change
        return "schema: qty narrowed"

    def rename(self, name: str) -> str:
        """A note column renamed while the till, offline, writes to it under its old name (where its file has the
        column already): the write arrives under the new name."""
        old, new = self.notes.pop(self.rng.randrange(len(self.notes))), f"note{next(self.ids)}"
        with connect(self.w.device_url(name)) as d:
            has = old in {c[1] for c in d.query("PRAGMA table_info(Sale)")}
        i = self.write(name)
        if has:
            shell(self.w.device_url(name), f"UPDATE Sale SET {old} = 'n{i}' WHERE id = {i};\n")
        api.schema_change(self.w.topology, "Shop", "Sale", rename_column=f"{old} {new}")
        api.snapshot(self.w.topology, ["Shop"], spark=self.w.spark)
        self.notes.append(new)
        self.renamed = {k: new if c == old else c for k, c in self.renamed.items()}
        if has:
            self.renamed[i] = new
        return f"schema: {old} renamed {new}" + (" under a write to it" if has else "")

    def step_hq(self, name: str) -> str:
        shell(self.w.pub_url, f'INSERT INTO "Sale" ("id", "till", "qty") VALUES ({next(self.ids)}, \'hq\', 1);\n')
        return "hq"


@pytest.mark.parametrize("seed", [int(s) for s in os.environ.get("SPARKSYNC_LIFECYCLE_SEEDS", "1,2,3").split(",")])
def test_randomized_device_lifecycles_leave_every_write_at_hq_or_said(world, seed):
    """Tills' files cloned, backed up and restored, synced from wrong paths, reinitialized with and without their
    changes uploaded first, a sync killed at every step of initialization, upload and download, the door killed after an
    upload's commit or in a download, a ``--recover`` killed once recovered, schema changes (a column added, one
    renamed under an offline write to it, a narrowing) while the tills write. After every sync that
    succeeded nothing written before it is left behind; at the end each write is at HQ, or in its file's outbox as
    refused, failed or lost with the reason, or in a file status names (a refused copy) or the new file names (set
    aside); every till that holds its subscription is active and holds what HQ holds, and every refused copy's file is
    named by status (copies of one file share its identity: named once, or holding the subscription again). (Last in
    the module: its schema changes stay. SPARKSYNC_LIFECYCLE_SEEDS / _STEPS choose others, default seeds 1-3, 20 steps.)"""
    w = world
    rng = random.Random(seed * 7919 + (0 if w.kind == "sqlite" else 3))
    life = Lifecycle(w, rng, seed)
    shell(w.device_url("Till"), "UPDATE Sale SET qty = 0 WHERE qty IS NULL;\n")     # what the NOT NULL asked for
    for name in TILLS:
        life.sync(name)
    done = []
    steps = ["write", "write", "sync", "sync", "clone", "backup", "restore", "wrong_path", "reinitialize", "kill",
             "door", "schema", "hq"]
    for _ in range(int(os.environ.get("SPARKSYNC_LIFECYCLE_STEPS", "20"))):
        name, step = rng.choice(TILLS), rng.choice(steps)
        try:
            done.append(f"{name}: {getattr(life, f'step_{step}')(name)}")
        except Exception as e:                            # the steps that led to it, for the seed's reproduction
            raise AssertionError(f"seed {seed}: {step} of {name} failed after {done}") from e
    for _ in range(2):                                    # settled: each till's writes reach the other
        for name in TILLS:
            life.sync(name)
    at_hq = _sales(w.pub_url)
    status = gather_status(w.topology)
    for name in TILLS:            # what only the till holds is a write of its own HQ refused, said in its outbox
        held = set(_sales(w.device_url(name)))
        fates = {int(c.key["id"]): c for c in life.device(name).outbox() if c.key}
        said = {i for i in held - set(at_hq) if i in fates and fates[i].state in ("refused", "failed", "lost")}
        with connect(w.device_url(name)) as d:
            failing = [f.reason for f in store.select(d, FailedChangeRow, {})]
        assert held - said == set(at_hq), (seed, name, failing, {i: at_hq[i] for i in set(at_hq) - held},
                                           sorted(held - set(at_hq) - said), sorted(set(at_hq) - held),
                                           {i: str(life.written.get(i)) for i in held ^ set(at_hq)}, done)
        entry = next(s for s in status["subscriptions"] if s["name"] == name)
        assert entry["status"] == "active", (seed, entry, done)
        named = {f["file_id"] for f in entry.get("other_files", [])}    # copies of one file share its identity
        with connect(w.pub_url) as pub:
            holder = store.select_rows(pub, "MSweb_holders", {"subscription": name})[0]["file_id"]
        for stray in life.strays[name]:
            with connect(f"sqlite:///{stray}") as f:
                ident = store.select_rows(f, "MSweb_file")[0]["file_id"]
            assert ident in named or ident == holder, (seed, stray, named, done)
    for i, column in life.renamed.items():                # a note written under a column's old name, offline
        if i in at_hq and column in life.notes:
            with connect(w.pub_url) as pub:
                assert pub.query(f'SELECT "{column}" FROM "Sale" WHERE "id" = {i}') == [(f"n{i}",)], (seed, i, done)
    for i, path in life.written.items():
        if i in at_hq or i in life.gone:
            continue
        name = next(n for n in TILLS if path in life.strays[n] or path in life.aside[n] or path == w.device(n))
        if path == w.device(name):
            fates = {int(c.key["id"]): c for c in life.device(name).outbox() if c.key}
            assert i in fates and fates[i].state in ("refused", "failed", "lost") and fates[i].reason, \
                (seed, i, fates.get(i), done)
        else:                                             # in a refused copy status names, or a file set aside
            assert i in _sales(f"sqlite:///{path}"), (seed, i, path, done)
