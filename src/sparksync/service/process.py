"""``sparksync serve``: the agents' loop (``scheduler.py``), the operator's monitor (``[server] monitor``) and,
when the topology has web subscriptions, the device endpoint (``[server] listen``), in one process until
SIGTERM or SIGINT. Several ``serve`` processes of one publisher all serve devices (sharing the feed and its
rounds); one of them runs the agents and the alerts (``leader.py``).

Stopping: the listeners close, no agent run starts any more, the runs in flight finish their batch (waited
for up to ``[server] stop_grace_s`` seconds; what still runs then is cut off with the process: its open transaction
rolls back and the next start resumes from the watermarks), Spark stops. A second signal cuts off at once.
kill -9 loses nothing either: every batch is applied with its watermark in one transaction.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from sparksync.config import Topology
from sparksync.monitor.app import check_monitor, make_monitor_app
from sparksync.monitor.watch import Watch
from sparksync.progress import Reporter, silent
from sparksync.redaction import register_secret
from sparksync.service.leader import Leadership
from sparksync.service.scheduler import Scheduler
from sparksync.spark.lazy import JvmEnded, LazySpark
from sparksync.web.listener import Listener
from sparksync.web.server.serve import Endpoint, device_endpoint

OPERATOR_TOKEN_ENV = "SPARKSYNC_OPERATOR_TOKEN"


class Service:
    def __init__(self, topology: Topology, report: Reporter = silent, spark: Callable[[], Any] | None = None,
                 operator_token: str | None = None):
        check_monitor(topology, operator_token)
        if operator_token:
            register_secret(operator_token)
        self.topology, self.report = topology, report
        self.spark = LazySpark(spark)
        self.leadership = Leadership(topology, report)
        self.scheduler = Scheduler(topology, self.spark.get, report, leading=self.leadership.leading,
                                   elsewhere=self.leadership.elsewhere)
        self.watch = Watch(topology, self.scheduler, report, leading=self.leadership.leading)
        self.monitor = Listener(make_monitor_app(topology, self.scheduler, self.watch, operator_token),
                                topology.server.monitor_host, topology.server.monitor_port, "server.monitor")
        self.endpoint: Endpoint | None = None

    def start(self) -> None:
        topo = self.topology
        self.monitor.start("sparksync monitor")
        if any(s.transport == "web" for s in topo.subscriptions) or topo.device_groups:
            self.endpoint = device_endpoint(topo, self.report, self.spark.ready)
            self.endpoint.start("sparksync devices")
        self.leadership.start()
        self.scheduler.start()
        self.watch.start()
        workers = self.scheduler.states
        self.report(f"serve: monitor on http://{topo.server.monitor}; {len(workers)} scheduled agent(s)"
                    + (": " + "; ".join(f"{s.worker.name} " + ", ".join(g.schedule.text for g in s.worker.groups)
                                        for s in workers) if workers else " (no agent_schedule in the configuration)"))

    def stop(self, grace: float | None = None) -> list[str]:
        """Stop everything; the workers cut off because their run outlived ``grace`` (their names)."""
        device = self.endpoint.listener if self.endpoint is not None else None
        for listener in (self.monitor, device):
            if listener is not None:
                listener.server.should_exit = True          # no new request from now on
        if self.endpoint is not None:
            self.endpoint.ahead.stop()       # no round starts any more (the one in flight ends)
        left = self.scheduler.stop(self.topology.server.stop_grace_s if grace is None else grace)
        self.watch.stop()
        if not left:
            self.leadership.stop()           # given up once no run of ours is in flight
        for listener in (self.monitor, device):
            if listener is not None:
                listener.stop(5.0)
        if self.endpoint is not None:
            self.endpoint.feed.stop()
        if not left:
            try:
                self.spark.stop()
            except JvmEnded as e:        # its whole control group was signalled
                self.report(f"serve: {e} before serve stopped it")
            except Exception as e:  # noqa: BLE001 - the JVM ended while it was being stopped
                self.report(f"serve: Spark's JVM had ended before serve stopped it ({type(e).__name__})")
        return left


def run_service(topology: Topology, report: Reporter = silent, spark: Callable[[], Any] | None = None,
                operator_token: str | None = None) -> None:
    """Run until SIGTERM or SIGINT (see the module's doc)."""
    service = Service(topology, report, spark, operator_token)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        if stop.is_set():                 # the second signal: cut off now
            os._exit(128 + signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        service.start()
        stop.wait()
        report("serve: stopping: no new run starts; waiting for the runs in flight")
        left = service.stop()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if left:
        report(f"serve: {', '.join(left)} still running after {topology.server.stop_grace_s:g}s: cut off (its open "
               "transaction rolls back; the next start resumes from its watermarks)")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    report("serve: stopped")
