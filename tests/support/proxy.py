"""TCP proxies between devices and doors: one that cuts connections at random byte counts (a bad network), and
one that balances connections over several doors (a load balancer).

Each connection is cut, with probability ``p``, after a random number of bytes (in either direction,
so a request can be cut on its way up and a reply after the server committed); the others pass whole.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading


class CuttingProxy:
    def __init__(self, target_port: int, p: float, seed: int, max_bytes: int = 4000):
        self.target_port, self.p, self.max_bytes = target_port, p, max_bytes
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.connections = 0
        self.cuts = 0
        self._open: set = set()              # the close of each connection piped now
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop = True
        self.sock.close()

    def cut_open(self) -> None:
        """Every connection piped now closed at both ends (a client's next request opens a new one)."""
        with self.lock:
            closes = list(self._open)
        for close in closes:
            close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                budget = self.rng.randint(1, self.max_bytes) if self.rng.random() < self.p else None
            threading.Thread(target=self._serve, args=(client, budget), daemon=True).start()

    def _upstream(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.target_port))

    def _serve(self, client: socket.socket, budget: int | None) -> None:
        try:
            upstream = self._upstream()
        except OSError:
            client.close()
            return
        state = {"left": budget, "closed": False}
        guard = threading.Lock()

        def close() -> None:
            with guard:
                if state["closed"]:
                    return
                state["closed"] = True
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self.lock:
                self._open.discard(close)

        with self.lock:
            self._open.add(close)

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            try:
                while True:
                    data = src.recv(1024)
                    if not data:
                        break
                    with guard:
                        left = state["left"]
                        if left is not None:
                            if len(data) >= left:
                                data = data[:left]
                                state["left"] = 0
                            else:
                                state["left"] = left - len(data)
                    if data:
                        dst.sendall(data)
                    if state["left"] == 0:
                        with self.lock:
                            self.cuts += 1
                        break
            except OSError:
                pass
            close()

        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)


class BalancingProxy(CuttingProxy):
    """Each new connection to the next door in turn, past a door that refuses connections (a door that died is
    left out, as a load balancer's health check would): several ``serve`` processes behind one address."""

    def __init__(self, ports: list[int]):
        super().__init__(ports[0], 0.0, 0)
        self.ports = ports
        self.served: dict[int, int] = dict.fromkeys(ports, 0)       # door port -> connections it was given
        self._next = 0

    def _upstream(self) -> socket.socket:
        for _ in range(len(self.ports)):
            with self.lock:
                port = self.ports[self._next % len(self.ports)]
                self._next += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", port))
            except OSError:
                continue
            with self.lock:
                self.served[port] += 1
            return upstream
        raise OSError("no door answers")
