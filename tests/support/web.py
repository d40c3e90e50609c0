"""Web synchronization as it runs for real: ``sparksync serve`` in a process of its own, ``sparksync sync`` as its
command runs it (``cli``), devices' SQLite files written through the sqlite3 shell, a publisher set up with ``setup``."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import httpx

from sparksync.dialects import connect
from sparksync.provision import setup
from sparksync.topology import load_config
from sparksync.web import tokens

from .config import write_config

EXE = str(Path(sys.executable).with_name("sparksync"))


def _environ() -> dict[str, str]:
    """This process's environment without the tests' failpoints file (a test arms a process's own)."""
    return {k: v for k, v in os.environ.items() if k != "SPARKSYNC_FAILPOINTS"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``sparksync serve -c CFG`` in a process of its own; ``start`` returns once ``/healthz`` answers."""

    def __init__(self, config: Path, port: int, log: Path, env: dict | None = None):
        self.config, self.port, self.log = config, port, log
        self.env = env
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> Server:
        env = _environ() | (self.env or {})
        with open(self.log, "ab") as log:         # the child keeps its own descriptor
            self.proc = subprocess.Popen([EXE, "serve", "-c", str(self.config)], stdout=log, stderr=subprocess.STDOUT,
                                         env=env)
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as c:
            while True:
                if self.proc.poll() is not None:
                    raise AssertionError(f"serve exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
                try:
                    if c.get(f"{self.url}/healthz").status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"serve did not answer /healthz in {timeout}s: {self.log.read_text()[-2000:]}")
                time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


class WebWorld:
    """A configuration with web subscriptions, set up; tokens made; a server to start."""

    def __init__(self, folder: Path, data: dict, spark):
        self.folder = folder
        self.port = free_port()
        data = {**data, "server": {"listen": f"127.0.0.1:{self.port}", "monitor": f"127.0.0.1:{free_port()}",
                                   **data.get("server", {})}}
        self.data = data
        self.config = write_config(folder, data)
        self.topology = load_config(self.config)
        setup(self.topology, lambda: spark)
        self.tokens: dict[str, str] = {}
        with connect(self.topology.publisher_url) as pub:
            for s in self.topology.subscriptions:
                if s.transport == "web":
                    self.tokens[s.name] = tokens.create(pub, s.name)
        self.server = Server(self.config, self.port, folder / "serve.log")

    @property
    def pub_url(self) -> str:
        return self.topology.publisher_url

    def device(self, name: str) -> Path:
        return self.folder / f"{name.lower()}.db"

    def device_url(self, name: str) -> str:
        return f"sqlite:///{self.device(name)}"

    def sync(self, name: str, *args: str, token: str | None = None, env: dict | None = None,
             database: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """``sparksync sync`` for device ``name`` (its own token unless ``token``): the command's own code, its
        output and exit code as a process's (``cli``); in a process of its own where the test arms failpoints
        (``env``: a kill must not end the tests) or runs syncs at once from threads."""
        secret = self.tokens.get(name, "") if token is None else token
        argv = ["sync", "--server", self.server.url, "--subscription", name, "--database",
                str(database or self.device(name)), *args]
        if env is None and threading.current_thread() is threading.main_thread():
            return cli(argv, {"SPARKSYNC_TOKEN": secret})
        full = _environ() | {"SPARKSYNC_TOKEN": secret} | (env or {})
        return subprocess.run([EXE, *argv], capture_output=True, text=True, env=full, timeout=timeout)


def cli(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``sparksync <argv>`` run in this process (the command's own code and error handling, ``typer``'s runner):
    what a process of it would print and exit with, without a process's start (most of a short command's cost).
    An exception the command let out is in ``stderr`` as its traceback, as a process would print it.
    SPARKSYNC_TEST_PROCESSES=1 runs it as a process instead."""
    if os.environ.get("SPARKSYNC_TEST_PROCESSES"):
        return subprocess.run([EXE, *argv], capture_output=True, text=True, env=_environ() | (env or {}), timeout=600)
    from typer.testing import CliRunner

    from sparksync.cli.app import app

    result = CliRunner().invoke(app, argv, env={"SPARKSYNC_FAILPOINTS": None, **(env or {})}, catch_exceptions=True)
    err = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess([EXE, *argv], result.exit_code, result.stdout, err)


@contextlib.contextmanager
def serving(w: WebWorld) -> Iterator[WebWorld]:
    """``w``'s server started; stopped at the end, its log checked: no traceback, no token's secret."""
    w.server.start()
    try:
        yield w
    finally:
        w.server.stop()
        log = w.server.log.read_text(encoding="utf-8", errors="replace")
        assert "Traceback" not in log, log[-3000:]
        assert not any(t.split("_")[-1] in log for t in w.tokens.values()), "a token appears in the server's log"


def file_headers(world: WebWorld, name: str) -> dict[str, str]:
    """What device ``name``'s file says of itself with each request of a sync (its identity and current epoch):
    a test's request made by hand comes from the file that holds the subscription."""
    from sparksync.metadata import store

    path = world.device(name)
    if not path.exists():
        return {}
    with connect(world.device_url(name)) as dev:
        if store.table_set_version(dev, store.WEB) is None:
            return {}
        rows = store.select_rows(dev, "MSweb_file", {"id": 1})
    if not rows:
        return {}
    out = {"Sparksync-File": str(rows[0]["file_id"])}
    if rows[0]["epoch"]:
        out["Sparksync-Epoch"] = str(rows[0]["epoch"])
    return out


def upload_body(world: WebWorld, name: str, metadata: dict | None = None) -> tuple[int, int, bytes]:
    """What device ``name``'s next upload sends, made as its sync makes it: its open generation closed, the
    changes of its closed generations after the publisher's watermark of it, as the wire format (with the frame's
    ``metadata``)."""
    from sparksync.merge.session.enumeration import change_reads
    from sparksync.merge.session.in_driver import read_changes
    from sparksync.merge.session.remote.frames import write_changes
    from sparksync.merge.session.remote.subscriber import DEVICE_LEVEL
    from sparksync.merge.tracking.articles import published_articles
    from sparksync.merge.tracking.generations import enumeration_bound, make_generation
    from sparksync.metadata import store

    url = world.device_url(name)
    with connect(world.pub_url) as pub:
        reg = store.select_rows(pub, "sysmergesubscriptions", {"name": name})[0]
    with connect(url) as dev:
        nick = store.replica_identity(dev).nickname
        make_generation(dev, nick, level=DEVICE_LEVEL)
        lo, hi = int(reg["recgen"]), enumeration_bound(dev)
        pubid = reg["pubid"]
        reads = change_reads(url, name, dev, published_articles(dev, str(pubid)), name, nick, lo, hi)
    return lo, hi, write_changes(read_changes(reads), metadata)


def wire_frames(body: bytes) -> list[bytes]:
    """A download's frames as they crossed the wire."""
    from sparksync.merge.session.remote.frames import HEADER, MAGIC

    out, at = [], 0
    while at < len(body):
        assert body[at:at + len(MAGIC)] == MAGIC
        _, packed = HEADER.unpack(body[at + len(MAGIC):at + len(MAGIC) + HEADER.size])
        end = at + len(MAGIC) + HEADER.size + packed
        out.append(body[at:end])
        at = end
    return out


def create_drops(url: str, rows: int = 40) -> None:
    """The route worlds' ``Drop`` table at the publisher ``url``: ``rows`` drops by HQ, odd ids east, even west."""
    with connect(url) as r:
        r.execute('CREATE TABLE "Drop" ("id" INTEGER PRIMARY KEY, "zone" TEXT NOT NULL, "who" TEXT, "n" INTEGER)')
        r.executemany('INSERT INTO "Drop" VALUES (?, ?, ?, ?)',
                      [(i, "east" if i % 2 else "west", "hq", 0) for i in range(1, rows + 1)])


def drop_rows(url: str) -> dict[int, tuple]:
    """The ``Drop`` table of the route worlds (tests/web/test_web_faults.py, test_two_doors.py): id -> (zone, who, n)."""
    with connect(url) as r:
        return {i: (z, who, n) for i, z, who, n in r.query('SELECT "id", "zone", "who", "n" FROM "Drop" ORDER BY "id"')}


def sync_all(w: WebWorld, names) -> None:
    for name in names:
        p = w.sync(name)
        assert p.returncode == 0, f"{name}: {p.stderr}"


def assert_zones_converged(w: WebWorld, devices: dict[str, str], expected: dict[int, tuple], order: list[str]) -> None:
    """The devices synced in ``order``, then: the publisher holds every write (``expected``), each device exactly its
    zone's rows, and no write was applied twice or lost a conflict."""
    from sparksync.metadata import store

    sync_all(w, order)
    assert drop_rows(w.pub_url) == expected
    for name, zone in devices.items():
        assert drop_rows(w.device_url(name)) == {k: v for k, v in expected.items() if v[0] == zone}, name
    with connect(w.pub_url) as pub:
        assert not store.select_rows(pub, "MSmerge_conflicts_info"), "a write was applied twice or lost a conflict"
        assert not store.select_rows(pub, "MSmerge_failed_changes")
