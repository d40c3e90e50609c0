"""The agents' loop of ``sparksync serve``: a thread per worker (``jobs.py``) that runs its agent when one of
its groups is due, in one Spark session shared by all (started by the first round that needs Spark, kept
warm until the service stops).

A run that finds its publication's agent lock held (a manual ``sparksync merge``, another ``serve``) does
not wait: it is skipped, says who holds the lock, and the worker tries again at the next slot. Every run
the agents make is in their history tables, failed ones with their error (``MSmerge_sessions``,
``MSlogreader_history``, ``MSdistribution_history``); the loop keeps each worker's last run, next run and
a run in flight for the monitor, and the failures that left no row (a publisher that cannot be reached).

A transactional publication's log reader wakes its distribution agent after each batch it stored: a
subscription on the ``continuous`` schedule gets the batch at once, while the log reader reads on, not after
the distribution agent's idle wait (subscriptions on a timed schedule keep their times).

Stopping (SIGTERM): no run starts any more; the runs in flight finish their batch and are waited for up
to a grace period; what is still running after it is cut off with the process: its open transaction rolls
back, and the next start resumes from the watermarks (the agents' exactly-once rules).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparksync import locks
from sparksync.config import Topology
from sparksync.errors import ErrorInfo
from sparksync.locks import DISTRIBUTE, LOGREADER, MERGE, LockBusy
from sparksync.merge.maintenance import validations
from sparksync.merge.session.agent import MergeAgent
from sparksync.merge.session.summary import MergeOptions
from sparksync.metadata.history import iso
from sparksync.progress import Reporter, silent
from sparksync.service.jobs import TRACER, VALIDATE, Worker, workers_of
from sparksync.spark.failures import recover
from sparksync.transactional.delivery.agent import DistributeOptions, DistributionAgent
from sparksync.transactional.distribution.logreader import READ_BATCH, read_publication
from sparksync.transactional.status import tracer
from sparksync.validation.scheduled import validate_on_schedule

BEAT = 1.0          # seconds: the longest a worker sleeps without looking at the clock and the stop flag


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class RunReport:
    """What a worker's agent says during a run: nothing of a run that found nothing to do (a service's log is
    not a line per idle round); all of a run that moved rows or failed, when it ends; and, once a run has
    lasted ``LIVE`` seconds, its lines as they come (the progress of long work)."""

    LIVE = 2.0

    def __init__(self, report: Reporter):
        self.report = report
        self._lines: list[str] = []
        self._t0 = 0.0
        self._live = False

    def begin(self) -> None:
        self._lines, self._t0, self._live = [], time.monotonic(), False

    def __call__(self, message: str) -> None:
        if self._live:
            self.report(message)
            return
        self._lines.append(message)
        if time.monotonic() - self._t0 > self.LIVE:
            self._live = True
            self._flush()

    def end(self, keep: bool) -> None:
        if keep:
            self._flush()
        self._lines, self._live = [], False

    def _flush(self) -> None:
        lines, self._lines = self._lines, []
        for line in lines:
            self.report(line)


@dataclass
class RunRecord:
    """One run of a worker's agent as the loop saw it."""

    start: dt.datetime
    seconds: float
    outcome: str                      # succeeded | failed | skipped (the agent lock was held)
    rows: int = 0
    subscriptions: tuple[str, ...] = ()
    message: str | None = None

    @property
    def found_work(self) -> bool:
        return self.rows > 0

    def to_dict(self) -> dict[str, Any]:
        return {"start": iso(self.start), "seconds": round(self.seconds, 3), "outcome": self.outcome,
                "rows": self.rows, "subscriptions": list(self.subscriptions), "message": self.message}


