"""The demo's topology, built once per test process for the service's tests (its SQLite files, set up and
merged, a device synced): what an operator has after `make demo` and runs `sparksync serve` on."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from sparksync.demo.scenario import run_demo
from sparksync.progress import silent


@pytest.fixture(scope="session")
def service_demo(spark, tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("service") / "demo"
    out = io.StringIO()
    result = run_demo(directory, Console(file=out, width=200), silent)
    assert result.ok, out.getvalue()[-3000:]
    return directory
