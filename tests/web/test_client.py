"""The device's HTTP client against small real servers made here (http.server, or uvicorn with Starlette, in a
thread; TLS with a self-signed certificate made by the ``openssl`` command): what retrying cannot mend is said
at once, in one line naming the server and what to do; a busy server's ``Retry-After`` is waited for; a user or
password in the server's URL is refused before anything is sent. No database, no Spark: seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from sparksync.errors import ConfigurationError, TlsError
from sparksync.web.device.client import RETRIES, RETRY_AFTER_MAX, ServerClient, retry_after
from tests.support.web import EXE, free_port

TOKEN = "ssk_0123456789abcdef_Zq8TokenSecretPartXv41"
HELLO = (200, {"Content-Type": "application/json"}, json.dumps({"subscription": "Till"}).encode())
CUT = "cut"                 # a reply: the connection closed without an answer
BACKOFF_SUM = 0.2 + 0.4 + 0.8 + 1.6 + 3.2      # what today's five waits between six attempts add up to


def _busy(status: int, after: str) -> tuple[int, dict, bytes]:
    return (status, {"Retry-After": after, "Content-Type": "application/problem+json"},
            json.dumps({"title": "busy", "detail": "the server works on 8 requests at once"}).encode())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Stub

    def do_GET(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reply = self.server.next_reply(self.path)
        if reply == CUT:
            self.close_connection = True
            return
        status, headers, body = reply
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_GET

    def log_message(self, *args) -> None:
        pass


class Stub(ThreadingHTTPServer):
    """An HTTP server (TLS with ``tls``) in a thread of the test: each request gets the next of ``replies`` (the
    last one again once they run out). It counts the connections it accepts (a TLS handshake that fails
    included) and notes when each request came."""

    daemon_threads = True

    def __init__(self, replies: list, tls: ssl.SSLContext | None = None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies, self.tls = list(replies), tls
        self.connections = 0
        self.requests: list[tuple[float, str]] = []
        self.lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def next_reply(self, path: str):
        with self.lock:
            self.requests.append((time.monotonic(), path))
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def get_request(self):
        sock, addr = self.socket.accept()
        with self.lock:
            self.connections += 1
        if self.tls is None:
            return sock, addr
        sock.settimeout(5)
        try:
            return self.tls.wrap_socket(sock, server_side=True), addr
        except OSError:                 # the handshake failed: the connection is dropped
            sock.close()
            raise

    def __enter__(self) -> Stub:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key."""
    folder = tmp_path_factory.mktemp("tls")
    crt, key = folder / "server.pem", folder / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return crt, key


@pytest.fixture
def tls(cert) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*cert)
    return context


def sync(tmp_path: Path, server: str, *args: str) -> subprocess.CompletedProcess:
    """``sparksync sync`` against ``server``, in a process of its own."""
    env = {k: v for k, v in os.environ.items() if k != "SPARKSYNC_FAILPOINTS"} | {"SPARKSYNC_TOKEN": TOKEN}
    return subprocess.run([EXE, "sync", "--server", server, "--subscription", "Till", "--database",
                           str(tmp_path / "till.db"), *args], capture_output=True, text=True, env=env, timeout=120)


def _one_error(p: subprocess.CompletedProcess) -> str:
    """The process's one line of error, checked: nothing on stdout, no traceback, no token."""
    assert p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    assert TOKEN.rsplit("_", 1)[1] not in p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


# -- TLS: what retrying cannot mend is said at once --------------------------------------------------
def test_a_certificate_that_cannot_be_verified_is_said_at_once_with_what_to_do(tmp_path, tls, cert):
    """A self-signed server without --ca-file: one attempt, one line naming the server and --ca-file, exit 2;
    with --ca-file the same server answers (the refusal is the verification's)."""
    with Stub([HELLO], tls) as stub:
        server = f"https://{stub.address}"
        t0 = time.monotonic()
        p = sync(tmp_path, server)
        line = _one_error(p)
        assert p.returncode == 2, p.stderr
        assert f"{server}: the server's certificate could not be verified (self-signed certificate)" in line
        assert "pass --ca-file" in line
        assert stub.connections == 1 and stub.requests == [], "tried again"
        assert time.monotonic() - t0 < BACKOFF_SUM
        with ServerClient(server, TOKEN, ca_file=str(cert[0])) as client:
            assert client.json("GET", "/v1/sync/hello") == {"subscription": "Till"}


def test_https_to_a_plain_http_port_is_said_at_once(tmp_path):
    with Stub([HELLO]) as stub, ServerClient(f"https://{stub.address}", TOKEN) as client:
        with pytest.raises(TlsError, match=r"the TLS handshake failed \(wrong version number\): the port may not "
                                           r"speak TLS"):
            client.json("GET", "/v1/sync/hello")
        assert stub.connections == 1