@dataclass
class WorkerState:
    worker: Worker
    next_due: list[dt.datetime]
    running_since: dt.datetime | None = None
    last: RunRecord | None = None
    runs: int = 0
    failed: int = 0
    skipped: int = 0
    history: list[RunRecord] = field(default_factory=list)     # the last few, newest last
    woken: bool = False                 # new work arrived during the run in flight (``Scheduler.wake``)
    alarm: threading.Event = field(default_factory=threading.Event)    # set: look at the clock now

    def to_dict(self) -> dict[str, Any]:
        w = self.worker
        return {"agent": w.agent, "publication": w.publication, "name": w.name,
                "groups": [{"schedule": g.schedule.text, "subscriptions": list(g.subscriptions),
                            "next_run": iso(t)} for g, t in zip(w.groups, self.next_due)],
                "running_since": iso(self.running_since), "last": self.last.to_dict() if self.last else None,
                "runs": self.runs, "failed": self.failed, "skipped": self.skipped}

    def next_run_of(self, subscription: str | None) -> dt.datetime | None:
        times = [t for g, t in zip(self.worker.groups, self.next_due)
                 if subscription is None or subscription in g.subscriptions]
        return min(times) if times else None


class Scheduler:
    def __init__(self, topology: Topology, spark: Any, report: Reporter = silent, keep: int = 20,
                 leading: Callable[[], bool] = lambda: True, elsewhere: Callable[[], str | None] = lambda: None):
        """``spark``: a function giving the shared SparkSession (``LazySpark.get``), or None (no Spark:
        every round in this process, as ``[spark] driver_round_changes`` allows). ``leading``: whether this
        process runs the agents now (``leader.py``: one ``serve`` of several does); a slot due meanwhile runs
        when it does; ``elsewhere``: which process runs them meanwhile (``Leadership.elsewhere``)."""
        self.topology, self.report, self.keep, self.leading = topology, report, keep, leading
        self.elsewhere = elsewhere
        self._spark = spark
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        now = utcnow()
        self.states = [WorkerState(w, [g.schedule.first_run(now) for g in w.groups]) for w in workers_of(topology)]
        self._agents: dict[str, Any] = {}
        self._says: dict[str, RunReport] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        for st in self.states:
            t = threading.Thread(target=self._loop, args=(st,), name=f"sparksync {st.worker.name}", daemon=True)
            self._threads.append(t)
            t.start()

    def stop(self, grace: float) -> list[str]:
        """Start no run any more; wait up to ``grace`` seconds for the runs in flight. The workers still
        running after it (their names)."""
        self._stop.set()
        for st in self.states:
            st.alarm.set()
        deadline = time.monotonic() + grace
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [st.worker.name for st, t in zip(self.states, self._threads) if t.is_alive()]

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def alive(self) -> bool:
        """The loop is alive: not stopping, and every worker's thread running."""
        return not self._stop.is_set() and all(t.is_alive() for t in self._threads)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [st.to_dict() for st in self.states]

    def running(self) -> set[tuple[str, str | None]]:
        """(publication, subscription) of every run in flight; subscription None: a publication-wide agent."""
        out: set[tuple[str, str | None]] = set()
        with self._lock:
            for st in self.states:
                if st.running_since is not None:
                    subs = st.worker.subscriptions or (None,)
                    out |= {(st.worker.publication, s) for s in subs}
        return out

    def wake(self, agent: str, publication: str) -> None:
        """New work for ``agent`` of ``publication`` (its log reader stored transactions for the distribution
        agent): its continuous groups run now, as a continuous agent does after a run that found work, not after
        their idle wait; groups on a timed schedule keep their times."""
        now = utcnow()
        with self._lock:
            for st in self.states:
                if st.worker.agent != agent or st.worker.publication != publication:
                    continue
                for i, g in enumerate(st.worker.groups):
                    if g.schedule.kind == "continuous":
                        st.next_due[i] = min(st.next_due[i], now)
                st.woken = True          # (a run in flight: its continuous groups run again right after it)
                st.alarm.set()

    # -- one worker -----------------------------------------------------------------------------
    def _pause(self, st: WorkerState, seconds: float) -> None:
        """Until ``seconds`` have passed, the service stops, or the worker is woken."""
        st.alarm.wait(seconds)
        st.alarm.clear()

    def _loop(self, st: WorkerState) -> None:
        groups = st.worker.groups
        while not self._stop.is_set():
            now = utcnow()
            if not self.leading():                 # another serve runs the agents: look again in a beat
                self._pause(st, BEAT)
                continue
            due = [i for i, t in enumerate(st.next_due) if t <= now]
            if not due:
                self._pause(st, min(BEAT, max(0.0, (min(st.next_due) - now).total_seconds())))
                continue
            subs = tuple(s for i in due for s in groups[i].subscriptions)
            with self._lock:
                st.running_since = now
                st.woken = False
            rec = self._run(st.worker, subs, now)
            with self._lock:
                st.running_since = None
                st.last = rec
                st.runs += 1
                st.failed += rec.outcome == "failed"
                st.skipped += rec.outcome == "skipped"
                st.history = [*st.history, rec][-self.keep:]
                for i in due:
                    st.next_due[i] = groups[i].schedule.next_run(now, rec.found_work)
                if st.woken:                 # work arrived while it ran: its continuous groups go on at once
                    for i, g in enumerate(groups):
                        if g.schedule.kind == "continuous":
                            st.next_due[i] = min(st.next_due[i], now)

    def _run(self, w: Worker, subs: tuple[str, ...], start: dt.datetime) -> RunRecord:
        t0 = time.perf_counter()
        rows, message, outcome = 0, None, "succeeded"
        said = self._says.setdefault(w.name, RunReport(self.report))
        said.begin()
        try:
            with locks.waiting(0.0, said):
                rows, message = self._agent_run(w, subs, said)
            if message:
                outcome = "failed"
        except LockBusy as e:
            outcome, message = "skipped", e.message
        except Exception as e:  # noqa: BLE001 - a run's failure is recorded, never the loop's end
            error = recover(e)
            outcome, message = "failed", error.message if error is not None else ErrorInfo.of(e).recorded()
        seconds = time.perf_counter() - t0
        said.end(keep=bool(rows) or outcome == "failed")
        rec = RunRecord(start, seconds, outcome, rows, subs, message)
        if outcome == "skipped":
            self.report(f"{w.name}: {message}; trying again at the next slot")
        elif outcome == "failed":
            self.report(f"{w.name}: run failed after {seconds:.2f}s: {message}")
        elif rows:
            self.report(f"{w.name}: {rows:,} row(s) in {seconds:.2f}s")
        return rec

    def _agent_run(self, w: Worker, subs: tuple[str, ...], said: Reporter) -> tuple[int, str | None]:
        """Run ``w``'s agent once for ``subs``: the rows it moved, and its errors (None: it succeeded)."""
        if w.agent == MERGE:
            agent = self._agents.setdefault(w.name, MergeAgent(self.topology, self._spark, said))
            summary = agent.run(MergeOptions(subscriptions=list(subs)))
            rows = sum(t.inserts + t.updates + t.deletes for s in summary.subscriptions
                       for t in (s.total("upload"), s.total("download")))
            errors = [e for s in summary.subscriptions for e in s.errors]
            return rows, "; ".join(errors) or None
        if w.agent == LOGREADER:
            # read and apply at once: each stored batch wakes the distribution agent (its continuous groups)
            run = read_publication(self.topology, w.publication, READ_BATCH, said,
                                   stored=lambda: self.wake(DISTRIBUTE, w.publication))
            return run.commands, None
        if w.agent == DISTRIBUTE:
            dist = self._agents.setdefault(w.name, DistributionAgent(self.topology, self._spark, said))
            d = dist.run(DistributeOptions(list(subs)))
            errors = [s.message for s in d.subscriptions if not s.ok]
            return sum(s.commands for s in d.subscriptions), "; ".join(errors) or None
        if w.agent == VALIDATE:
            results = validate_on_schedule(self.topology, w.publication, list(subs), said)
            failed = [f"{v.subscription}: {v.message}" for v in results if v.result == validations.FAILED]
            return 0, "; ".join(failed) or None
        assert w.agent == TRACER
        tracer.post(self.topology, w.publication)
        return 0, None
