"""The device endpoint over HTTP (Starlette): routes, authentication, limits, and errors as
``application/problem+json``. The work is the door's (``door.py``), run in worker threads.

    GET  /healthz                                  200 when ready (no token)
    GET  /v1/sync/hello                            who the device is at the publisher
    GET  /v1/sync/snapshot                         its partition's snapshot manifest
    GET  /v1/sync/snapshot/{snapshot_id}/{path}    one file of it (Range requests resume)
    POST /v1/sync/initialize                       the device starts a new file (a fresh identity if it had one)
    POST /v1/sync/initialized                      the device committed its initialization
    POST /v1/sync/recover                          its file is an older copy of itself: recovered (restored.py)
    PUT  /v1/sync/uploads/{lo}-{hi}                its changes of generations (lo, hi] (Arrow stream)
    GET  /v1/sync/uploads/{lo}-{hi}                the reply to that upload, when the device did not receive it
    POST /v1/sync/download                         the publisher's changes for it after its watermark (frames
                                                   of Arrow streams: its own, then the partition feed's), in
                                                   generation batches, with those that failed there before
    POST /v1/sync/download/ack                     it applied them up to a generation
    POST /v1/sync/done                             its sync ended: what it did (a merge session row)

Every request but ``/healthz`` carries ``Authorization: Bearer <token>`` and ``Sparksync-Protocol``; a
wrong, revoked or missing token is a 401 that says nothing more. Every request is bounded: a body over
``max_request_mb`` is a 413 (by its Content-Length, or as soon as a chunked body passes it), frames that say
they unpack to more a 413 before anything is unpacked, a JSON body over ``MAX_JSON`` bytes a 413 and one
nested deeper than ``MAX_DEPTH`` a 400; uploads and downloads run ``max_active_requests`` at a time, a
request past them waits up to ``request_queue_s`` for its turn (holding nothing but its connection: its
body is read once it has one), then gets 429 with ``Retry-After``. A malformed request is a 4xx with one
message; a 500 only when the server itself failed (its log says why).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sparksync import __version__, storage
from sparksync.errors import (
    ConfigurationError,
    NoSuchPartition,
    NotInitialized,
    OtherFile,
    ProtocolError,
    RequestTooLarge,
    RequestTooSlow,
    ServerBusy,
    SnapshotError,
    SparksyncError,
    Unauthorized,
    UploadConflict,
)
from sparksync.merge.session.remote.frames import MEDIA_ARROW
from sparksync.redaction import redact
from sparksync.web import listener
from sparksync.web.protocol import (
    ENROLL,
    HEALTHZ,
    OLDEST_PROTOCOL,
    PROTOCOL,
    PROTOCOL_HEADER,
    ROUTES,
    AckRequest,
    DoneRequest,
    DownloadRequest,
    EnrollReply,
    EnrollRequest,
    InitializedRequest,
    RecoverRequest,
    parse,
)
from sparksync.web.protocol import Route as ProtocolRoute
from sparksync.web.server.door import Device, Door

log = logging.getLogger("sparksync.serve")


MAX_JSON = 2 * 1024 * 1024        # a JSON request's body (a download's failed list: 10,000 pairs, ~0.5 MB)
MAX_DEPTH = 8                      # the deepest nesting a JSON request may have (the protocol's own is 3)
RETRY_AFTER_S = 2                  # what a 429 tells the device to wait
ENROLLING = 2                      # enrollments worked on at once (they take turns at the publisher anyway) ...
ENROLLING_WAITING = 64             # ... and waiting for a turn; more get 429 at once: a burst never holds the door


class _TooLarge(Exception):
    """The body passed the limit while it was read (answered 413)."""

    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


def _too_large(limit: int) -> JSONResponse:
    return problem(413, "request too large", f"the body is over the server's max_request_mb ({limit / 1024 / 1024:g} MB)")


def problem(status: int, title: str, detail: str = "", **extra: Any) -> JSONResponse:
    """The door's problem document (``web/listener.problem``): a 401 names the Bearer scheme."""
    return listener.problem(status, title, detail, {"WWW-Authenticate": "Bearer"} if status == 401 else None, **extra)


