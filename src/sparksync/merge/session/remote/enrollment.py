"""Enrollment secrets, and the publisher's half of a device's enrollment into a device group (``sparksync
enroll-token`` makes the secrets: ``fleet/enroll.py``; the door's ``enroll`` redeems them: ``redeem``).

A secret is ``sse_<secret_id>_<secret>``: the id finds its row of ``MSweb_enrollments``, the secret is checked
against a salted SHA-256 with a constant-time comparison, as a token is (``web/tokens.py``). The secret is shown
once, when it is made; nothing sparksync writes holds it. It names the partition its devices get (the group's
publication, ``host_name``/``login``), how many devices may enroll with it (``uses``) and until when
(``expires_at``); ``revoke`` ends it at once. Too many wrong secrets for one id lock it for a while
(``LOCKOUT``, ``LOCKED_FOR``).

Redeemed, a secret makes the device's own web subscription, registered at the publisher in the secret's partition
(``redeem``; the door issues its token in the same transaction). A device is named ``<group>-<8 hex digits>``; the
file it enrolled from names it again: the same file enrolling again with the same secret (its first answer lost,
the process killed before it kept its credential) is the same device, given a new credential, no use of the secret
spent. Another file (a wiped or replaced device) is a new device, with a replica identity of its own: never the
old one's watermarks.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from typing import Any, NoReturn

from sparksync.config import DeviceGroupConfig
from sparksync.dialects.replica import Replica
from sparksync.errors import ConfigurationError, EnrollmentRefused, NoSuchPartition, NotInitialized
from sparksync.merge.partitions.evaluation import Partition, partition_values, partitions
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.tracking.articles import published_articles
from sparksync.metadata import store
from sparksync.metadata.records import PublicationRow, SubscriptionRow, SubscriptionStatus
from sparksync.metadata.schema import WEB
from sparksync.progress import Reporter, silent

PREFIX = "sse_"
FORM = re.compile(r"sse_([0-9a-f]{16})_([0-9a-f]{64})")
DUMMY_SALT = "0" * 32
LOCKOUT = 5                                     # wrong secrets for one id before it is locked ...
LOCKED_FOR = dt.timedelta(minutes=15)           # ... for this long
DEVICES = "MSweb_devices"
ENROLLED, REVOKED, REMOVED = "enrolled", "revoked", "removed"     # an enrolled device's states
REFUSED = "enrollment refused: the secret is unknown, used up, expired or revoked; ask the operator for a new one"


@dataclass(frozen=True)
class EnrollmentSecret:
    """What is known of an enrollment secret without the secret (``sparksync enroll-token --list``)."""

    secret_id: str
    group: str
    host_name: str | None
    login: str | None
    partition_id: int | None
    uses: int | None
    used: int
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None
    locked_until: dt.datetime | None
    created_at: dt.datetime

    def refusal(self, now: dt.datetime) -> str | None:
        """Why no device may enroll with it now (revoked, expired, used up, locked), or None."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and aware(self.expires_at) <= now:
            return "expired"
        if self.uses is not None and self.used >= self.uses:
            return "used up"
        if self.locked_until is not None and aware(self.locked_until) > now:
            return "locked"
        return None

    def to_dict(self, now: dt.datetime | None = None) -> dict[str, Any]:
        now = now or store.utcnow()
        return {"secret_id": self.secret_id, "group": self.group, "host_name": self.host_name, "login": self.login,
                "partition_id": self.partition_id, "uses": self.uses, "used": self.used,
                "expires_at": iso(self.expires_at), "revoked_at": iso(self.revoked_at),
                "created_at": iso(self.created_at), "state": self.refusal(now) or "open"}


def aware(t: dt.datetime | str) -> dt.datetime:
    if isinstance(t, str):
        t = dt.datetime.fromisoformat(t)
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def iso(t: dt.datetime | str | None) -> str | None:
    return None if t is None else aware(t).isoformat()


def digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


def of_row(r: dict) -> EnrollmentSecret:
    return EnrollmentSecret(r["secret_id"], r["group_name"], r["host_name"], r["login"], r["partition_id"], r["uses"],
                            int(r["used"]), r["expires_at"], r["revoked_at"], r["locked_until"], r["created_at"])


def create(pub: Replica, group: str, host_name: str | None, login: str | None, partition_id: int | None,
           uses: int | None, expires_at: dt.datetime | None) -> tuple[str, EnrollmentSecret]:
    """A new enrollment secret of ``group`` (inside the caller's transaction): (the secret, what is kept of it)."""
    secret_id, secret, salt = secrets.token_hex(8), secrets.token_hex(32), secrets.token_hex(16)
    row = {"secret_id": secret_id, "group_name": group, "salt": salt, "digest": digest(salt, secret),
           "host_name": host_name, "login": login, "partition_id": partition_id, "uses": uses, "used": 0,
           "expires_at": expires_at, "revoked_at": None, "failures": 0, "locked_until": None,
           "created_at": store.utcnow(), "last_used_at": None}
    store.insert_row(pub, "MSweb_enrollments", row)
    return f"{PREFIX}{secret_id}_{secret}", of_row(row)


def listed(pub: Replica, group: str | None = None) -> list[EnrollmentSecret]:
    if store.table_set_version(pub, WEB) is None:
        return []
    rows = store.select_rows(pub, "MSweb_enrollments", {"group_name": group} if group else None,
                             order_by=("created_at",))
    return [of_row(r) for r in rows]


def revoke(pub: Replica, secret_id: str) -> EnrollmentSecret:
    """``secret_id`` (the public part of a secret, or the whole secret) refused from now on; devices that enrolled
    with it keep syncing (``sparksync devices --revoke`` ends a device)."""
    m = FORM.fullmatch(secret_id)
    sid = m.group(1) if m else secret_id
    with pub.transaction():
        rows = store.select_rows(pub, "MSweb_enrollments", {"secret_id": sid}) \
            if store.table_set_version(pub, WEB) is not None else []
        if not rows:
            raise ConfigurationError(f"no enrollment secret {sid[:40]!r} (sparksync enroll-token --list names them)",
                                     obj=sid[:40])
        if rows[0]["revoked_at"] is None:
            store.update_rows(pub, "MSweb_enrollments", {"revoked_at": store.utcnow()}, {"secret_id": sid})
        return of_row(store.select_rows(pub, "MSweb_enrollments", {"secret_id": sid})[0])


@dataclass(frozen=True)
class Presented:
    """A secret as a device presented it, checked against its row (read in the caller's transaction)."""

    secret_id: str
    row: dict | None             # its row, when the id is known
    matches: bool                # the secret is the row's (constant time; an unknown id costs the same)

    @classmethod
    def check(cls, pub: Replica, secret: str | None) -> Presented:
        m = FORM.fullmatch(secret or "")
        sid, plain = (m.group(1), m.group(2)) if m else ("", "0" * 64)
        rows = store.select_rows(pub, "MSweb_enrollments", {"secret_id": sid}) if m else []
        row = rows[0] if rows else None
        expected = row["digest"] if row else "0" * 64
        ok = hmac.compare_digest(digest(row["salt"] if row else DUMMY_SALT, plain), expected)
        return cls(sid, row, bool(ok and row))


def wrong(pub: Replica, secret_id: str, now: dt.datetime) -> bool:
    """A wrong secret presented for ``secret_id``: counted, and the id locked at ``LOCKOUT`` (inside the caller's
    transaction). True when this attempt locked it."""
    rows = store.select_rows(pub, "MSweb_enrollments", {"secret_id": secret_id})
    if not rows:
        return False
    failures = int(rows[0]["failures"]) + 1
    locked = failures >= LOCKOUT
    store.update_rows(pub, "MSweb_enrollments", {"failures": 0 if locked else failures,
                                                 "locked_until": now + LOCKED_FOR if locked else rows[0]["locked_until"]},
                      {"secret_id": secret_id})
    return locked


