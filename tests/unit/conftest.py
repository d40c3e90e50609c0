"""tests/unit is pure logic: no database server, no JVM. A test here that asks for one fails."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    pytest.fail("tests/unit may not start Spark: move the test to tests/sparkjobs or a feature folder")


@pytest.fixture(scope="session")
def pg_admin_url():
    pytest.fail("tests/unit may not use PostgreSQL: move the test to tests/contract or a feature folder")