def _status(e: SparksyncError) -> int:
    if isinstance(e, Unauthorized):
        return 401
    if isinstance(e, RequestTooLarge):
        return 413
    if isinstance(e, RequestTooSlow):
        return 408
    if isinstance(e, ServerBusy):
        return 429
    if isinstance(e, UploadConflict | OtherFile):
        return 409
    if isinstance(e, ProtocolError | ConfigurationError):
        return 400
    if isinstance(e, NoSuchPartition):
        return 403
    if isinstance(e, NotInitialized | SnapshotError):
        return 409
    return 503 if e.transient else 500


@dataclass(frozen=True)
class Handler:
    """One route's work. ``work`` runs in a worker thread with the device whose token was checked (in the same
    thread, for a route without turns: one thread hop per request), given what ``read`` took from the request in
    the event loop (a JSON body's bytes, bounded) and the request. ``turns``: the route works only in its turn
    (its token checked first, its body read once it has one)."""

    work: Callable[[Device, Any, Request], Response]
    read: Callable[[Request], Awaitable[Any]] | None = None
    turns: Turns | None = None
    free: bool = False          # the route decides the file's standing itself (``Door.authenticate``)


class Turns:
    """Uploads and downloads worked on at once (``max_active_requests``): a request waits up to ``queue_s``
    for its turn, then is refused with ``ServerBusy`` (429); one device's (its subscription's) at most
    ``per_device`` at once, waiting ones included, more refused at once: one token never holds the door."""

    def __init__(self, at_once: int, queue_s: float, per_device: int | None = None,
                 what: str = "uploads and downloads"):
        self.at_once, self.queue_s, self.what = at_once, queue_s, what
        self.per_device = per_device or at_once
        self._slots: asyncio.Semaphore | None = None      # made in the server's event loop
        self._held: dict[str, int] = {}                   # a device's requests holding or waiting for a turn

    @contextlib.asynccontextmanager
    async def turn(self, device: str) -> AsyncIterator[None]:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.at_once)
        if self._held.get(device, 0) >= self.per_device:
            raise ServerBusy(f"{device} has {self.per_device} of its {self.what} at the server already; try again in "
                             f"{RETRY_AFTER_S} s", RETRY_AFTER_S)
        self._held[device] = self._held.get(device, 0) + 1
        try:
            try:
                await asyncio.wait_for(self._slots.acquire(), self.queue_s)
            except TimeoutError:
                raise ServerBusy(f"the server works on {self.at_once} {self.what} at once; try again in "
                                 f"{RETRY_AFTER_S} s", RETRY_AFTER_S) from None
            try:
                yield
            finally:
                self._slots.release()
        finally:
            self._held[device] -= 1
            if not self._held[device]:
                del self._held[device]


class BodyReader:
    """A request's body read in full, bounded in size (``limit``: 413) and in pace: once ``grace_s`` have passed, a
    body arriving slower than ``min_rate`` bytes a second is cut (``RequestTooSlow``: 408), so a client trickling
    bytes holds its connection and turn for seconds, not for ever."""

    def __init__(self, min_rate: float = 0.0, grace_s: float = 10.0):
        self.min_rate, self.grace_s = min_rate, grace_s

    async def read(self, request: Request, limit: int | None = None) -> bytes:
        chunks, size = [], 0
        start = time.monotonic()
        stream = request.stream().__aiter__()
        while True:
            try:
                chunk = await asyncio.wait_for(stream.__anext__(), self._allowance(size, start))
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise RequestTooSlow(f"{request.url.path}: the body arrived slower than {self.min_rate / 1024:g} KB/s "
                                     f"({size:,} bytes in {time.monotonic() - start:.0f} s); cut",
                                     obj=request.url.path) from None
            size += len(chunk)
            if limit is not None and size > limit:
                raise RequestTooLarge(f"{request.url.path}: a JSON body of more than {limit:,} bytes",
                                      obj=request.url.path)
            chunks.append(chunk)
        return b"".join(chunks)

    def _allowance(self, size: int, start: float) -> float | None:
        """Seconds the next chunk may take: what the grace and the minimum rate allow for the bytes so far."""
        if self.min_rate <= 0:
            return None
        return max(0.01, start + self.grace_s + size / self.min_rate - time.monotonic())


