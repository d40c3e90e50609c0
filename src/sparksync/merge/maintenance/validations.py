"""Each subscription's validations, kept at the publisher (``MSmerge_validations``): what ``status``, the
monitor, ``/metrics`` and the alerts say of whether a replica holds its partition.

A validation compares each article's row count and checksum at the subscriber with the publisher's of its
partition (``digest.py``; ``sparksync validate`` with Spark). It is conclusive only when nothing is pending
either way (a difference may otherwise be a change the next sync delivers): then it passed or failed;
else it is inconclusive, says what was pending, and the next one tries again. A failed validation stays
the subscription's last word until one passes (after ``validate --repair``, a reinitialization, or the
sync that delivered what was missing).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from sparksync.dialects.replica import Replica
from sparksync.merge.maintenance.digest import Digest
from sparksync.metadata import store
from sparksync.types import Kind

PASSED, FAILED, INCONCLUSIVE = "passed", "failed", "inconclusive"
KEPT = 20                       # the newest validations kept per subscription


@dataclass
class Validation:
    """One validation of one subscription."""

    subscription: str
    pubid: str
    result: str
    how: str                                                   # schedule | sync | validate
    articles: dict[str, list] = field(default_factory=dict)    # article -> [publisher rows, subscriber rows, same]
    message: str = ""
    seconds: float = 0.0
    validated_at: dt.datetime | None = None

    @property
    def differs(self) -> list[str]:
        return [a for a, (_, _, same) in self.articles.items() if not same]

    def to_dict(self) -> dict[str, Any]:
        return {"result": self.result, "how": self.how, "at": self.validated_at.isoformat() if self.validated_at else None,
                "message": self.message, "articles": self.articles}


def compare(subscription: str, pubid: str, how: str, expected: dict[str, Digest], found: dict[str, Any]) -> Validation:
    """A validation from the publisher's digests (``expected``) and the subscriber's (``found``: article ->
    Digest, or [rows, checksum] as a device sends them)."""
    articles, wrong = {}, []
    for name, want in expected.items():
        got = found.get(name)
        rows, checksum = (got.rows, got.checksum) if isinstance(got, Digest) else (got or [None, None])[:2]
        same = rows == want.rows and str(checksum) == want.checksum
        articles[name] = [want.rows, rows, same]
        if not same:
            wrong.append(f"{name} ({want.rows} row(s) at the publisher, {rows} there"
                         + (", other values" if rows == want.rows else "") + ")")
    extra = sorted(set(found) - set(expected))
    message = ("differs: " + "; ".join(wrong)) if wrong else ""
    if extra:
        message = "; ".join(x for x in (message, f"articles the publication does not have: {', '.join(extra)[:200]}") if x)
    return Validation(subscription, pubid, FAILED if wrong or extra else PASSED, how, articles, message)


def record(pub: Replica, v: Validation) -> None:
    """Keep ``v`` (in the caller's transaction, or one of its own), and only the newest ``KEPT`` of its subscription."""
    with pub.transaction():
        v.validated_at = v.validated_at or store.utcnow()
        store.insert_row(pub, "MSmerge_validations", {
            "subscription": v.subscription, "pubid": v.pubid, "validated_at": v.validated_at, "result": v.result,
            "how": v.how, "articles": v.articles or None, "message": v.message[:2000] or None, "seconds": v.seconds})
        t, p = pub.meta("MSmerge_validations"), pub.p
        old = [r[0] for r in pub.query(f"SELECT validated_at FROM {t} WHERE subscription = {p} AND pubid = "
                                       f"{pub.dialect.uuid_param()} ORDER BY validated_at DESC",
                                       [v.subscription, v.pubid])][KEPT:]
        if old:
            pub.execute(f"DELETE FROM {t} WHERE subscription = {p} AND pubid = {pub.dialect.uuid_param()} AND "
                        f"validated_at <= {p}", [v.subscription, v.pubid, old[0]])


def last(pub: Replica, pubid: str, subscription: str, conclusive: bool = False) -> Validation | None:
    """The subscription's newest validation (``conclusive``: the newest that passed or failed)."""
    if not pub.dialect.metadata_table_exists(pub, "MSmerge_validations"):
        return None
    rows = [r for r in store.select_rows(pub, "MSmerge_validations", {"subscription": subscription, "pubid": pubid})
            if not conclusive or r["result"] != INCONCLUSIVE]
    if not rows:
        return None
    return _validation(max(rows, key=lambda x: x["validated_at"]))


def _validation(r: dict[str, Any]) -> Validation:
    return Validation(r["subscription"], str(r["pubid"]), r["result"], r["how"], _articles(r["articles"]),
                      r["message"] or "", float(r["seconds"] or 0), r["validated_at"])


def _articles(value: Any) -> dict[str, list]:
    """A validation's articles as read (a JSON text held as a JSON string: read again)."""
    return json.loads(value) if isinstance(value, str) else (value or {})


def latest(pub: Replica, pubid: str) -> dict[str, Validation]:
    """Every subscription's newest validation in the publication (by name), in one query whatever their number
    (``status`` of a fleet): ``last`` of each."""
    if not pub.dialect.metadata_table_exists(pub, "MSmerge_validations"):
        return {}
    t, subs, u = pub.meta("MSmerge_validations"), pub.meta("sysmergesubscriptions"), pub.dialect.uuid_param()
    read = ", ".join("v." + pub.dialect.quote(c) for c in
                     ("subscription", "result", "how", "articles", "message", "seconds", "validated_at"))
    if pub.dialect.capabilities.lateral_joins:       # one probe of the key's index a subscription
        rows = pub.query(f"SELECT {read} FROM {subs} r CROSS JOIN LATERAL (SELECT * FROM {t} w WHERE w.subscription "
                         f"= r.name AND w.pubid = r.pubid ORDER BY w.validated_at DESC LIMIT 1) v WHERE r.pubid = {u}",
                         [pubid])
    else:
        rows = pub.query(f"SELECT {read} FROM (SELECT r.name, (SELECT max(w.validated_at) FROM {t} w WHERE "
                         f"w.subscription = r.name AND w.pubid = r.pubid) AS at FROM {subs} r WHERE r.pubid = {u}) n "
                         f"JOIN {t} v ON v.subscription = n.name AND v.pubid = {u} AND v.validated_at = n.at",
                         [pubid, pubid])
    return {name: Validation(name, pubid, result, how, _articles(store.from_db(Kind.JSON, articles)), message or "",
                             float(seconds or 0), store.from_db(Kind.TIMESTAMPTZ, at))
            for name, result, how, articles, message, seconds, at in rows}
