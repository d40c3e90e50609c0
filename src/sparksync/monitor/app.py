"""The operator's monitor over HTTP (Starlette), on its own listener (``[server] monitor``), never the device
endpoint's: devices' tokens open nothing here.

    GET /               the page (``?refresh=N``: every N seconds, default 5; ``?part=main``: the part its
                        script refreshes; ``?q=``: the enrolled devices found, with their last runs)
    GET /api/status     the document of ``sparksync status --json``
    GET /api/conflicts  the document of ``sparksync conflicts --json`` (``?publication=``, ``?article=``)
    GET /api/history    the document of ``sparksync history --json`` (``?limit=``)
    GET /api/devices    the enrolled devices, paged, as ``sparksync devices --json`` (``?group=``, ``?state=``, ``?q=``,
                        ``?page=``, ``?page_size=``)
    GET /metrics        Prometheus text
    GET /healthz        200 while the agents' loop is alive, else 503 (no token)

Read-only: any other method is a 405. With an operator token (``SPARKSYNC_OPERATOR_TOKEN``; required when the
listener is not loopback) every request but ``/healthz`` carries it, as ``Authorization: Bearer <token>``
or as the password of HTTP Basic authentication (what a browser asks for: the 401 says so).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sparksync.config import Topology
from sparksync.errors import ConfigurationError
from sparksync.merge.conflicts.view import list_conflicts
from sparksync.monitor import page
from sparksync.monitor.devices import listing as device_listing
from sparksync.monitor.devices import page_of
from sparksync.monitor.metrics import SparksyncCollector
from sparksync.monitor.view import build_view
from sparksync.monitor.watch import Agents, Watch
from sparksync.redaction import redact
from sparksync.run_history import LIMIT, gather_history
from sparksync.spark.failures import recover
from sparksync.status import gather_status
from sparksync.web.addresses import is_loopback
from sparksync.web.listener import basic_password, bearer, problem, same_secret

OPEN = ("/healthz",)


def _document(doc: Any) -> Response:
    """A document as the CLI's ``--json`` prints it (the same ``json.dumps``)."""
    return Response(redact(json.dumps(doc, default=str)), media_type="application/json")


class ReadOnly:
    """GET only (405 otherwise), and the operator's token on every path but ``/healthz``."""

    def __init__(self, app: ASGIApp, token: str | None):
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "GET":
            response: Response = problem(405, "method not allowed", "the monitor is read-only: GET only",
                                         headers={"Allow": "GET"})
        elif self.token is not None and scope["path"] not in OPEN and not self._authorized(scope):
            response = problem(401, "unauthorized", "the operator's token is required",
                               headers={"WWW-Authenticate": 'Basic realm="sparksync monitor", charset="UTF-8"'})
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        assert self.token is not None
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        return same_secret(bearer(header) or basic_password(header), self.token)


