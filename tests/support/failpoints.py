"""Failpoints armed by a test (see src/sparksync/failpoints.py): the ``failpoints`` fixture of
tests/conftest.py is one of these over the file named by ``SPARKSYNC_FAILPOINTS``."""

from __future__ import annotations

import glob
import os


class Failpoints:
    """Arm failpoints for one test: ``failpoints("apply.before_commit S1:0")``; a point armed with
    ``!pause`` is awaited with ``failpoints.wait_paused(name, key)`` and let go with ``resume``."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, *points: str) -> None:
        from sparksync import failpoints as fp

        fp.arm(self.path, *points)

    def wait_paused(self, name: str, key: str = "", timeout: float = 120.0) -> None:
        from sparksync import failpoints as fp

        fp.wait_paused(self.path, name, key, timeout)

    def resume(self, name: str, key: str = "") -> None:
        from sparksync import failpoints as fp

        fp.resume(self.path, name, key)

    def clear(self) -> None:
        for f in [self.path, *glob.glob(self.path + ".paused.*")]:
            if os.path.exists(f):
                os.remove(f)
