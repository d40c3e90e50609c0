"""The device's HTTP side (httpx): the server's address checked, the token read safely, every request
retried when the network or the server fails on the way (each is idempotent; a busy server's
``Retry-After`` waited for), and the server's ``application/problem+json`` answers turned into typed errors.
What retrying cannot mend (a certificate that cannot be verified, a port that speaks TLS to ``http://`` or
plain HTTP to ``https://``) is one error at once.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import functools
import math
import os
import re
import socket
import ssl
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ValidationError

from sparksync import __version__
from sparksync.errors import (
    ConfigurationError,
    ConnectionFailed,
    EnrollmentRefused,
    NotInitialized,
    OtherFile,
    ProtocolError,
    ServerBusy,
    SparksyncError,
    TlsError,
    Unauthorized,
)
from sparksync.merge.session.remote.frames import MEDIA_ARROW
from sparksync.web.addresses import is_loopback
from sparksync.web.device.downloads import DownloadTarget
from sparksync.web.protocol import PROTOCOL, PROTOCOL_HEADER, Route

M = TypeVar("M", bound=BaseModel)
TOKEN_ENV = "SPARKSYNC_TOKEN"
ENROLL_ENV = "SPARKSYNC_ENROLL"          # an enrollment secret (``sparksync sync --enroll``)
RETRIES = 6                    # attempts of one request when the network or the server fails on the way
_BACKOFF = 0.2
RETRY_AFTER_MAX = 30.0         # seconds: the longest a server's Retry-After is waited for, per attempt
_RETRIED = (429, 502, 503, 504)
_PROBE_TIMEOUT = 3.0


def read_token(token_file: str | None) -> str:
    """The device's token: ``--token-file`` (refused unless only its owner may read it) or ``SPARKSYNC_TOKEN``."""
    if token_file:
        path = Path(token_file)
        try:
            mode = path.stat().st_mode
        except OSError as e:
            raise ConfigurationError(f"--token-file {token_file}: cannot be read ({e.strerror})", obj=token_file) from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigurationError(f"--token-file {token_file}: others may read it (mode {stat.S_IMODE(mode):o}); "
                                     f"chmod 600 {token_file}", obj=token_file)
        token = path.read_text(encoding="utf-8").strip()
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ConfigurationError(f"no token: set {TOKEN_ENV} or give --token-file (the operator makes one with "
                                 "'sparksync token')", obj="token")
    return token


def check_server(url: str) -> str:
    """``url`` as the device uses it: https, or http to a loopback address only (a token in the clear); no
    user or password in it (the device authenticates with its token, and a password there would be sent)."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        host = parts.netloc.rpartition("@")[2]
        raise ConfigurationError(f"--server {parts.scheme}://{host}{parts.path}: the URL holds a user or password; the "
                                 f"device authenticates with its token only ({TOKEN_ENV} or --token-file): remove the "
                                 "'user:password@' part", obj="server")
    try:
        port = parts.port
    except ValueError as e:
        raise ConfigurationError(f"--server {url}: {e}", obj="server") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise ConfigurationError(f"--server {url}: not an http(s) URL", obj="server")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ConfigurationError(f"--server {url}: http:// to {parts.hostname} would send the token in the clear; "
                                 "use https:// (http:// only to a loopback address)", obj="server")
    return url.rstrip("/")


def retry_after(response: httpx.Response) -> float | None:
    """The seconds a ``Retry-After`` header asks to wait (delay-seconds or an HTTP date), at most
    ``RETRY_AFTER_MAX``; None without one (or with one that says nothing)."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - dt.datetime.now(dt.UTC)).total_seconds()
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


@functools.cache
def _trusted() -> ssl.SSLContext:
    """The certificate authorities a device trusts without ``--ca-file`` (httpx's default: certifi's, or
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), loaded once per process: loading them costs more than a small sync's
    requests, and an application that syncs every few seconds would load them at every sync."""
    return httpx.create_ssl_context()


