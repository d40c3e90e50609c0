"""``sparksync serve`` as an operator runs it, on the demo's topology: the service in a process of its own
(its agents on schedules, its monitor, the device endpoint), a webhook receiver, and the events a test
awaits (a row arriving, a line in the service's log, an alert at the receiver)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from .config import write_config
from .web import EXE, _environ, free_port


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 60.0, every: float = 0.1) -> Any:
    """Await ``condition()`` becoming truthy (its value), checking every ``every`` seconds; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def service_config(demo: Path, schedule: str = "every 1s", name: str = "service.toml",
                   schedules: dict[str, str] | None = None, **sections: dict) -> Path:
    """The demo's configuration with every publication on ``schedule`` (or its own in ``schedules``, by name), fresh
    ports, and ``sections`` merged in (``server={...}``, ``alerts={...}``), written beside it (its SQLite URLs stay
    relative to the folder)."""
    data = tomllib.loads((demo / "sparksync.toml").read_text())
    for p in data["publications"]:
        p["agent_schedule"] = (schedules or {}).get(p["name"], schedule)
    data["server"] = {**data.get("server", {}), "listen": f"127.0.0.1:{free_port()}",
                      "monitor": f"127.0.0.1:{free_port()}", "tracer_interval_s": 1, **sections.pop("server", {})}
    for k, v in sections.items():
        data[k] = v
    return write_config(demo, data, name)


class Service:
    """``sparksync serve -c CFG`` in its own process; ``start`` returns once the monitor's ``/healthz`` answers."""

    def __init__(self, config: Path, log: Path, env: dict | None = None, own_group: bool = False):
        self.config, self.log, self.env, self.own_group = config, log, env or {}, own_group
        data = tomllib.loads(config.read_text())
        self.monitor = f"http://{data['server']['monitor']}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> Service:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([EXE, "serve", "-c", str(self.config)], stdout=log, stderr=subprocess.STDOUT,
                                         env=_environ() | self.env, start_new_session=self.own_group)
        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode}: {self.text()[-3000:]}")
            try:
                return httpx.get(f"{self.monitor}/healthz", timeout=2.0).status_code == 200
            except httpx.TransportError:
                return False
        wait_until(healthy, "the monitor's /healthz", timeout)
        return self

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def said(self, fragment: str, timeout: float = 60.0) -> str:
        """Await ``fragment`` in the service's log."""
        return wait_until(lambda: fragment in self.text() and self.text(), f"{fragment!r} in {self.log}", timeout)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.get(f"{self.monitor}{path}", timeout=30.0, **kw)

    def jvm(self) -> int:
        """Spark's JVM under the service (a child of its process), awaited."""
        assert self.proc is not None

        def child() -> int | None:
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    fields = stat.read_text().rsplit(")", 1)
                except OSError:
                    continue
                if "(java" in fields[0] and int(fields[1].split()[1]) == self.proc.pid:
                    return int(stat.parent.name)
            return None
        return wait_until(child, "Spark's JVM under the service")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"serve did not stop on SIGTERM: {self.text()[-3000:]}") from None


class Webhook:
    """A local receiver of the alerts' webhook: every JSON body POSTed, in order; the first ``fail_first`` POSTs
    are answered 500 (the sender must try again)."""

    def __init__(self, fail_first: int = 0):
        self.bodies: list[dict] = []
        self.attempts = 0
        self.fail_first = fail_first
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with hook._lock:
                    hook.attempts += 1
                    failing = hook.attempts <= hook.fail_first
                    if not failing:
                        hook.bodies.append(json.loads(body))
                self.send_response(500 if failing else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/sparksync-alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, alert: str, subscription: str | None = None) -> list[dict]:
        with self._lock:
            return [b for b in self.bodies if b["alert"] == alert
                    and (subscription is None or b["subscription"] == subscription)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sql(db: Path, statement: str, params: tuple = ()) -> list[tuple]:
    """One statement on a SQLite file as any application would run it (waits for the agents' write lock)."""
    with sqlite3.connect(db, timeout=30) as c:
        rows = c.execute(statement, params).fetchall()
    c.close()
    return rows


BROKEN = "MSmerge_genhistory_away"


def break_replica(db: Path) -> None:
    """The subscriber's metadata damaged behind sparksync's back: its generation history renamed away."""
    sql(db, f'ALTER TABLE "MSmerge_genhistory" RENAME TO "{BROKEN}"')


def repair_replica(db: Path) -> None:
    sql(db, f'ALTER TABLE "{BROKEN}" RENAME TO "MSmerge_genhistory"')
