"""The device's HTTP side (httpx): the server's address checked, the token read safely, every request
retried when the network or the server fails on the way (each is idempotent), and the server's
``application/problem+json`` answers turned into typed errors.
"""

from __future__ import annotations

import os
import ssl
import stat
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from sparksync import __version__
from sparksync.errors import (
    ConfigurationError,
    ConnectionFailed,
    NotInitialized,
    ProtocolError,
    SparksyncError,
    Unauthorized,
)
from sparksync.web.addresses import is_loopback
from sparksync.web.wire import MEDIA_ARROW, PROTOCOL

TOKEN_ENV = "SPARKSYNC_TOKEN"
RETRIES = 6                    # attempts of one request when the network or the server fails on the way
_BACKOFF = 0.2


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
    """``url`` as the device uses it: https, or http to a loopback address only (a token in the clear)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"--server {url}: not an http(s) URL", obj="server")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ConfigurationError(f"--server {url}: http:// to {parts.hostname} would send the token in the clear; "
                                 "use https:// (http:// only to a loopback address)", obj="server")
    return url.rstrip("/")


class ServerClient:
    """One device's connection to the door."""

    def __init__(self, server: str, token: str, ca_file: str | None = None, timeout: float = 60.0,
                 retries: int = RETRIES):
        verify: Any = True
        if ca_file:
            try:
                verify = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as e:
                raise ConfigurationError(f"--ca-file {ca_file}: {e}", obj=ca_file) from None
        self.server = check_server(server)
        self.retries = retries
        self.http = httpx.Client(base_url=self.server, verify=verify, timeout=timeout, headers={
            "Authorization": f"Bearer {token}", "Sparksync-Protocol": str(PROTOCOL),
            "User-Agent": f"sparksync/{__version__}"})

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        """The request, tried again when the connection fails or the server is unavailable; a refusal
        (4xx) or a server error (500) is a typed error at once."""
        delay = _BACKOFF
        for attempt in range(1, self.retries + 1):
            try:
                response = self.http.request(method, path, **kw)
            except httpx.TransportError as e:
                if attempt == self.retries:
                    raise ConnectionFailed(f"{self.server}: {type(e).__name__}: {_first(e)} (after {attempt} "
                                           "attempts)", obj=self.server) from None
            else:
                if response.status_code not in (502, 503, 504) or attempt == self.retries:
                    return _checked(response, self.server, path)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, **kw) -> dict:
        return self.request(method, path, **kw).json()

    def changes(self, path: str, **kw) -> bytes:
        response = self.request("POST", path, headers={"Accept": MEDIA_ARROW}, **kw)
        return response.content

    def download_file(self, path: str, target: Path) -> None:
        """A snapshot file, resumed where a cut connection stopped it (HTTP Range)."""
        target.parent.mkdir(parents=True, exist_ok=True)
        delay = _BACKOFF
        for attempt in range(1, self.retries + 1):
            have = target.stat().st_size if target.exists() else 0
            headers = {"Range": f"bytes={have}-"} if have else {}
            try:
                with self.http.stream("GET", path, headers=headers) as response:
                    if response.status_code == 416:          # nothing left to read
                        return
                    if response.status_code not in (200, 206):
                        response.read()
                        _checked(response, self.server, path)
                    mode = "ab" if response.status_code == 206 else "wb"
                    with open(target, mode) as fh:
                        for chunk in response.iter_bytes():
                            fh.write(chunk)
                return
            except httpx.TransportError as e:
                if attempt == self.retries:
                    raise ConnectionFailed(f"{self.server}: {type(e).__name__}: {_first(e)} (after {attempt} "
                                           "attempts)", obj=self.server) from None
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def _first(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0][:200]


def _checked(response: httpx.Response, server: str, path: str) -> httpx.Response:
    status = response.status_code
    if status < 400:
        return response
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = str(body.get("detail") or body.get("title") or response.reason_phrase)
    where = f"{server}{path.split('?')[0]}"
    if status == 401:
        raise Unauthorized(f"{server}: the token was refused (wrong, revoked, or of no subscription served there)",
                           obj=server)
    if status == 426:
        raise ProtocolError(f"{server}: {detail}", obj=server)
    if status == 409 and body.get("title") == "not_initialized":
        raise NotInitialized(f"{where}: {detail}", obj=server)
    if status == 409:
        err = ProtocolError(f"{where}: {detail}", obj=server)
        err.expected_lo = body.get("expected_lo")      # type: ignore[attr-defined]
        raise err
    if status < 500:
        raise ProtocolError(f"{where}: {status} {detail}", obj=server)
    raise SparksyncError(f"{where}: the server failed ({status}): {detail}", obj=server)