def _endpoint(door: Door, handler: Handler):
    """``handler`` behind the protocol's version check and the token."""
    async def endpoint(request: Request) -> Response:
        seen: list[Device] = []              # the device, once its token was checked (in a worker thread)
        try:
            sent = request.headers.get(PROTOCOL_HEADER)
            if sent is not None and (not sent.isascii() or not sent.isdigit() or len(sent) > 6 or
                                     int(sent) < OLDEST_PROTOCOL):
                return problem(426, "client too old", f"this server (sparksync {__version__}) speaks protocol "
                               f"{OLDEST_PROTOCOL} to {PROTOCOL}; the client speaks {sent[:10]!r}: upgrade "
                               "sparksync on the device")
            token = listener.bearer(request.headers.get("authorization", ""))
            free = handler.free or (request.url.path == ROUTES["recover"].path and
                                    request.headers.get("Sparksync-Take-Over") == "recover")
            if handler.turns is None:
                data = await handler.read(request) if handler.read is not None else None
                return await run_in_threadpool(_authenticated, door, token, request.headers, free, handler.work, data,
                                               request, seen)
            seen.append(await run_in_threadpool(door.authenticate, token, request.headers, free))
            async with handler.turns.turn(seen[0].name):
                data = await handler.read(request) if handler.read is not None else None
                return await run_in_threadpool(handler.work, seen[0], data, request)
        except SparksyncError as e:
            device = seen[0] if seen else None
            status = _status(e)
            if status == 401:
                return problem(401, "unauthorized")
            extra = {"expected_lo": e.expected_lo} if isinstance(e, UploadConflict) and e.expected_lo is not None else {}
            if status >= 500:
                log.warning("%s %s: %s", request.method, request.url.path, redact(e.message))
            if isinstance(e, OtherFile):          # a stray file: recorded apart, never a run of the subscription
                await run_in_threadpool(door.refused, e)
            elif device is not None and status not in (429, 503):          # (busy: the device asks again)
                await run_in_threadpool(door.failed, device, f"{request.method} {request.url.path}: {status} {e.message}")
            response = problem(status, e.code, redact(e.message), **extra)
            if isinstance(e, ServerBusy):
                response.headers["Retry-After"] = str(int(e.retry_after))
            return response
        except _TooLarge as e:
            device = seen[0] if seen else None
            if device is not None:
                await run_in_threadpool(door.failed, device, f"{request.method} {request.url.path}: 413 a body over "
                                        f"max_request_mb")
            return _too_large(e.limit)
        except Exception as e:  # noqa: BLE001 - never a traceback to a client
            log.exception("%s %s failed", request.method, request.url.path)
            device = seen[0] if seen else None
            if device is not None:
                await run_in_threadpool(door.failed, device, f"{request.method} {request.url.path}: the server failed "
                                        f"({type(e).__name__}); its log says why")
            return problem(500, "internal error", "the server failed; its log says why")
    return endpoint


def _authenticated(door: Door, token: str | None, headers: Any, free: bool,
                   work: Callable[[Device, Any, Request], Response], data: Any, request: Request,
                   seen: list[Device]) -> Response:
    device = door.authenticate(token, headers, free)
    seen.append(device)
    return work(device, data, request)


def _int(value: str | None, name: str) -> int:
    if value is None or not value.isdigit() or len(value) > 18:
        raise ProtocolError(f"{name}: {str(value)[:20]!r} is not a generation", obj=name)
    return int(value)


M = TypeVar("M", bound=BaseModel)


def _json(model: type[M], text: bytes, request: Request) -> M:
    """A JSON body (``_json_body``) at most ``MAX_DEPTH`` levels deep (400), read by its model (``web/protocol.parse``)."""
    if _depth(text) > MAX_DEPTH:
        raise ProtocolError(f"the body is nested more than {MAX_DEPTH} levels deep", obj=request.url.path)
    return parse(model, text, request.url.path)