@contextlib.contextmanager
def _uvicorn_tls(cert: tuple[Path, Path]) -> Iterator[str]:
    """The stack ``sparksync serve`` runs (uvicorn, Starlette) with TLS, in a thread: its address."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def hello(request):
        return JSONResponse({"subscription": "Till"})

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/v1/sync/hello", hello)]), host="127.0.0.1",
                                           port=port, ssl_certfile=str(cert[0]), ssl_keyfile=str(cert[1]),
                                           log_level="critical", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize("stack", ["uvicorn", "http.server"])
def test_http_to_a_tls_port_says_to_use_https_at_once(stack, tls, cert):
    """uvicorn closes a connection that is not TLS without a word (``Server disconnected``), http.server resets
    it: either way the device finds the port speaks TLS and says so, instead of six attempts."""
    with contextlib.ExitStack() as running:
        stub = running.enter_context(Stub([HELLO], tls)) if stack == "http.server" else None
        address = stub.address if stub else running.enter_context(_uvicorn_tls(cert))
        t0 = time.monotonic()
        with ServerClient(f"http://{address}", TOKEN) as client, pytest.raises(TlsError) as raised:
            client.json("GET", "/v1/sync/hello")
        assert raised.value.message == (f"http://{address}: the server did not answer HTTP: it speaks TLS on this port; "
                                        f"use https://{address}")
        assert time.monotonic() - t0 < BACKOFF_SUM
        if stub:
            assert stub.connections == 2 and stub.requests == []        # the request, and the look at the port


def test_a_connection_cut_on_the_way_is_still_tried_again():
    """What the look at the port must not change: a plain HTTP server that closes a connection without an
    answer (a network cut, a restart) is asked again."""
    with Stub([CUT, HELLO]) as stub, ServerClient(f"http://{stub.address}", TOKEN) as client:
        assert client.json("GET", "/v1/sync/hello") == {"subscription": "Till"}
        assert len(stub.requests) == 2


# -- credentials in the URL ------------------------------------------------------------------------
def test_a_user_or_password_in_the_server_url_is_refused_before_anything_is_sent(tmp_path):
    password = "Pw4TheProxyOnly91"
    with Stub([(401, {"Content-Type": "application/problem+json"}, b'{"title": "unauthorized"}')]) as stub:
        p = sync(tmp_path, f"http://till7:{password}@{stub.address}/")
        line = _one_error(p)
        assert p.returncode == 2, p.stderr
        assert line == (f"error: --server http://{stub.address}/: the URL holds a user or password; the device "
                        "authenticates with its token only (SPARKSYNC_TOKEN or --token-file): remove the "
                        "'user:password@' part")
        assert password not in p.stderr + p.stdout and "till7" not in p.stderr
        assert stub.connections == 0


# -- a busy server ---------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [429, 503])
def test_a_busy_server_is_asked_again_after_the_time_its_retry_after_says(status):
    with Stub([_busy(status, "1"), HELLO]) as stub, ServerClient(f"http://{stub.address}", TOKEN) as client:
        assert client.json("GET", "/v1/sync/hello") == {"subscription": "Till"}
        (first, _), (second, _) = stub.requests
        assert second - first >= 0.95          # its Retry-After, not the first backoff (0.2 s)


def test_a_server_busy_at_every_attempt_is_one_clear_error(tmp_path):
    """Every attempt answered 429: the device asks RETRIES times in all, then says the server is busy, exit 75."""
    with Stub([_busy(429, "0")]) as stub:
        p = sync(tmp_path, f"http://{stub.address}")
        line = _one_error(p)
        assert p.returncode == 75, p.stderr
        assert line == (f"error: http://{stub.address}: the server is busy (429 Too Many Requests, after {RETRIES} "
                        "attempts); try again later")
        assert len(stub.requests) == RETRIES


def test_retry_after_is_read_as_seconds_or_a_date_and_capped():
    def asked(value: str | None) -> float | None:
        return retry_after(httpx.Response(429, headers={} if value is None else {"Retry-After": value}))

    assert asked("2") == 2.0 and asked(" 0 ") == 0.0
    assert asked("3600") == RETRY_AFTER_MAX
    assert asked("-5") == 0.0
    assert asked("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0                  # a date gone by: now
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 20))
    assert 15 <= (asked(future) or 0) <= 20
    assert asked(None) is None and asked("soon") is None and asked("nan") is None



def test_the_trusted_authorities_are_loaded_once_a_process(monkeypatch):
    """Loading the CA bundle costs more than a small sync's requests: every client of the process shares it."""
    from sparksync.web.device import client

    loaded: list[ssl.SSLContext] = []
    load = httpx.create_ssl_context
    monkeypatch.setattr(client.httpx, "create_ssl_context", lambda: loaded.append(load()) or loaded[-1])
    client._trusted.cache_clear()
    try:
        clients = [ServerClient("http://127.0.0.1:9", TOKEN) for _ in range(3)]
        for c in clients:
            c.close()
    finally:
        client._trusted.cache_clear()
    assert len(loaded) == 1


def test_a_download_that_cannot_be_written_to_disk_is_one_clear_error_naming_the_folder(tmp_path):
    class Full:
        """A temporary file on a full disk."""

        def seek(self, *a): return 0

        def truncate(self, *a): return 0

        def flush(self): pass

        def write(self, data):
            raise OSError(28, "No space left on device")

    frames = (200, {"Content-Type": "application/vnd.apache.arrow.stream"}, b"SSW2" + b"\0" * 64)
    with Stub([frames]) as stub, ServerClient(f"http://{stub.address}", TOKEN, retries=2) as client:
        with pytest.raises(ConfigurationError, match="No space left on device") as e:
            client.changes_into("/v1/sync/download", Full(), json={})
    assert "TMPDIR" in e.value.message and TOKEN not in e.value.message
    assert len(stub.requests) == 1, "a full disk is not retried"
