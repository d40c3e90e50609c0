"""sparksync enroll-token and devices: a fleet of devices that enroll themselves into device groups (the
operator's side; the device's is ``sparksync sync --enroll``)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.table import Table

from sparksync import api
from sparksync.cli.common import (
    DEFAULT_CONFIG_PATH,
    ConfigOption,
    console,
    err_console,
    handle_errors,
    load,
    make_spark,
    reporter,
)
from sparksync.web.device.client import ENROLL_ENV

PAGE = 100


@handle_errors
def enroll_token_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    group: Annotated[str, typer.Option("--group", "-g", help="The device group its devices join.")] = "",
    host_name: Annotated[str | None, typer.Option("--host-name", help="What HOST_NAME() is for its devices: their "
                                                  "partition.")] = None,
    login: Annotated[str | None, typer.Option("--login", help="What SUSER_SNAME() is for its devices.")] = None,
    uses: Annotated[int | None, typer.Option("--uses", min=1, help="How many devices may enroll with it (default: "
                                             "no limit).")] = None,
    expires: Annotated[str | None, typer.Option("--expires", help="How long it may be used: 90s, 15m, 12h, "
                                                "1d (default: until revoked).")] = None,
    no_snapshot: Annotated[bool, typer.Option("--no-snapshot", help="Write no snapshot when the current one does not "
                                              "hold its partition (many secrets, then one 'sparksync snapshot').")
                           ] = False,
    listed: Annotated[bool, typer.Option("--list", help="List the enrollment secrets (never the secrets "
                                                        "themselves).")] = False,
    revoke: Annotated[str | None, typer.Option("--revoke", help="No device enrolls with this secret (its id, "
                                               "or the secret) any more.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output (--list, --revoke).")] = False,
) -> None:
    """Make an enrollment secret of a device group, printed once on stdout (the publisher keeps a salted hash): a
    device enrolls with it once (sparksync sync --enroll) and gets a subscription and a credential of its own."""
    topology = load(config)
    if listed or revoke:
        if listed and revoke:
            raise typer.BadParameter("--list or --revoke, not both", param_hint="--list")
        found = api.enroll_tokens(topology, group or None) if listed else [api.revoke_enroll_token(topology, str(revoke))]
        if as_json:
            console.print_json(json.dumps([k.to_dict() for k in found]))
            return
        t = Table("secret id", "group", "host_name", "login", "used", "expires", "state", box=None)
        for k in found:
            d = k.to_dict()
            t.add_row(k.secret_id, k.group, k.host_name or "", k.login or "",
                      f"{k.used}/{k.uses}" if k.uses is not None else str(k.used), d["expires_at"] or "never",
                      d["state"])
        console.print(t)
        return
    if not group:
        raise typer.BadParameter("name the device group", param_hint="--group")
    secret, kept = api.enroll_token(topology, group, host_name=host_name, login=login, uses=uses, expires=expires,
                                    snapshot=not no_snapshot, spark=make_spark(topology), progress=reporter)
    limit = f"{uses} device(s)" if uses is not None else "any number of devices"
    err_console.print(f"device group {group}: enrollment secret {kept.secret_id} for {limit}"
                      + (f", until {kept.to_dict()['expires_at']}" if kept.expires_at is not None else "")
                      + f" (shown once; a device enrolls with sparksync sync --enroll SECRET, or {ENROLL_ENV}):",
                      highlight=False)
    sys.stdout.write(secret + "\n")          # the one place a secret is written out: not through the redaction
    sys.stdout.flush()


@handle_errors
def devices_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    group: Annotated[str | None, typer.Option("--group", "-g", help="Only this device group's devices.")] = None,
    state: Annotated[str | None, typer.Option("--state", help="Only devices in this state: offline, late, error, "
                                              "diverged, retrying, expired, uninitialized, idle, revoked, removed.")] = None,
    search: Annotated[str | None, typer.Option("--search", help="Only devices whose name, partition or place holds "
                                               "this.")] = None,
    page: Annotated[int, typer.Option("--page", min=1, help=f"The page to show ({PAGE} devices a page).")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    revoke: Annotated[str | None, typer.Option("--revoke", help="Revoke this device: its next request is refused; "
                                               "its metadata goes at the next cleanup.")] = None,
    remove: Annotated[str | None, typer.Option("--remove", help="Remove this device: refused from now on, its "
                                               "registration dropped at the next cleanup.")] = None,
    forget_strays: Annotated[str | None, typer.Option(
        "--forget-strays", help="Forget the files refused as this web subscription's (a copy of its file, a second "
        "file) once they are dealt with: status and the monitor stop naming them.")] = None,
) -> None:
    """The devices enrolled into device groups, each with the state the monitor gives it, worst first (paged)."""
    topology = load(config)
    if sum(x is not None for x in (revoke, remove, forget_strays)) > 1:
        raise typer.BadParameter("--revoke, --remove or --forget-strays, one of them", param_hint="--revoke")
    if forget_strays is not None:
        gone = api.forget_strays(topology, forget_strays)
        for f in gone:
            err_console.print(f"{forget_strays}: forgot the refused file {f['described'] or f['file_id']} ({f['reason']}; "
                              f"{f['attempts']} attempt(s), last at {f['last_seen']}"
                              + (f"; {f['unsent']} change(s) of its own unsent" if f["unsent"] else "") + ")",
                              highlight=False)
        if not gone:
            err_console.print(f"{forget_strays}: no refused file is recorded", highlight=False)
        return
    if revoke or remove:
        done = api.revoke_device(topology, revoke) if revoke else api.remove_device(topology, str(remove))
        err_console.print(f"{done['subscription']}: {done['state']} (refused from its next request; its metadata "
                          "goes at the next 'sparksync cleanup')", highlight=False)
        return
    found = api.devices(topology, group=group, state=state, search=search)      # worst first
    shown = found[(page - 1) * PAGE: page * PAGE]
    if as_json:
        console.print_json(json.dumps(api.device_page(found, page, PAGE)))
        return
    t = Table("device", "group", "partition", "state", "last sync", "why", box=None)
    for d in shown:
        t.add_row(d.name, d.group, d.host_name or d.login or "", d.state, d.last_sync or "never", d.why)
    console.print(t)
    pages = max(1, -(-len(found) // PAGE))
    console.print(f"{len(found)} device(s); page {page} of {pages}", highlight=False)
