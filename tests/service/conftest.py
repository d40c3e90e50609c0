"""The demo's topology for the service's tests: what an operator has after `make demo` and runs `sparksync serve`
on (its SQLite files, set up and merged, a device synced). It is built once for the whole run (the first test
process to need it builds it, under a file lock the others wait on) and each test module gets a copy of its
own, so a module's service and its changes never meet another's."""

from __future__ import annotations

import fcntl
import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from sparksync.cli.demo_scenario import run_demo
from sparksync.progress import silent


@pytest.fixture(scope="session")
def built_demo(request, tmp_path_factory, worker_id) -> Path:
    root = tmp_path_factory.getbasetemp()
    root = root.parent if worker_id != "master" else root      # shared by the test processes of this run
    built = root / "service-demo"
    with open(root / "service-demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (built / "built").exists():
            request.getfixturevalue("spark")                   # the demo's setup runs Spark jobs
            shutil.rmtree(built, ignore_errors=True)
            out = io.StringIO()
            result = run_demo(built / "demo", Console(file=out, width=200), silent)
            assert result.ok, out.getvalue()[-3000:]
            (built / "built").touch()
    return built / "demo"


@pytest.fixture(scope="module")
def service_demo(built_demo, tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("service") / "demo"
    shutil.copytree(built_demo, copy)
    return copy