def make_monitor_app(topology: Topology, agents: Agents, watch: Watch | None, token: str | None) -> ASGIApp:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SparksyncCollector(topology, agents, watch))

    def guarded(work: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                return await run_in_threadpool(work, request)
            except Exception as e:  # noqa: BLE001 - one clear message, never a traceback
                error = recover(e)
                if error is None:
                    return problem(500, "internal error", f"{type(e).__name__}: {e}")
                status = 400 if isinstance(error, ConfigurationError) else 503 if error.transient else 500
                return problem(status, {400: "bad request", 503: "unavailable"}.get(status, "error"), error.message)
        return endpoint

    def home(request: Request) -> Response:
        part = request.query_params.get("part")
        if part not in (None, "main"):
            raise ConfigurationError(f"part={part[:40]!r}: the page has one part, main", obj="part")
        refresh = request.query_params.get("refresh", str(page.REFRESH_S))
        if not refresh.isdigit() or not 1 <= int(refresh) <= 3600:
            raise ConfigurationError(f"refresh={refresh[:20]!r}: seconds between refreshes, 1 to 3600", obj="refresh")
        search = request.query_params.get("q", "").strip()
        if len(search) > 200:
            raise ConfigurationError("q: a device's name, partition, login or file, at most 200 characters", obj="q")
        try:
            html = page.render(build_view(topology, agents, watch, search or None), topology.alerts.latency_s, part,
                               int(refresh))
        except Exception as e:  # noqa: BLE001 - the page says what it cannot read, and keeps refreshing
            error = recover(e)
            if error is None:
                raise
            html = page.render_unreadable(topology.publisher.name, error.message, part, int(refresh))
            return HTMLResponse(redact(html), status_code=503, headers={"Cache-Control": "no-store"})
        return HTMLResponse(redact(html), headers={"Cache-Control": "no-store"})

    def status(request: Request) -> Response:
        return _document(gather_status(topology))

    def conflicts(request: Request) -> Response:
        q = request.query_params
        return _document(list_conflicts(topology, q.get("publication") or None, q.get("article") or None))

    def history(request: Request) -> Response:
        limit = request.query_params.get("limit", str(LIMIT))
        if not limit.isdigit() or not 0 < int(limit) <= 10_000:
            raise ConfigurationError(f"limit={limit[:20]!r}: a number of runs from 1 to 10000", obj="limit")
        return _document(gather_history(topology, int(limit)))

    def devices(request: Request) -> Response:
        q = request.query_params
        page, size = q.get("page", "1"), q.get("page_size", "100")
        if not page.isdigit() or not 0 < int(page) <= 1_000_000:
            raise ConfigurationError(f"page={page[:20]!r}: a page number from 1", obj="page")
        if not size.isdigit() or not 0 < int(size) <= 1000:
            raise ConfigurationError(f"page_size={size[:20]!r}: devices a page, 1 to 1000", obj="page_size")
        group = q.get("group") or None
        if group is not None and group not in {g.name for g in topology.device_groups}:
            raise ConfigurationError(f"group={group[:40]!r}: no such device group", obj="group")
        found = device_listing(topology, group, q.get("state") or None, (q.get("q") or "")[:200] or None)
        return _document(page_of(found, int(page), int(size)))

    def metrics(request: Request) -> Response:
        return Response(redact(generate_latest(registry).decode()), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        alive = agents.alive()
        return JSONResponse({"status": "ok" if alive else "stopped"}, status_code=200 if alive else 503)

    async def not_found(request: Request, exc: Exception) -> Response:
        return problem(404, "not found", f"{request.url.path[:200]}: the monitor serves /, /api/status, "
                                         "/api/conflicts, /api/history, /api/devices, /metrics and /healthz")

    routes = [Route("/", guarded(home)), Route("/api/status", guarded(status)),
              Route("/api/conflicts", guarded(conflicts)), Route("/api/history", guarded(history)),
              Route("/api/devices", guarded(devices)),
              Route("/metrics", guarded(metrics)), Route("/healthz", healthz)]
    app = Starlette(routes=routes, exception_handlers={404: not_found})
    return ReadOnly(app, token)


def check_monitor(topology: Topology, token: str | None) -> None:
    """The monitor refuses to listen beyond loopback without the operator's token."""
    if token is None and not is_loopback(topology.server.monitor_host):
        raise ConfigurationError(
            f"[server] monitor = {topology.server.monitor!r} is not a loopback address: set SPARKSYNC_OPERATOR_TOKEN "
            "(every request but /healthz must carry it), or listen on 127.0.0.1", obj="server.monitor")
    if token is not None and len(token) < 16:
        raise ConfigurationError("SPARKSYNC_OPERATOR_TOKEN is too short: use at least 16 characters (e.g. "
                                 "python -c 'import secrets; print(secrets.token_urlsafe(32))')",
                                 obj="SPARKSYNC_OPERATOR_TOKEN")
