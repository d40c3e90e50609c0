"""Fault injection for tests: crash, kill or pause an agent at a named point, in any process.

Spark runs the apply in Python worker processes, so a test cannot monkeypatch it. Instead, when
``SPARKSYNC_FAILPOINTS`` names a file, :func:`hit` reads it: each line ``name [key]`` arms a failpoint,
and a line fires once (it is removed when it fires). By its last word it:

- (none): raises InjectedFault (a simulated crash);
- ``!kill``: kills the process with SIGKILL (as ``kill -9`` would), no cleanup;
- ``!pause``: stops there until the test resumes it: the process creates ``<file>.paused.<point>``
  and waits until that file is removed (:func:`wait_paused`, :func:`resume`). A test so holds an agent
  inside a chosen step (a lock held, a transaction open) and acts while it is there: an event to wait
  for, never a sleep.

Unset in production: one dictionary lookup.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import time

PAUSE_LIMIT = 300.0          # seconds a paused point waits for its test before it fails


class InjectedFault(RuntimeError):
    """Raised where a failpoint fires (a simulated crash)."""


def hit(name: str, key: str = "") -> None:
    path = os.environ.get("SPARKSYNC_FAILPOINTS")
    if not path or not os.path.exists(path):
        return
    with open(path, "r+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        lines = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
        action = None
        for i, ln in enumerate(lines):
            parts = ln.split()
            act = parts[-1] if parts[-1] in ("!kill", "!pause") else None
            if act:
                parts = parts[:-1]
            if parts[0] == name and (len(parts) == 1 or " ".join(parts[1:]) == key):
                del lines[i]
                fh.seek(0)
                fh.truncate()
                fh.write("\n".join(lines) + ("\n" if lines else ""))
                fh.flush()
                action = act or "raise"
                break
        if action == "!pause":
            marker = pause_marker(path, name, key)
            with open(marker, "w", encoding="utf-8") as m:
                m.write(f"{os.getpid()}\n")
    if action is None:
        return
    if action == "!kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "!pause":
        deadline = time.monotonic() + PAUSE_LIMIT
        while os.path.exists(marker):
            if time.monotonic() > deadline:
                raise InjectedFault(f"failpoint {name} {key}: paused and never resumed".strip())
            time.sleep(0.01)
        return
    raise InjectedFault(f"failpoint {name} {key}".strip())


def arm(path: str, *points: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        for p in points:
            fh.write(p + "\n")


def pause_marker(path: str, name: str, key: str = "") -> str:
    """The file a paused ``name [key]`` waits on."""
    return f"{path}.paused.{hashlib.sha1(f'{name} {key}'.encode()).hexdigest()[:16]}"


def wait_paused(path: str, name: str, key: str = "", timeout: float = 120.0) -> None:
    """Until the process that hit ``name [key] !pause`` is waiting there."""
    marker = pause_marker(path, name, key)
    deadline = time.monotonic() + timeout
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            raise TimeoutError(f"failpoint {name} {key} was not reached in {timeout:.0f} s".strip())
        time.sleep(0.01)


def resume(path: str, name: str, key: str = "") -> None:
    """Let the process paused at ``name [key]`` go on."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(pause_marker(path, name, key))
