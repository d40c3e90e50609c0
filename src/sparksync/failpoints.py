"""Fault injection for tests: crash the merge agent at a named point, in any process.

Spark runs the apply in Python worker processes, so a test cannot monkeypatch it. Instead, when
``SPARKSYNC_FAILPOINTS`` names a file, :func:`hit` reads it: each line ``name [key]`` arms a failpoint,
and a line fires once (it is removed when it fires): it raises InjectedFault, or, when the line ends
with ``!kill``, kills the process with SIGKILL (as ``kill -9`` would). Unset in production: one
dictionary lookup.
"""

from __future__ import annotations

import fcntl
import os
import signal


class InjectedFault(RuntimeError):
    """Raised where a failpoint fires (a simulated crash)."""


def hit(name: str, key: str = "") -> None:
    path = os.environ.get("SPARKSYNC_FAILPOINTS")
    if not path or not os.path.exists(path):
        return
    with open(path, "r+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        lines = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
        for i, ln in enumerate(lines):
            parts = ln.split()
            kill = parts[-1] == "!kill"          # the process dies on the spot (kill -9), no cleanup
            if kill:
                parts = parts[:-1]
            if parts[0] == name and (len(parts) == 1 or " ".join(parts[1:]) == key):
                del lines[i]
                fh.seek(0)
                fh.truncate()
                fh.write("\n".join(lines) + ("\n" if lines else ""))
                fh.flush()
                if kill:
                    os.kill(os.getpid(), signal.SIGKILL)
                raise InjectedFault(f"failpoint {name} {key}".strip())


def arm(path: str, *points: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        for p in points:
            fh.write(p + "\n")
