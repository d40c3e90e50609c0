"""sparksync's Python API: what the commands do, as typed functions an application calls (the CLI parses, calls
one of these, and prints). docs/python-api.md shows it with examples the test suite runs.

- The publisher's side (``publisher.py``): ``load`` a topology (a file, or the configuration as Python objects), then
  ``setup``, ``snapshot``, ``merge``, ``status``, ``history``, ``partitions``, ``conflicts`` / ``failed_changes`` /
  ``resolve_conflict``, ``validate`` / ``repair``, ``reinit``, ``cleanup``, ``schema_change``, ``logreader``,
  ``distribute``, ``tracer_token`` / ``tracer_tokens``, ``token`` / ``revoke_token``, and ``serve`` (the service,
  until SIGTERM) or ``serving`` (the device endpoint in a thread); each returns what ``--json`` prints (a typed
  summary, or the document). A function that runs Spark jobs takes ``spark`` (a SparkSession) or makes one from
  the topology's ``[spark]`` when it first needs one (never before: a small merge runs in this process).
  ``Publisher`` is the same as one object.
- A fleet (``fleet.py``): ``enroll_token`` / ``enroll_tokens`` / ``revoke_enroll_token`` (a device group's
  enrollment secrets), ``devices`` / ``revoke_device`` / ``remove_device`` (the devices enrolled into groups),
  ``forget_strays`` (a web subscription's refused files, once dealt with).
- The device's side (``device.py``): ``Device``, a device database bound to its server and subscription (or
  enrolled into a device group: ``enroll``): ``sync()`` returns the sync's summary; ``start()`` / ``stop()`` sync it
  in the background of an application, every ``interval`` seconds, with backoff after a failure and a callback per
  finished sync.

The functions raise the typed errors of ``sparksync.errors``; they never print, exit or read the environment
(a token is given, not read from ``SPARKSYNC_TOKEN``); progress goes to ``progress``, a callback of one line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparksync.api.common import Progress, load
    from sparksync.api.device import Device, KeySource, database_url, key_from_env, key_from_file
    from sparksync.api.fleet import (
        device_page,
        devices,
        enroll_token,
        enroll_tokens,
        forget_strays,
        remove_device,
        revoke_device,
        revoke_enroll_token,
    )
    from sparksync.api.publisher import (
        Publisher,
        cleanup,
        cluster_pack,
        conflicts,
        distribute,
        failed_changes,
        history,
        logreader,
        merge,
        partitions,
        reinit,
        repair,
        resolve_conflict,
        revoke_token,
        schema_change,
        serve,
        serving,
        setup,
        snapshot,
        status,
        token,
        tracer_token,
        tracer_tokens,
        validate,
    )

# each name's module: loaded on the name's first use, so that a command (a device's sync) imports its own stage
# and not every other
_HOMES = {name: f"sparksync.api.{module}" for module, names in (
    ("common", "Progress load"),
    ("device", "Device KeySource database_url key_from_env key_from_file"),
    ("fleet", "device_page devices enroll_token enroll_tokens forget_strays remove_device revoke_device "
              "revoke_enroll_token"),
    ("publisher", "Publisher cleanup cluster_pack conflicts distribute failed_changes history logreader merge "
                  "partitions reinit repair resolve_conflict revoke_token schema_change serve serving setup "
                  "snapshot status token tracer_token tracer_tokens validate"),
) for name in names.split()}

__all__ = ["Device", "KeySource", "Progress", "Publisher", "cleanup", "cluster_pack", "conflicts", "database_url",
           "device_page", "devices", "distribute", "enroll_token", "enroll_tokens", "failed_changes", "forget_strays",
           "history", "key_from_env", "key_from_file", "load", "logreader", "merge", "partitions", "reinit",
           "remove_device", "repair", "resolve_conflict", "revoke_device", "revoke_enroll_token", "revoke_token",
           "schema_change", "serve", "serving", "setup", "snapshot", "status", "token", "tracer_token", "tracer_tokens",
           "validate"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sparksync.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value            # found here from now on
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
