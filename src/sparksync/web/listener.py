"""The HTTP listeners of ``sparksync serve``, their plumbing written once: the device endpoint (``web/server``) and
the operator's monitor (``monitor/``) answer refusals and failures as ``application/problem+json`` (``problem``),
read a token from a request's ``Authorization`` header (``bearer``, ``basic_password``, compared in constant time
by ``same_secret``), and run as a uvicorn server in a thread of their own (``Listener``: started once it listens,
stopped when asked). A device imports none of this (it needs neither Starlette nor uvicorn).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import threading
import time
from typing import Any

from starlette.responses import JSONResponse

from sparksync.errors import ConfigurationError
from sparksync.redaction import redact


def problem(status: int, title: str, detail: str = "", headers: dict[str, str] | None = None,
            **extra: Any) -> JSONResponse:
    """An ``application/problem+json`` answer (RFC 9457): its detail redacted (no password, no token)."""
    body = {"type": "about:blank", "title": title, "status": status, **({"detail": redact(detail)} if detail else {}),
            **extra}
    return JSONResponse(body, status_code=status, media_type="application/problem+json", headers=headers)


def bearer(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None: another scheme, or none)."""
    kind, _, value = header.partition(" ")
    return value.strip() if kind.lower() == "bearer" else None


def basic_password(header: str) -> str | None:
    """The password of an ``Authorization: Basic`` header (what a browser sends: its user is not read)."""
    kind, _, value = header.partition(" ")
    if kind.lower() != "basic":
        return None
    try:
        return base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[2]
    except (binascii.Error, UnicodeDecodeError):
        return None


def same_secret(sent: str | None, secret: str) -> bool:
    return sent is not None and hmac.compare_digest(sent.encode(), secret.encode())


class Listener:
    """An ASGI app served by uvicorn in a thread of this process (uvicorn installs no signal handler there: the
    service's own handler stops it), on ``host:port``, with TLS when a certificate and its key are given."""

    def __init__(self, app: Any, host: str, port: int, what: str, certfile: str | None = None,
                 keyfile: str | None = None):
        import uvicorn

        self.what = what
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, ssl_certfile=certfile,
                                                    ssl_keyfile=keyfile, log_level="warning", access_log=False,
                                                    lifespan="off", server_header=False))
        self._thread: threading.Thread | None = None

    def start(self, name: str) -> None:
        """Serve from a thread; returns once it listens (``ConfigurationError`` naming ``what``: it did not start)."""
        self._thread = threading.Thread(target=self.server.run, name=name, daemon=True)
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise ConfigurationError(f"{self.what}: the listener did not start (is the address in use?)",
                                         obj=self.what)
            time.sleep(0.02)

    def stop(self, timeout: float | None = 5.0) -> None:
        """Close the listener (the requests in flight finish); waits up to ``timeout`` for its thread."""
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