def _depth(text: bytes) -> int:
    """How deep the brackets of a JSON text nest (an upper bound: brackets inside strings count too), without
    parsing it: the parser is recursive, and a body of nested brackets would exhaust it."""
    depth = deepest = 0
    for b in text.translate(None, _NOT_BRACKETS):
        depth += 1 if b in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


PARQUET = "application/vnd.apache.parquet"


def _stored_file(folder: storage.Folder, path: str, ranged: str | None) -> Response:
    """A snapshot file: a local one as Starlette serves files (ranges included); one in an object store or HDFS
    streamed from it, from where a resumed download asks (``Range: bytes=N-``, what a device sends)."""
    if folder.local:
        return FileResponse(folder.local_path(path), media_type=PARQUET)
    size = folder.size(path)
    start = 0
    found = re.fullmatch(r"bytes=(\d+)-", (ranged or "").strip())
    if found:
        start = int(found.group(1))
        if start >= size:
            return Response(status_code=416, headers={"Content-Range": f"bytes */{size}"})

    def chunks() -> Iterator[bytes]:
        with folder.open(path) as f:
            f.seek(start)
            while chunk := f.read(1 << 20):
                yield bytes(chunk)

    headers = {"Content-Length": str(size - start), "Accept-Ranges": "bytes"}
    if found:
        headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
    return StreamingResponse(chunks(), status_code=206 if found else 200, headers=headers, media_type=PARQUET)