def used(pub: Replica, row: dict, now: dt.datetime) -> None:
    """One device enrolled with the secret of ``row`` (inside the caller's transaction, which read it)."""
    store.update_rows(pub, "MSweb_enrollments", {"used": int(row["used"]) + 1, "last_used_at": now},
                      {"secret_id": row["secret_id"]})


@dataclass(frozen=True)
class Enrolled:
    """A device's enrollment as the door answers it (the door issues its token)."""

    subscription: str
    group: str
    again: bool                  # the same file enrolling again: the same device, a new credential


@dataclass(frozen=True)
class Refused:
    """A secret no device may enroll with now; ``wrong``: the id of a known secret presented with a wrong secret
    (counted: ``refuse``)."""

    wrong: str | None = None


def redeem(pub: Replica, groups: Mapping[str, DeviceGroupConfig], configured: Set[str], secret: str | None,
           file_id: str, described: str | None) -> Enrolled | Refused:
    """Redeem ``secret`` for the file ``file_id`` (inside the caller's transaction, which issues the device's token
    before it commits): a new web subscription of the secret's group (one of ``groups``, the configured ones) in its
    partition, named apart from the ``configured`` subscriptions, or the one this file enrolled with it before;
    ``Refused`` when the secret is not one a device may enroll with now (``refuse`` says so)."""
    now = store.utcnow()
    # enrollments one at a time at the publisher (the replica row locked first): nicknames are given in order
    pub.execute(f"UPDATE {pub.meta('MSmerge_replica')} SET max_nickname = max_nickname WHERE id = 1")
    seen = Presented.check(pub, secret)
    if not seen.matches:
        return Refused(seen.secret_id if seen.row is not None else None)
    return _redeem(pub, groups, configured, seen.row or {}, file_id, described, now) or Refused()


def refuse(pub: Replica, refused: Refused, report: Reporter = silent) -> NoReturn:
    """``EnrollmentRefused``, saying nothing of why (the same for every reason), once a wrong secret for a known id
    is counted (in a transaction of its own), the id locked after ``LOCKOUT`` of them (said in the log)."""
    if refused.wrong is not None:
        with pub.transaction():
            locked = wrong(pub, refused.wrong, store.utcnow())
        if locked:
            report(f"enrollment secret {refused.wrong}: {LOCKOUT} wrong secrets presented for it: locked for "
                   f"{int(LOCKED_FOR.total_seconds() // 60)} minutes")
    raise EnrollmentRefused(REFUSED)


def _redeem(pub: Replica, groups: Mapping[str, DeviceGroupConfig], configured: Set[str], row: dict, file_id: str,
            described: str | None, now: dt.datetime) -> Enrolled | None:
    kept = of_row(row)
    group = groups.get(kept.group)
    if group is None:
        return None                      # a group no longer configured: refused as any other secret
    mine = [r for r in store.select_rows(pub, DEVICES, {"secret_id": kept.secret_id, "file_id": file_id})
            if r["state"] == ENROLLED]
    if mine and kept.revoked_at is None:
        return Enrolled(mine[0]["subscription"], group.name, again=True)
    if kept.refusal(now) is not None:
        return None
    prow = publication_of(pub, group)
    return _register(pub, group, prow, configured, kept.host_name, kept.login, kept.partition_id, kept.secret_id,
                     file_id, described, now, lambda: used(pub, row, now))


