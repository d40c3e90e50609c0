"""What ``sparksync serve`` runs: each publication's agents with the subscriptions they serve, grouped by
schedule (``agent_schedule`` of the publication, or a subscription's own).

One worker per publication and agent (merge agent, log reader, distribution agent, tracer tokens, and the
validation of a merge publication's direct subscriptions on its ``validate_schedule``): its
groups of subscriptions share the agent lock, so a worker runs the groups that are due together, in one
run of the agent, and never competes with itself for the lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparksync.config import Topology
from sparksync.locks import DISTRIBUTE, LOGREADER, MERGE
from sparksync.schedule import Schedule, parse_schedule

TRACER = "tracer tokens"
VALIDATE = "validation"


@dataclass(frozen=True)
class Group:
    """Subscriptions of one publication run on one schedule (empty for the log reader and tracer tokens)."""

    schedule: Schedule
    subscriptions: tuple[str, ...]


@dataclass(frozen=True)
class Worker:
    agent: str                  # MERGE | LOGREADER | DISTRIBUTE | TRACER | VALIDATE
    publication: str
    groups: tuple[Group, ...]

    @property
    def name(self) -> str:
        return f"{self.agent} {self.publication}"

    @property
    def subscriptions(self) -> tuple[str, ...]:
        return tuple(s for g in self.groups for s in g.subscriptions)


def _grouped(topology: Topology, publication: str) -> tuple[Group, ...]:
    by: dict[str, list[str]] = {}
    for s in topology.subscriptions_of(publication):
        text = topology.schedule_of(s)
        if s.transport == "direct" and text is not None:
            by.setdefault(text, []).append(s.name)
    return tuple(Group(parse_schedule(text), tuple(subs)) for text, subs in by.items())


def workers_of(topology: Topology) -> list[Worker]:
    """Every scheduled agent of the topology. A transactional publication's log reader runs on the
    publication's schedule, or, when only its subscriptions have one, on the first of theirs (what they
    receive must be read first); its tracer tokens every ``[server] tracer_interval_s``."""
    out = []
    for p in topology.publications:
        groups = _grouped(topology, p.name)
        if p.kind == "merge":
            if groups:
                out.append(Worker(MERGE, p.name, groups))
            direct = tuple(s.name for s in topology.subscriptions_of(p.name) if s.transport == "direct")
            if p.validate_schedule is not None and direct:
                out.append(Worker(VALIDATE, p.name, (Group(parse_schedule(p.validate_schedule), direct),)))
            continue
        text = topology.log_reader_schedule(p.name)
        if text is None:
            continue
        out.append(Worker(LOGREADER, p.name, (Group(parse_schedule(text), ()),)))
        if groups:
            out.append(Worker(DISTRIBUTE, p.name, groups))
        if topology.server.tracer_interval_s > 0:
            every = parse_schedule(f"every {topology.server.tracer_interval_s:g}s")
            out.append(Worker(TRACER, p.name, (Group(every, ()),)))
    return out
