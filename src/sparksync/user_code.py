"""An application's own code named in the configuration (``package.module:name``): a resolver, a business logic
handler. Imported from the configuration file's folder (put first on the module path, in the driver and in Spark's
workers alike) or from the installed packages; never from the current directory by accident."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from sparksync.errors import ConfigurationError


def import_named(path: str, search: str | None, what: str) -> Any:
    """The object ``path`` (``package.module:name``, or ``package.module.name``) names; ConfigurationError naming
    ``what`` (e.g. "resolver") and ``path`` when it cannot be imported."""
    module, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    if search and search not in sys.path:
        sys.path.insert(0, search)
    try:
        return getattr(importlib.import_module(module), attr)
    except Exception as e:  # noqa: BLE001 - ImportError, AttributeError, or the module's own failure
        raise ConfigurationError(f"{what} {path!r} cannot be imported: {type(e).__name__}: {e}", obj=path) from None