class ServerClient:
    """One device's connection to the door."""

    def __init__(self, server: str, token: str, ca_file: str | None = None, timeout: float = 60.0,
                 retries: int = RETRIES):
        verify: Any = _trusted()
        if ca_file:
            try:
                verify = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as e:
                raise ConfigurationError(f"--ca-file {ca_file}: {e}", obj=ca_file) from None
        self.server = check_server(server)
        self.ca_file = ca_file
        self.retries = retries
        self._probed = False
        self.http = httpx.Client(base_url=self.server, verify=verify, timeout=timeout, headers={
            PROTOCOL_HEADER: str(PROTOCOL), "User-Agent": f"sparksync/{__version__}",
            **({"Authorization": f"Bearer {token}"} if token else {})})   # none: an enrollment (its secret is its own)

    def close(self) -> None:
        self.http.close()

    def identify(self, headers: dict[str, str]) -> None:
        """What every request from now on says of the device's file (``identity.FileIdentity.headers``)."""
        for k in [k for k in self.http.headers if k.lower().startswith("sparksync-file")
                  or k.lower() in ("sparksync-epoch", "sparksync-bound", "sparksync-take-over")]:
            del self.http.headers[k]
        self.http.headers.update(headers)

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        """The request, tried again when the connection fails or the server is unavailable or busy; a refusal
        (4xx) or a server error (500) is a typed error at once."""
        return self._attempts(path, lambda: self.http.request(method, path, **kw))

    def json(self, method: str, path: str, **kw) -> dict:
        return self.request(method, path, **kw).json()

    def send(self, route: Route, reply: type[M], body: BaseModel | None = None, **params: Any) -> M:
        """A request of the protocol (``web/protocol.py``): ``body`` as its JSON (or ``content``), the reply read
        as ``reply``; ``params``: the route's path parameters (and ``timeout``, an ``httpx.Timeout`` of this request).
        A reply that is not the model is a typed error."""
        content = params.pop("content", None)
        headers = params.pop("headers", None)
        timeout = params.pop("timeout", None)
        kw: dict[str, Any] = {"content": content} if content is not None else \
            {"json": body.model_dump(mode="json", by_alias=True)} if body is not None else {}
        if headers:
            kw["headers"] = headers
        if timeout is not None:
            kw["timeout"] = timeout
        path = route.url(**params)
        data = self.request(route.method, path, **kw).json()
        try:
            return reply.model_validate(data)
        except ValidationError as e:
            raise ProtocolError(f"{self.server}{path}: the server's reply is not a {reply.__name__} "
                                f"({' '.join(str(e).split())[:200]})", obj=self.server) from None

    def changes_into(self, path: str, fh: BinaryIO, **kw) -> None:
        """The frames of changes the server answers written to ``fh`` as they arrive (from its start, again for
        each attempt): a download of millions of changes is never whole in memory."""

        def attempt() -> httpx.Response:
            fh.seek(0)
            fh.truncate()
            with self.http.stream("POST", path, headers={"Accept": MEDIA_ARROW}, **kw) as response:
                if response.status_code == 200:
                    try:
                        for chunk in response.iter_bytes():
                            fh.write(chunk)
                        fh.flush()
                    except OSError as e:            # the disk full: nothing applied yet, the next sync asks again
                        where = tempfile.gettempdir()
                        raise ConfigurationError(f"{self.server}{path}: the download could not be written to a "
                                                 f"temporary file in {where} ({e.strerror or e}); free space there, "
                                                 "or set TMPDIR to a folder that has it", obj=where) from None
                else:
                    response.read()
            return response

        self._attempts(path, attempt)

    def download_file(self, path: str, target: DownloadTarget) -> None:
        """A snapshot file, resumed where a cut connection stopped it (HTTP Range)."""

        def attempt() -> httpx.Response:
            have = target.have()
            headers = {"Range": f"bytes={have}-"} if have else {}
            with self.http.stream("GET", path, headers=headers) as response:
                if response.status_code in (200, 206):
                    with target.open(append=response.status_code == 206) as fh:
                        for chunk in response.iter_bytes():
                            fh.write(chunk)
                else:
                    response.read()
            return response

        self._attempts(path, attempt, done=(416,))          # 416: nothing left to read

    def _attempts(self, path: str, send: Callable[[], httpx.Response], done: tuple[int, ...] = ()) -> httpx.Response:
        """``send()`` up to ``retries`` times: again after a failed connection (with backoff) or a 502, 503 or
        504 answer, and after a 429 (busy), waiting what its ``Retry-After`` asks (a 503's too). What retrying
        cannot mend is raised at once (``_lasting``)."""
        delay = _BACKOFF
        for attempt in range(1, self.retries + 1):
            last = attempt == self.retries
            try:
                response = send()
            except httpx.TransportError as e:
                lasting = self._lasting(e)
                if lasting is not None:
                    raise lasting from None
                if last:
                    raise ConnectionFailed(f"{self.server}: {type(e).__name__}: {_first(e)} (after {attempt} "
                                           "attempts)", obj=self.server) from None
                wait = delay
            else:
                status = response.status_code
                if status in done:
                    return response
                asked = retry_after(response) if status in (429, 503) else None
                if status not in _RETRIED:
                    return _checked(response, self.server, path)
                if last and (status == 429 or asked is not None):
                    raise ServerBusy(f"{self.server}: the server is busy ({status} {response.reason_phrase}, after "
                                     f"{attempt} attempts); try again later", asked or delay, obj=self.server)
                if last:
                    return _checked(response, self.server, path)
                wait = asked if asked is not None else delay
            time.sleep(wait)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def _lasting(self, e: httpx.TransportError) -> SparksyncError | None:
        """The error to show at once when retrying ``e`` cannot help: the server's certificate not verified,
        a TLS handshake that failed (not cut), or a TLS server behind an ``http://`` URL. None: try again."""
        parts = urlsplit(self.server)
        if isinstance(e, httpx.ConnectError):
            cause = _ssl_cause(e)
            if isinstance(cause, ssl.SSLCertVerificationError):
                reason = cause.verify_message or _ssl_reason(cause)
                if self.ca_file:
                    return TlsError(f"{self.server}: the server's certificate could not be verified with --ca-file "
                                    f"{self.ca_file} ({reason}): is that the CA that signed it?", obj=self.server)
                return TlsError(f"{self.server}: the server's certificate could not be verified ({reason}); pass "
                                "--ca-file with the certificate (PEM) of the CA that signed it", obj=self.server)
            if cause is not None and not isinstance(cause, (ssl.SSLEOFError, ssl.SSLZeroReturnError,
                                                              ssl.SSLSyscallError)):
                return TlsError(f"{self.server}: the TLS handshake failed ({_ssl_reason(cause)}): the port may not "
                                "speak TLS (a plain http:// server), or no TLS version both sides know", obj=self.server)
        elif (isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)) and parts.scheme == "http"
              and not self._probed and parts.hostname):
            self._probed = True             # once: a connection cut on the way is the usual cause
            if _speaks_tls(parts.hostname, parts.port or 80):
                return TlsError(f"{self.server}: the server did not answer HTTP: it speaks TLS on this port; use "
                                f"https://{parts.netloc}", obj=self.server)
        return None


