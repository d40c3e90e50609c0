"""The enrolled devices rolled up for the monitor: per device group, and per group and partition, how many are in each
state of the roll-up (syncing, late, offline, failing, diverged, ...), the worst first; never a row per device
(``/api/devices`` and ``sparksync devices`` list them, paged). The page, ``/metrics`` and the alerts read these.

A device is an entry of ``status`` with a ``group`` (``fleet/registry.with_fleet``); its partition is named by the
value that chose it (its ``host_name``, else its ``login``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sparksync.monitor.rollup import ORDER

PARTITIONS_SHOWN = 50          # partitions on the page, worst first
EXAMPLES = 3                   # devices named as examples of a state


def is_device(entry: dict[str, Any]) -> bool:
    """An enrolled device's entry of ``status`` (rolled up per group and partition, not listed one by one)."""
    return bool(entry.get("group"))


def partition_of(entry: dict[str, Any]) -> str:
    host, login = entry.get("host_name"), entry.get("login")
    return str(host if host is not None else login if login is not None else "")


@dataclass
class Tally:
    """How many devices are in each state, with a few of each named (the worst's reason too)."""

    devices: int = 0
    states: dict[str, int] = field(default_factory=dict)
    diverged: int = 0
    pending: int = 0
    failed: int = 0
    lag_s: float = 0.0
    examples: dict[str, list[tuple[str, str]]] = field(default_factory=dict)     # state -> [(device, why)]

    def add(self, entry: dict[str, Any], rolled: dict[str, Any]) -> None:
        state = rolled["state"]
        self.devices += 1
        self.states[state] = self.states.get(state, 0) + 1
        self.diverged += 1 if entry.get("diverged") else 0
        self.pending += int(entry.get("pending_download") or 0)
        self.failed += int(entry.get("failed_upload") or 0)
        self.lag_s = max(self.lag_s, float(entry.get("oldest_pending_download_age") or 0.0))
        named = self.examples.setdefault(state, [])
        if len(named) < EXAMPLES:
            named.append((entry["name"], rolled.get("why") or ""))

    @property
    def worst(self) -> str:
        return min(self.states, key=ORDER.index) if self.states else "idle"

    @property
    def why(self) -> str:
        """The worst state's first example: which device, and why."""
        named = self.examples.get(self.worst) or []
        return f"{named[0][0]}: {named[0][1]}" if named and named[0][1] else (named[0][0] if named else "")

    def share(self, state: str) -> float:
        return self.states.get(state, 0) / self.devices if self.devices else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"devices": self.devices, "states": dict(self.states), "worst": self.worst, "why": self.why,
                "diverged": self.diverged, "pending_download": self.pending, "failed_upload": self.failed,
                "lag_s": round(self.lag_s, 1),
                "examples": {s: [n for n, _ in named] for s, named in self.examples.items()}}


@dataclass
class Fleet:
    """The roll-up of every enrolled device: per group (``groups``) and per group and partition (``partitions``)."""

    groups: dict[str, Tally] = field(default_factory=dict)
    publications: dict[str, str] = field(default_factory=dict)              # group -> publication
    partitions: dict[tuple[str, str], Tally] = field(default_factory=dict)  # (group, partition) -> tally

    @classmethod
    def of(cls, entries: Iterable[dict[str, Any]], rollup: dict[str, dict[str, Any]]) -> Fleet:
        """``entries``: ``status``'s subscriptions; ``rollup``: the roll-up of each by name."""
        out = cls()
        for e in entries:
            if not is_device(e):
                continue
            rolled = rollup[e["name"]]
            group = str(e["group"])
            out.publications[group] = e.get("publication", "")
            out.groups.setdefault(group, Tally()).add(e, rolled)
            out.partitions.setdefault((group, partition_of(e)), Tally()).add(e, rolled)
        return out

    def worst_partitions(self, limit: int | None = PARTITIONS_SHOWN) -> list[tuple[str, str, Tally]]:
        """(group, partition, tally), the worst first: by worst state, then by how many devices are in it."""
        ranked = sorted(self.partitions.items(), key=lambda kv: (ORDER.index(kv[1].worst),
                                                                  -kv[1].states.get(kv[1].worst, 0), kv[0]))
        return [(g, p, t) for (g, p), t in ranked[:limit]]

    def to_dict(self) -> dict[str, Any]:
        return {"groups": {g: {"publication": self.publications.get(g, ""), **t.to_dict()}
                           for g, t in sorted(self.groups.items())},
                "partitions": [{"group": g, "partition": p, **t.to_dict()} for g, p, t in self.worst_partitions(None)]}