def redeem_claims(pub: Replica, group: DeviceGroupConfig, configured: Set[str], claims: dict[str, Any],
                  file_id: str, described: str | None) -> Enrolled:
    """A device of a group that trusts an identity provider, its token verified (``web/server/issuers.py``):
    named by its ``sub`` and device claim, in the partition its claims choose (``DeviceGroupConfig.partition_of``),
    which must exist (``NoSuchPartition`` otherwise: made by the operator, so a snapshot holds it). The same claims
    from the same file are the same device; from another file (a wiped device), a new one. Inside the caller's
    transaction, which issues the token."""
    assert group.jwt is not None
    now = store.utcnow()
    pub.execute(f"UPDATE {pub.meta('MSmerge_replica')} SET max_nickname = max_nickname WHERE id = 1")
    who = f"jwt:{claims['sub']}:{claims[group.jwt.device_claim]}"[:500]
    mine = [r for r in store.select_rows(pub, DEVICES, {"secret_id": who, "file_id": file_id}) if r["state"] == ENROLLED]
    if mine:
        return Enrolled(mine[0]["subscription"], group.name, again=True)
    try:
        host_name, login = group.partition_of(claims)
    except KeyError as e:
        raise NoSuchPartition(f"device group {group.name}: the token has no claim {e.args[0]!r}, which its partition "
                              "is made of", obj=group.name) from None
    prow = publication_of(pub, group)
    articles = published_articles(pub, prow.pubid)
    scheme = scheme_of(articles)
    pid = None
    if scheme.filtered:
        values = partition_values(scheme, host_name, login, f"device group {group.name}")
        found = [p for p in partitions(pub, prow.pubid) if p.params == values]
        if not found:
            raise NoSuchPartition(f"device group {group.name}: no partition {Partition(0, host_name, login).describe()} "
                                  "at the publisher; the operator makes it (the publication's partitions, or "
                                  "'sparksync enroll-token --host-name'), then a snapshot", obj=group.name)
        pid = found[0].partition_id
    return _register(pub, group, prow, configured, host_name, login, pid, who, file_id, described, now, lambda: None)


def publication_of(pub: Replica, group: DeviceGroupConfig) -> PublicationRow:
    """The row of the group's publication at the publisher (``NotInitialized`` before ``setup``)."""
    prow = store.select_one(pub, PublicationRow, {"name": group.publication})
    if prow is None:
        raise NotInitialized(f"device group {group.name}: publication {group.publication} is not set up at the "
                             "publisher; run 'sparksync setup'", obj=group.name)
    return prow


def _register(pub: Replica, group: DeviceGroupConfig, prow: PublicationRow, configured: Set[str],
              host_name: str | None, login: str | None, partition_id: int | None, secret_id: str, file_id: str,
              described: str | None, now: dt.datetime, spent: Callable[[], None]) -> Enrolled:
    """The device's own web subscription registered (a replica nickname never given before) and recorded in
    ``MSweb_devices``; ``spent`` counts it against its secret."""
    name = f"{group.name}-{secrets.token_hex(4)}"
    while name in configured or store.select_one(pub, SubscriptionRow, {"pubid": prow.pubid, "name": name}):
        name = f"{group.name}-{secrets.token_hex(4)}"
    nick = store.next_nickname(pub)
    store.note_nickname(pub, nick)
    store.insert(pub, SubscriptionRow.for_subscriber(
        subid=store.new_guid(), pubid=prow.pubid, name=name, replica_id=store.new_guid(), replnickname=nick,
        database_label=f"web:{name}", subscriber_type=2, priority=0.0, host_name=host_name, login=login,
        partition_id=partition_id, status=SubscriptionStatus.CREATED, created_at=now))
    store.insert_row(pub, DEVICES, {
        "subscription": name, "group_name": group.name, "host_name": host_name, "login": login,
        "secret_id": secret_id, "file_id": file_id, "described": (described or "")[:500] or None,
        "state": ENROLLED, "enrolled_at": now, "changed_at": None})
    spent()
    return Enrolled(name, group.name, again=False)


def installed(pub: Replica) -> bool:
    """The publisher has the enrollment tables (web metadata version 4 or later)."""
    v = store.table_set_version(pub, WEB)
    return v is not None and v >= 4
