"""The identity providers device groups trust (``[device_groups.jwt]``): a device exchanges a JWT its application's
sign-in got from the provider for its own credential, once (``Door.enroll``; docs/web-sync.md, "A fleet").

A token is verified by PyJWT, never by hand: its signature with the issuer's public keys (a PEM file or a JWKS
document, read at start and again whenever the file changes; nothing is fetched over the network), only with the
group's algorithms (RS256, ES256, EdDSA: never ``none``, never an HMAC, so a public key can never be used as an HMAC
secret), ``iss`` and ``aud`` the group's, ``exp`` required and ``nbf`` honoured with the group's leeway, ``sub`` and
the device claim present. Every failure is the same ``EnrollmentRefused``: the caller learns nothing more.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from sparksync.config import DeviceGroupConfig, Topology
from sparksync.errors import ConfigurationError, EnrollmentRefused

REFUSED = "enrollment refused: the token was not accepted"
log = logging.getLogger("sparksync.serve")


class Issuer:
    """One device group's identity provider: its keys, kept current with their file."""

    def __init__(self, group: DeviceGroupConfig, path: str):
        assert group.jwt is not None
        self.group, self.trust, self.path = group, group.jwt, path
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None
        self._keys: dict[str | None, Any] = {}
        self._load(initial=True)

    def _load(self, initial: bool = False) -> None:
        try:
            st = os.stat(self.path)
            seen = (st.st_mtime_ns, st.st_size)
            if seen == self._seen:
                return
            with open(self.path, "rb") as f:
                data = f.read(1 << 20)
            keys = _keys_of(data)
        except (OSError, ValueError, jwt.PyJWTError) as e:
            message = f"device group {self.group.name}: the issuer's keys {self.path} cannot be read ({e})"
            if initial:
                raise ConfigurationError(message, obj=self.group.name) from None
            log.warning("%s; the keys read before are kept", message)
            return
        with self._lock:
            self._keys, self._seen = keys, seen

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, once verified; ``EnrollmentRefused`` (saying nothing of why) otherwise."""
        self._load()
        t = self.trust
        try:
            header = jwt.get_unverified_header(token)
            with self._lock:
                key = self._keys.get(header.get("kid")) or (next(iter(self._keys.values())) if len(self._keys) == 1
                                                             else None)
            if key is None:
                raise EnrollmentRefused(REFUSED)
            claims = jwt.decode(token, key, algorithms=list(t.algorithms), audience=t.audience, issuer=t.issuer,
                                leeway=t.leeway_s, options={"require": ["exp", "iss", "aud", "sub"]})
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            raise EnrollmentRefused(REFUSED) from None
        device = claims.get(t.device_claim)
        if not isinstance(claims.get("sub"), str) or not isinstance(device, str | int) or isinstance(device, bool):
            raise EnrollmentRefused(REFUSED)
        return claims


def _keys_of(data: bytes) -> dict[str | None, Any]:
    """The public keys of a JWKS document (by ``kid``) or of a PEM file (one key, no ``kid``)."""
    text = data.decode("utf-8").strip()
    if text.startswith("{"):
        keys = jwt.PyJWKSet.from_dict(json.loads(text)).keys
        return {k.key_id: k.key for k in keys}
    return {None: load_pem_public_key(data)}


def issuers(topology: Topology) -> dict[str, Issuer]:
    """The issuers of the device groups that trust one, by group (their keys read now: a file that cannot be read
    stops ``serve`` with one message naming it)."""
    return {g.name: Issuer(g, topology.resolve_path(g.jwt.keys)) for g in topology.device_groups if g.jwt is not None}


def issuer_of(found: dict[str, Issuer], token: str) -> Issuer:
    """The issuer whose group the token is for: its (unverified) ``iss`` and ``aud`` are one group's (the group's
    keys then verify it)."""
    try:
        said = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise EnrollmentRefused(REFUSED) from None
    aud = said.get("aud")
    auds = set(aud) if isinstance(aud, list) else {aud}
    for i in found.values():
        if said.get("iss") == i.trust.issuer and i.trust.audience in auds:
            return i
    raise EnrollmentRefused(REFUSED)
