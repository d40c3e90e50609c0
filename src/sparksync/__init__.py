"""sparksync: merge and transactional replication for SQLite and PostgreSQL, on Apache Spark.

The Python API (``sparksync.api``, docs/python-api.md) is here by name: ``sparksync.load(path)`` gives a
``Topology``, ``sparksync.Publisher(topology)`` does what the commands do (``setup()``, ``merge()``,
``status()`` ...), ``sparksync.Device(...)`` is a device's database and its ``sync()``. The names load on first
use, so that importing one module of the package (a Spark worker, a device) does not import them all.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["Device", "Publisher", "SparksyncError", "Topology", "load"]

_HOMES = {"Topology": "sparksync.config", "SparksyncError": "sparksync.errors"}     # the rest: sparksync.api


def __getattr__(name: str) -> Any:
    """A name of the API, loaded on its first use (by name: the package itself imports none of its modules, so a
    module of it imported alone, in a Spark worker or on a device, loads only what it needs)."""
    if name in __all__:
        return getattr(importlib.import_module(_HOMES.get(name, "sparksync.api")), name)
    raise AttributeError(f"module 'sparksync' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
