"""Keeping secrets out of every message, log, status, ``--json`` and history row.

Two rules, applied together by :func:`redact`:

* the password of any URL in the text goes (everything between the first ``:`` of the user
  information and the *last* ``@`` of the authority, so a raw ``@`` or ``:`` in a password is covered),
  and so does any ``password=...`` parameter;
* every secret registered by :func:`register_url` (the passwords of the configured databases, after
  ``${VAR}`` expansion) goes wherever it appears, whole or percent-decoded, even outside a URL;
* the secret part of a device token (``ssk_<id>_<secret>``, ``web/tokens.py``) goes: its id stays, to
  say which token it was.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import unquote

_SECRETS: set[str] = set()
_LOCK = threading.Lock()
_URL_START = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_TOKEN = re.compile(r"\b(ssk_[0-9a-f]{16}_)[0-9A-Za-z]+")
_KEYWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]+)", re.I)
MIN_SECRET = 6          # shorter passwords are redacted where they stand in a URL, not everywhere: as bare
                        # text they would blank out ordinary words ("seconds" for a password "sec")


def url_password(url: str) -> str | None:
    """The password written in a URL's user information (raw, as written), if any."""
    m = _URL_START.match(url)
    if not m:
        return None
    rest = url[m.end():]
    at = rest.rfind("@")
    if at == -1:
        return None
    userinfo = rest[:at]
    return userinfo.split(":", 1)[1] if ":" in userinfo else None


def register_secret(secret: str) -> None:
    """Remember a secret that is not a database password (the operator's token, a webhook URL's path, which
    carries its key): no output shows it."""
    if secret and len(secret) >= MIN_SECRET:
        with _LOCK:
            _SECRETS.add(secret)


def register_webhook(url: str) -> None:
    """A webhook URL's user information, path and query are its credentials (``/services/T0/B0/XXXX``,
    ``?key=...``): only its scheme and host are ever shown."""
    register_url(url)
    m = _URL_START.match(url)
    rest = url[m.end():] if m else url
    cut = min([i for i in (rest.find("/"), rest.find("?")) if i >= 0], default=-1)
    if cut >= 0 and len(rest) - cut > 1:
        register_secret(rest[cut:])


def register_url(url: str) -> None:
    """Remember the secrets of a configured database URL, so no output ever shows them."""
    found = [url_password(url)]
    found += [m.group(2).strip("'") for m in _KEYWORD.finditer(url)]
    with _LOCK:
        for s in found:
            if s and len(s) >= MIN_SECRET:
                _SECRETS.add(s)
                _SECRETS.add(unquote(s))


def _urls(text: str) -> str:
    out, pos = [], 0
    for m in _URL_START.finditer(text):
        if m.start() < pos:
            continue
        start = m.end()
        stop = len(text)
        for sep in (" ", "\n", "\t", "'", '"', ","):
            i = text.find(sep, start)
            if i != -1:
                stop = min(stop, i)
        at = text.rfind("@", start, stop)
        colon = text.find(":", start, at) if at != -1 else -1
        out.append(text[pos:start])
        out.append(text[start:colon + 1] + "***" + text[at:stop] if colon != -1 else text[start:stop])
        pos = stop
    out.append(text[pos:])
    return "".join(out)


def redact(text: str) -> str:
    """``text`` without any password (see the module doc)."""
    if not text:
        return text
    text = _TOKEN.sub(r"\1***", _KEYWORD.sub(r"\1***", _urls(text)))
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for s in secrets:
        if s in text:
            text = text.replace(s, "***")
    return text


class RedactingStream:
    """A text stream that redacts everything written through it (the CLI's consoles write here).
    ``stream`` is a function returning the real stream, looked up at each write (tests swap
    ``sys.stdout``)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, s: str) -> int:
        self._stream().write(redact(s))
        return len(s)

    def __getattr__(self, name):
        return getattr(self._stream(), name)
