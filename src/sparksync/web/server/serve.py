"""The device endpoint of ``sparksync serve`` (uvicorn; the service runs it beside its agents and monitor,
``service/process.py``), TLS or a loopback address only, with the rounds' Spark work (the partition feed,
``merge/session/remote/feed.py``): the SparkSession starts, in the background, with the first round that moves
more than ``[spark] driver_round_changes`` changes; that round, and every round until Spark is up, runs in this
process (a device never waits for a JVM). The rounds run ahead of the devices, in a thread of their own
(``ahead.py``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sparksync.config import Topology
from sparksync.errors import ConfigurationError
from sparksync.merge.session.remote.feed import Feed
from sparksync.progress import Reporter, silent
from sparksync.spark.lazy import LazySpark
from sparksync.web.addresses import is_loopback
from sparksync.web.listener import Listener
from sparksync.web.server.ahead import RoundsAhead
from sparksync.web.server.app import make_app
from sparksync.web.server.door import Door


def check_listen(topology: Topology) -> None:
    server = topology.server
    if server.tls_cert is None and not is_loopback(server.host):
        raise ConfigurationError(
            f"[server] listen = {server.listen!r} without TLS: devices' tokens would cross the network in the clear; "
            "give tls_cert and tls_key, or listen on a loopback address behind a reverse proxy that terminates TLS",
            obj="server.listen")


@dataclass
class Endpoint:
    """The device endpoint: its listener, its partition feed and its rounds ahead of the devices (``ahead.py``)."""

    listener: Listener
    feed: Feed
    ahead: RoundsAhead
    door: Door

    def start(self, name: str) -> None:
        self.listener.start(name)
        self.ahead.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self.listener.server.should_exit = True
        self.ahead.stop()
        self.listener.stop(timeout)
        self.feed.stop()
        self.door.close()


def device_endpoint(topology: Topology, report: Reporter, spark: Callable[[], Any] | None) -> Endpoint:
    """The device endpoint (not started; its partition feed started). ``spark``: the session if it is up, else
    None at once (``LazySpark.ready``)."""
    check_listen(topology)
    server = topology.server
    feed = Feed(topology.feed_root, spark, topology.spark.driver_round_changes, report)
    door = Door(topology, report, feed)
    door.prepare()
    feed.start()
    web = [s.name for s in topology.subscriptions if s.transport == "web"]
    groups = [g.name for g in topology.device_groups]
    report(f"serve: device endpoint on {url_of(topology)} for {len(web)} web subscription(s)"
           + (f" and the devices enrolled into device group(s) {', '.join(groups)}" if groups else ""))
    logging.getLogger("sparksync.serve").addHandler(_ReportHandler(report))
    app = make_app(door, server.max_request_mb, server.max_active_requests, server.request_queue_s,
                   per_device=server.per_device, min_rate=server.min_body_rate_kb * 1024, grace_s=server.body_grace_s,
                   enrollments_per_minute=server.enrollments_per_minute)
    listener = Listener(app, server.host, server.port, "server.listen",
                        topology.resolve_path(server.tls_cert) if server.tls_cert else None,
                        topology.resolve_path(server.tls_key) if server.tls_key else None)
    return Endpoint(listener, feed, RoundsAhead(door, report, server.round_ahead_s), door)


def url_of(topology: Topology) -> str:
    server = topology.server
    return f"{'https' if server.tls_cert else 'http'}://{server.listen}"


@contextlib.contextmanager
def serving(topology: Topology, report: Reporter = silent, spark: Callable[[], Any] | None = None) -> Iterator[str]:
    """The device endpoint in a thread of this process while inside (the demo); yields its URL."""
    lazy = LazySpark(spark)
    endpoint = device_endpoint(topology, report, lazy.ready if spark is not None else None)
    try:
        endpoint.start("sparksync-serve")
        yield url_of(topology)
    finally:
        endpoint.stop(None)
        lazy.stop()


class _ReportHandler(logging.Handler):
    def __init__(self, report: Reporter):
        super().__init__(logging.INFO)
        self.report = report

    def emit(self, record: logging.LogRecord) -> None:
        self.report(self.format(record))
