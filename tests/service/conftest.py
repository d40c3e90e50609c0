"""The demo's topology for the service's tests: what an operator has after `make demo` and runs `sparksync serve`
on (its SQLite files, set up and merged, a device synced). It is built once for the whole run (``built_demo``,
tests/conftest.py) and each test module gets a copy of its own, so a module's service and its changes never meet
another's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def service_demo(built_demo, tmp_path_factory) -> Path:
    code, out, folder = built_demo
    assert code == 0, out[-3000:]
    copy = tmp_path_factory.mktemp("service") / "demo"
    shutil.copytree(folder, copy)
    return copy
