"""Agent schedules (SQL Server Agent's job schedules): when ``sparksync serve`` runs an agent.

A schedule is ``"continuous"`` (a run right after a run that found work, else after ``CONTINUOUS_IDLE``
seconds: a backlog is worked off without pauses), ``"every 30s"`` / ``"every 5m"`` / ``"every 1h"`` (the
next run that long after the last one started), or a five-field cron expression (``"*/10 * * * *"``,
minute hour day-of-month month day-of-week, in UTC), read by croniter.

``Schedule.latest_run_after`` is what the monitor rates a change against: a change is not late before the
run that will carry it is due. ``parse_interval`` reads a duration (``"90s"``, ``"15m"``, ``"4h"``, ``"1d"``):
how often a web device is expected to sync.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from functools import lru_cache

CONTINUOUS_IDLE = 5.0        # seconds a continuous agent waits after a run that found nothing

_EVERY = re.compile(r"every\s+([0-9]+(?:\.[0-9]+)?)\s*(s|m|h)", re.IGNORECASE)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_INTERVAL = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(s|m|h|d)", re.IGNORECASE)


@dataclass(frozen=True)
class Schedule:
    text: str
    kind: str                    # continuous | every | cron
    seconds: float = 0.0         # every: the interval

    def next_run(self, last_start: dt.datetime, found_work: bool) -> dt.datetime:
        """When the run after one that started at ``last_start`` (and found work or not) is due."""
        if self.kind == "continuous":
            return last_start if found_work else last_start + dt.timedelta(seconds=CONTINUOUS_IDLE)
        if self.kind == "every":
            return last_start + dt.timedelta(seconds=self.seconds)
        from croniter import croniter

        return croniter(self.text, last_start).get_next(dt.datetime)

    def first_run(self, now: dt.datetime) -> dt.datetime:
        """When the first run after the service starts at ``now`` is due: at once, or the cron's next time."""
        if self.kind != "cron":
            return now
        from croniter import croniter

        return croniter(self.text, now).get_next(dt.datetime)

    def latest_run_after(self, t: dt.datetime) -> dt.datetime:
        """The latest a run of this schedule starts after ``t``, by the schedule alone: continuous,
        ``CONTINUOUS_IDLE`` later (an idle continuous agent looks again that often); every N, N later (its runs
        start N apart); cron, the expression's first time after ``t``."""
        if self.kind == "continuous":
            return t + dt.timedelta(seconds=CONTINUOUS_IDLE)
        if self.kind == "every":
            return t + dt.timedelta(seconds=self.seconds)
        from croniter import croniter

        return croniter(self.text, t).get_next(dt.datetime)


@lru_cache(maxsize=256)
def parse_interval(text: str) -> float:
    """A duration in seconds from its text (``"90s"``, ``"15m"``, ``"4h"``, ``"1d"``); ValueError saying the form."""
    m = _INTERVAL.fullmatch(" ".join(str(text).split()))
    seconds = float(m.group(1)) * _UNIT[m.group(2).lower()] if m else 0.0
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a duration above 0: a number and a unit, s, m, h or d (\"90s\", "
                         "\"15m\", \"4h\", \"1d\")")
    return seconds


def parse_schedule(text: str) -> Schedule:
    """A schedule from its text; ValueError saying which forms there are."""
    value = " ".join(str(text).split())
    if value.lower() == "continuous":
        return Schedule(value, "continuous")
    m = _EVERY.fullmatch(value)
    if m:
        seconds = float(m.group(1)) * _UNIT[m.group(2).lower()]
        if seconds <= 0:
            raise ValueError(f"{text!r}: an interval must be more than 0 seconds")
        return Schedule(value, "every", seconds)
    if len(value.split(" ")) == 5:
        from croniter import croniter

        if croniter.is_valid(value):
            return Schedule(value, "cron")
        raise ValueError(f"{text!r} is not a valid cron expression (minute hour day-of-month month day-of-week)")
    raise ValueError(f"{text!r} is not a schedule: use \"continuous\", \"every 30s\" / \"every 5m\" / \"every 1h\", "
                     "or a five-field cron expression such as \"*/10 * * * *\"")
