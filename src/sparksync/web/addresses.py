"""Which addresses are loopback: where a token may travel without TLS (the device's ``http://`` to a
local proxy; ``serve`` without a certificate, behind a reverse proxy)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