class SourceLimit:
    """At most ``per_minute`` requests from one source address in any minute (a fixed window per address, the
    addresses of the current and the last minute only: bounded memory whatever a burst of addresses sends)."""

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        self._window = -1
        self._counts: dict[str, int] = {}

    def admit(self, source: str) -> None:
        window = int(time.monotonic() // 60)
        if window != self._window:
            self._window, self._counts = window, {}
        n = self._counts.get(source, 0) + 1
        if n > self.per_minute:
            wait = int(60 - time.monotonic() % 60) + 1
            raise ServerBusy(f"more than {self.per_minute} enrollment requests from {source} in a minute; try again "
                             f"in {wait} s", wait)
        if len(self._counts) < 1_000_000:
            self._counts[source] = n


def make_app(door: Door, max_request_mb: float = 64, max_active_requests: int = 8, queue_s: float = 5.0,
             per_device: int | None = None, min_rate: float = 0.0, grace_s: float = 10.0,
             enrollments_per_minute: int = 30) -> ASGIApp:
    bodies = BodyReader(min_rate, grace_s)
    sources = SourceLimit(enrollments_per_minute)
    enrolling = Turns(ENROLLING, queue_s, ENROLLING + ENROLLING_WAITING, "enrollments")

    async def _json_body(request: Request) -> bytes:
        """The request's JSON text: at most ``MAX_JSON`` bytes (413), at the minimum pace (408); ``_json`` reads it."""
        return await bodies.read(request, MAX_JSON)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "version": __version__, "protocol": PROTOCOL})

    def snapshot_file(device: Device, _: None, request: Request) -> Response:
        folder, path = door.snapshot_file(device, request.path_params["snapshot_id"], request.path_params["path"])
        return _stored_file(folder, path, request.headers.get("range"))

    def recover(device: Device, text: bytes, request: Request) -> Response:
        body = _json(RecoverRequest, text, request)
        return _reply(door.recover(device, body.nickname, body.sentgen, body.recgen))

    def initialized(device: Device, text: bytes, request: Request) -> Response:
        body = _json(InitializedRequest, text, request)
        return _reply(door.initialized(device, body.snapshot_id, body.baseline, body.snapshot_generation))

    async def upload_body(request: Request) -> tuple[int, int, bytes]:
        lo, hi = _int(request.path_params["lo"], "lo"), _int(request.path_params["hi"], "hi")  # before the body
        return lo, hi, await bodies.read(request)

    def uploaded(device: Device, _: None, request: Request) -> Response:
        lo, hi = _int(request.path_params["lo"], "lo"), _int(request.path_params["hi"], "hi")
        return _reply(door.uploaded(device, lo, hi))

    def download(device: Device, text: bytes, request: Request) -> Response:
        body = _json(DownloadRequest, text, request)
        frames = door.download(device, body.after, body.batch, list(body.failed), body.keyset)
        length = {"Content-Length": str(sum(len(f) for f in frames))}
        if len(frames) == 1:
            return Response(frames[0], media_type=MEDIA_ARROW, headers=length)
        return StreamingResponse(_each(frames), media_type=MEDIA_ARROW, headers=length)

    async def enroll(request: Request) -> Response:
        """``enroll``: no token (the enrollment secret is the credential), limited per source address (429), its
        body bounded; a refusal is one 401 that says nothing of why."""
        try:
            sources.admit(request.client.host if request.client is not None else "?")
            body = _json(EnrollRequest, await _json_body(request), request)
            async with enrolling.turn("enrollments"):        # a few threads at most, whatever a burst sends
                done, token = await run_in_threadpool(door.enroll, body.secret, body.file_id, body.described, body.jwt)
            return _reply(EnrollReply(subscription=done.subscription, group=done.group, token=token, again=done.again))
        except SparksyncError as e:
            status = _status(e)
            if status == 401:
                return problem(401, "enrollment refused", "the enrollment secret is unknown, used up, expired or "
                               "revoked, or the token was not accepted; ask the operator for a new one")
            if status >= 500:
                log.warning("%s %s: %s", request.method, request.url.path, redact(e.message))
            response = problem(status, e.code, redact(e.message))
            if isinstance(e, ServerBusy):
                response.headers["Retry-After"] = str(int(e.retry_after))
            return response
        except _TooLarge as e:
            return _too_large(e.limit)
        except Exception:  # noqa: BLE001 - never a traceback to a client
            log.exception("%s %s failed", request.method, request.url.path)
            return problem(500, "internal error", "the server failed; its log says why")

    turns = Turns(max_active_requests, queue_s, per_device)
    handlers = {
        "hello": Handler(lambda device, _, r: _reply(door.hello(device)), free=True),
        "snapshot": Handler(lambda device, _, r: JSONResponse(door.snapshot(device)[1])),
        "snapshot_file": Handler(snapshot_file),
        "initialize": Handler(lambda device, _, r: _reply(door.begin(device)), free=True),
        "initialized": Handler(initialized, _json_body),
        "recover": Handler(recover, _json_body),
        "upload": Handler(lambda device, body, r: _reply(door.upload(device, *body)), upload_body, turns),
        "uploaded": Handler(uploaded),
        "download": Handler(download, _json_body, turns),
        "ack": Handler(lambda device, text, r: _reply(door.ack(device, _json(AckRequest, text, r).hi)), _json_body),
        "done": Handler(lambda device, text, r: _reply(door.done(device, _json(DoneRequest, text, r))), _json_body),
    }
    routes = [Route(HEALTHZ.path, healthz, methods=[HEALTHZ.method]),
              Route(ENROLL.path, enroll, methods=[ENROLL.method])] + [
        Route(_path(ROUTES[name]), _endpoint(door, handler), methods=[ROUTES[name].method])
        for name, handler in handlers.items()]
    return BodyLimit(Starlette(routes=routes), int(max_request_mb * 1024 * 1024))


async def _each(frames: list[bytes]) -> AsyncIterator[bytes]:
    """A download's frames, sent one after the other (from the event loop: no worker thread per frame)."""
    for frame in frames:
        yield frame


def _path(route: ProtocolRoute) -> str:
    """A protocol route's path as Starlette matches it (a snapshot file's path may hold slashes)."""
    return route.path.replace("{path}", "{path:path}")


def _reply(message: BaseModel) -> JSONResponse:
    return JSONResponse(message.model_dump(mode="json", by_alias=True))


class BodyLimit:
    """A request body over ``limit`` bytes is a 413 before the app reads it (by its Content-Length) or as
    soon as it passes the limit (a chunked body: the endpoint reading it answers); uvicorn has no limit of
    its own."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await _too_large(self.limit)(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(self.limit)
            return message

        await self.app(scope, limited, send)
