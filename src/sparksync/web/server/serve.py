"""``sparksync serve``: the device endpoint in one process (uvicorn), TLS or a loopback address only."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from sparksync.config import Topology
from sparksync.errors import ConfigurationError
from sparksync.progress import Reporter, silent
from sparksync.web.addresses import is_loopback
from sparksync.web.server.app import make_app
from sparksync.web.server.door import Door


def check_listen(topology: Topology) -> None:
    server = topology.server
    if server.tls_cert is None and not is_loopback(server.host):
        raise ConfigurationError(
            f"[server] listen = {server.listen!r} without TLS: devices' tokens would cross the network in the clear; "
            "give tls_cert and tls_key, or listen on a loopback address behind a reverse proxy that terminates TLS",
            obj="server.listen")


def _server(topology: Topology, report: Reporter):
    import uvicorn

    check_listen(topology)
    server = topology.server
    door = Door(topology, report)
    door.prepare()
    web = [s.name for s in topology.subscriptions if s.transport == "web"]
    report(f"serve: device endpoint on {url_of(topology)} for {len(web)} web subscription(s)")
    logging.getLogger("sparksync.serve").addHandler(_ReportHandler(report))
    config = uvicorn.Config(make_app(door, server.max_request_mb), host=server.host, port=server.port,
                            ssl_certfile=topology.resolve_path(server.tls_cert) if server.tls_cert else None,
                            ssl_keyfile=topology.resolve_path(server.tls_key) if server.tls_key else None,
                            log_level="warning", access_log=False, lifespan="off", server_header=False)
    return uvicorn.Server(config)


def url_of(topology: Topology) -> str:
    server = topology.server
    return f"{'https' if server.tls_cert else 'http'}://{server.listen}"


def serve(topology: Topology, report: Reporter = silent) -> None:
    """Run the device endpoint until interrupted (SIGINT, SIGTERM: requests in flight finish)."""
    _server(topology, report).run()


@contextlib.contextmanager
def serving(topology: Topology, report: Reporter = silent) -> Iterator[str]:
    """The device endpoint in a thread of this process while inside (the demo); yields its URL."""
    server = _server(topology, report)
    thread = threading.Thread(target=server.run, name="sparksync-serve", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise ConfigurationError(f"[server] listen = {topology.server.listen!r}: the endpoint did not start "
                                     "(is the address in use?)", obj="server.listen")
        time.sleep(0.05)
    try:
        yield url_of(topology)
    finally:
        server.should_exit = True
        thread.join()


class _ReportHandler(logging.Handler):
    def __init__(self, report: Reporter):
        super().__init__(logging.INFO)
        self.report = report

    def emit(self, record: logging.LogRecord) -> None:
        self.report(self.format(record))
