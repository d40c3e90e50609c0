"""SQL run as another application would: through the databases' own command-line clients (sqlite3,
psql), outside sparksync."""

from __future__ import annotations

import shutil
import subprocess

from sparksync.dialects import connect


def shell(url: str, script: str) -> None:
    """Run ``script`` at ``url`` through sqlite3 or psql (stopping at the first error). An application waits for
    SQLite's write lock rather than failing at once: the shell gets a busy timeout (the server's background work,
    rounds run ahead of the devices, may hold the lock for a moment); what it says on a failure is in the error."""
    if url.startswith("sqlite"):
        done = subprocess.run(["sqlite3", "-bail", "-cmd", ".timeout 30000", url.removeprefix("sqlite:///")],
                              input=script, text=True, capture_output=True)
        if done.returncode:
            raise AssertionError(f"sqlite3 failed ({done.returncode}): {done.stderr.strip()}")
    else:
        subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-q"], input=script, text=True, check=True,
                       capture_output=True)


def client_exec(url: str, sql: str, via_client: bool) -> None:
    """Run ``sql`` at ``url``: through the sqlite3 shell or psql when ``via_client`` (and it is installed),
    as another application would, else through sparksync's own connection."""
    if via_client and shutil.which("sqlite3" if url.startswith("sqlite") else "psql"):
        shell(url, sql + ";\n")
    else:
        with connect(url) as r:
            r.execute(sql)


def existing_ids(url: str, table: str) -> list[int]:
    with connect(url) as r:
        return [i for (i,) in r.query(f'SELECT "id" FROM "{table}" ORDER BY "id"')]
