"""The publisher's side of a fleet: device groups' enrollment secrets and the devices enrolled into them
(docs/web-sync.md, "A fleet")."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparksync.api.common import Progress, _said, _spark
from sparksync.config import Topology
from sparksync.dialects import connect
from sparksync.errors import ConfigurationError
from sparksync.merge.session.remote.enrollment import EnrollmentSecret
from sparksync.monitor.devices import EnrolledDevice


def enroll_token(topology: Topology, group: str, *, host_name: str | None = None, login: str | None = None,
                 uses: int | None = None, expires: str | None = None, snapshot: bool = True, spark: Any = None,
                 progress: Progress | None = None) -> tuple[str, EnrollmentSecret]:
    """``sparksync enroll-token``: an enrollment secret of device ``group`` (its only copy: the publisher keeps a
    hash) for devices of partition (``host_name``, ``login``), at most ``uses`` of them (None: no limit), until
    ``expires`` ('1d', '12h'; None: never). The partition is made where it is missing, and a snapshot that holds it
    written where the current one does not (``spark``; not with ``snapshot`` False: many secrets, then one
    ``snapshot``). Returns (the secret, what is kept of it)."""
    from sparksync.fleet.enroll import make_secret
    from sparksync.schedule import parse_interval

    try:
        until = dt.timedelta(seconds=parse_interval(expires)) if expires is not None else None
    except ValueError as e:
        raise ConfigurationError(f"--expires {expires}: {e}", obj="expires") from None
    return make_secret(topology, group, host_name=host_name, login=login, uses=uses, expires=until,
                       snapshot=snapshot, spark=_spark(topology, spark), report=_said(progress))


def enroll_tokens(topology: Topology, group: str | None = None) -> list[EnrollmentSecret]:
    """``sparksync enroll-token --list``: the enrollment secrets (of ``group``), without their secrets."""
    from sparksync.merge.session.remote import enrollment

    if group is not None:
        topology.device_group(group)
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        return enrollment.listed(pub, group)


def revoke_enroll_token(topology: Topology, secret_id: str) -> EnrollmentSecret:
    """``sparksync enroll-token --revoke ID``: no device enrolls with that secret any more (the devices that did
    keep syncing)."""
    from sparksync.merge.session.remote import enrollment

    with connect(topology.publisher_url, topology.publisher.name) as pub:
        return enrollment.revoke(pub, secret_id)


def devices(topology: Topology, *, group: str | None = None, state: str | None = None,
            search: str | None = None) -> list[EnrolledDevice]:
    """``sparksync devices``: the devices enrolled into device groups (of ``group``, in ``state``, whose name,
    partition or place holds ``search``), each with the state the monitor gives it, the worst first."""
    from sparksync.monitor.devices import listing

    return listing(topology, group, state, search)


def revoke_device(topology: Topology, name: str) -> dict[str, Any]:
    """``sparksync devices --revoke NAME``: the device's next request is refused; its metadata goes at the next
    cleanup."""
    from sparksync.fleet.registry import revoke

    return revoke(topology, name)


def remove_device(topology: Topology, name: str) -> dict[str, Any]:
    """``sparksync devices --remove NAME``: the device is refused from now on and its registration dropped at the
    next cleanup."""
    from sparksync.fleet.registry import remove

    return remove(topology, name)


def forget_strays(topology: Topology, name: str) -> list[dict[str, Any]]:
    """``sparksync devices --forget-strays NAME``: the files refused as web subscription ``name``'s (a copy of its file,
    a second file) forgotten once dealt with: ``status`` and the monitor stop naming them. Returns what was recorded
    of them (file_id, described, reason, unsent, attempts, first_seen, last_seen)."""
    from sparksync.fleet import registry

    return registry.forget_strays(topology, name)


def device_page(found: list[EnrolledDevice], page: int = 1, page_size: int = 100) -> dict[str, Any]:
    """One page of ``devices``' list (``page`` from 1) as ``sparksync devices --json`` and the monitor's
    ``/api/devices`` print it: ``{total, page, page_size, states, devices}``, ``states`` counting every state among
    them all."""
    from sparksync.monitor.devices import page_of

    return page_of(found, page, page_size)
