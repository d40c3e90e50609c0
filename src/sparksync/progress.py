"""Progress reporting for long work. The library calls a Reporter; the CLI draws it with rich."""

from __future__ import annotations

import time
from typing import Protocol


class Reporter(Protocol):
    def __call__(self, message: str) -> None: ...


def silent(message: str) -> None:
    return None


class Timer:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start
