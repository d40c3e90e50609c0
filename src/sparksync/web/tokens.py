"""Device tokens: one subscription each, kept at the publisher as a salted SHA-256 of the secret.

A token is ``ssk_<token_id>_<secret>``: the id finds the row, the secret is checked against its digest
with a constant-time comparison. The token is shown once, when it is made (``sparksync token``);
nothing that sparksync writes (output, logs, history, errors) ever holds it. ``--rotate`` replaces a
subscription's tokens by a new one at once; ``--revoke`` removes them.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, Unauthorized
from sparksync.metadata import store
from sparksync.metadata.schema import WEB

PREFIX = "ssk_"
_FORM = re.compile(r"ssk_([0-9a-f]{16})_([0-9a-f]{64})")
_DUMMY_SALT = "0" * 32


@dataclass(frozen=True)
class TokenInfo:
    """What is known of a token without its secret (``sparksync token --list``)."""

    token_id: str
    subscription: str
    created_at: object
    last_used_at: object


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


def install(pub: Replica) -> None:
    """The token table at the publisher (idempotent; inside the caller's transaction)."""
    store.install_table_set(pub, WEB)


def create(pub: Replica, subscription: str, rotate: bool = False) -> str:
    """A new token for ``subscription``; returns it (the only time it exists outside the device).
    Without ``rotate`` a subscription that has a token keeps it and this refuses."""
    with pub.transaction():
        install(pub)
        return issue(pub, subscription, rotate)


def issue(pub: Replica, subscription: str, rotate: bool = False) -> str:
    """``create`` inside the caller's transaction, the tables installed (an enrollment: ``fleet/enroll.py``)."""
    with pub.transaction():
        held = store.select_rows(pub, "MSweb_tokens", {"subscription": subscription})
        if held and not rotate:
            raise ConfigurationError(f"subscription {subscription} already has a token; use --rotate to replace it "
                                     "or --revoke to remove it", obj=subscription)
        for row in held:
            store.delete_rows(pub, "MSweb_tokens", {"token_id": row["token_id"]})
        token_id, secret, salt = secrets.token_hex(8), secrets.token_hex(32), secrets.token_hex(16)
        store.insert_row(pub, "MSweb_tokens", {"token_id": token_id, "subscription": subscription, "salt": salt,
                                               "digest": _digest(salt, secret), "created_at": store.utcnow(),
                                               "last_used_at": None})
    return f"{PREFIX}{token_id}_{secret}"


def revoke(pub: Replica, subscription: str) -> int:
    """Remove every token of ``subscription``; how many there were."""
    with pub.transaction():
        install(pub)
        held = store.select_rows(pub, "MSweb_tokens", {"subscription": subscription})
        for row in held:
            store.delete_rows(pub, "MSweb_tokens", {"token_id": row["token_id"]})
    return len(held)


def listed(pub: Replica) -> list[TokenInfo]:
    with pub.transaction():
        install(pub)
        rows = store.select_rows(pub, "MSweb_tokens")
    return [TokenInfo(r["token_id"], r["subscription"], r["created_at"], r["last_used_at"]) for r in rows]


def authenticate(pub: Replica, token: str | None) -> str:
    """The subscription ``token`` belongs to; ``Unauthorized`` (saying nothing more) otherwise. The
    secret is compared in constant time, and a token of an unknown id costs the same comparison."""
    return authenticate_holding(pub, token).subscription


@dataclass(frozen=True)
class Bearer:
    """Who a token authenticated: its subscription, the row of ``MSweb_holders`` for it ((file_id, epoch, described,
    held_since, seen_at), or None while no file holds it: ``merge/session/remote/holders.py``) and, for a device
    enrolled into a device group, its row of ``MSweb_devices`` ((group, host_name, login, state): ``fleet/``)."""

    subscription: str
    held: tuple | None
    enrolled: tuple | None


def authenticate_holding(pub: Replica, token: str | None) -> Bearer:
    """``authenticate``, and read in the same query (one round trip per device request) what the door needs of the
    token's subscription (``Bearer``)."""
    m = _FORM.fullmatch(token or "")
    token_id, secret = (m.group(1), m.group(2)) if m else ("", "0" * 64)
    row = pub.query_one(f"SELECT t.salt, t.digest, t.subscription, h.file_id, h.epoch, h.described, h.held_since, "
                        f"h.seen_at, d.group_name, d.host_name, d.login, d.state FROM {pub.meta('MSweb_tokens')} t "
                        f"LEFT JOIN {pub.meta('MSweb_holders')} h ON h.subscription = t.subscription "
                        f"LEFT JOIN {pub.meta('MSweb_devices')} d ON d.subscription = t.subscription "
                        f"WHERE t.token_id = {pub.p}", [token_id]) if m else None
    salt, expected = (row[0], row[1]) if row else (_DUMMY_SALT, "0" * 64)
    ok = hmac.compare_digest(_digest(salt, secret), expected)
    if not (ok and row):
        raise Unauthorized("unauthorized")
    return Bearer(str(row[2]), tuple(row[3:8]) if row[3] is not None else None,
                  tuple(row[8:12]) if row[8] is not None else None)