def _ssl_cause(e: BaseException) -> ssl.SSLError | None:
    """The ssl error under an httpx error, if one is."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, ssl.SSLError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _ssl_reason(e: ssl.SSLError) -> str:
    """``[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)`` as ``wrong version number``."""
    text = re.sub(r"^\[[^]]*\]\s*|\s*\(_ssl\.c:\d+\)$", "", _first(e))
    return text or str(e.reason or type(e).__name__)


def _speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` completes a TLS handshake (its certificate not checked: only the protocol)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT) as raw, \
                context.wrap_socket(raw, server_hostname=host):
            return True
    except (OSError, ValueError):
        return False


def _first(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0][:200]


def answered(error: BaseException) -> bool:
    """``error`` is the server's own answer to a request (it knows of it: a refusal or its failure)."""
    return bool(getattr(error, "answered", False))


def _checked(response: httpx.Response, server: str, path: str) -> httpx.Response:
    status = response.status_code
    if status < 400:
        return response
    try:
        _raise_for(response, status, server, path)
    except SparksyncError as e:
        e.answered = True            # type: ignore[attr-defined]
        raise
    return response


def _raise_for(response: httpx.Response, status: int, server: str, path: str) -> None:
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = str(body.get("detail") or body.get("title") or response.reason_phrase)
    where = f"{server}{path.split('?')[0]}"
    if status == 401 and body.get("title") == "enrollment refused":
        raise EnrollmentRefused(f"{server}: {detail}", obj=server)
    if status == 401:
        raise Unauthorized(f"{server}: the token was refused (wrong, revoked, or of no subscription served there)",
                           obj=server)
    if status == 426:
        raise ProtocolError(f"{server}: {detail}", obj=server)
    if status == 409 and body.get("title") == "not_initialized":
        raise NotInitialized(f"{where}: {detail}", obj=server)
    if status == 409 and body.get("title") == "other_file":
        raise OtherFile(detail, obj=server)
    if status == 409:
        err = ProtocolError(f"{where}: {detail}", obj=server)
        err.expected_lo = body.get("expected_lo")      # type: ignore[attr-defined]
        raise err
    if status < 500:
        raise ProtocolError(f"{where}: {status} {detail}", obj=server)
    raise SparksyncError(f"{where}: the server failed ({status}): {detail}", obj=server)
