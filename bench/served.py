"""``sparksync serve`` as the benchmarks run it: a free port, and the service in a process of its own, awaited on
its ``/healthz`` and stopped with SIGTERM."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

EXE = str(Path(sys.executable).with_name("sparksync"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(config: Path, url: str, timeout: float = 60.0) -> Iterator[subprocess.Popen]:
    """``sparksync serve -c config`` until the block ends, once ``url``'s ``/healthz`` answers. Its output goes to
    ``<config>.log`` beside the configuration, whose end is printed when the block fails."""
    env = {k: v for k, v in os.environ.items() if k != "SPARKSYNC_FAILPOINTS"}
    log_path = config.with_suffix(".log")
    with open(log_path, "ab") as log:
        server = subprocess.Popen([EXE, "serve", "-c", str(config)], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"serve did not answer at {url}")
            time.sleep(0.1)
        yield server
    except BaseException:
        sys.stderr.write(f"--- the end of {log_path}:\n" + "\n".join(log_path.read_text().splitlines()[-40:]) + "\n")
        raise
    finally:
        server.terminate()
        server.wait()
