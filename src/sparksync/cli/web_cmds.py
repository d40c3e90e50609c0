"""sparksync token, serve and sync: web synchronization (the operator's side and the device's)."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from sparksync import api
from sparksync.cli.common import (
    DEFAULT_CONFIG_PATH,
    ConfigOption,
    KeyEnvOption,
    KeyFileOption,
    device_key,
    err_console,
    handle_errors,
    load,
    make_spark,
    reporter,
)
from sparksync.cli.merge_cmd import keep_running, show_summary
from sparksync.web.device.client import ENROLL_ENV, TOKEN_ENV, read_token
from sparksync.web.device.sync import PER_BATCH


@handle_errors
def token_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    subscription: Annotated[str, typer.Option("--subscription", "-s", help="The web subscription.")] = "",
    rotate: Annotated[bool, typer.Option("--rotate", help="Replace its token by a new one (the old one stops "
                                                          "working at once).")] = False,
    revoke: Annotated[bool, typer.Option("--revoke", help="Remove its token: its device cannot sync.")] = False,
) -> None:
    """Make the token a web subscription's device syncs with, printed once on stdout (the publisher keeps a
    salted hash of it); --rotate replaces it, --revoke removes it."""
    if not subscription:
        raise typer.BadParameter("name the web subscription", param_hint="--subscription")
    if rotate and revoke:
        raise typer.BadParameter("--rotate or --revoke, not both", param_hint="--rotate")
    topology = load(config)
    if revoke:
        n = api.revoke_token(topology, subscription)
        err_console.print(f"subscription {subscription}: {n} token(s) revoked", highlight=False)
        return
    token = api.token(topology, subscription, rotate=rotate)
    err_console.print(f"subscription {subscription}: {'new ' if rotate else ''}token (shown once; give it to the "
                      f"device as {TOKEN_ENV} or in a --token-file readable by its owner only):", highlight=False)
    sys.stdout.write(token + "\n")          # the one place a token is written out: not through the redaction
    sys.stdout.flush()


@handle_errors
def serve_command(config: ConfigOption = DEFAULT_CONFIG_PATH) -> None:
    """Run the service until SIGTERM: every agent on its agent_schedule in one warm Spark session, the operator's
    monitor ([server] monitor: the page, /api, /metrics, /healthz; alerts), and the device endpoint of web
    synchronization ([server] listen) when there are web subscriptions."""
    from sparksync.service.process import OPERATOR_TOKEN_ENV  # the server extra: not on a device

    topology = load(config)
    api.serve(topology, operator_token=os.environ.get(OPERATOR_TOKEN_ENV) or None, spark=make_spark(topology, serving=True),
              progress=reporter)


@handle_errors
def sync_command(
    server: Annotated[str, typer.Option("--server", help="The publisher's sync endpoint (https://HOST:PORT).")] = "",
    subscription: Annotated[str, typer.Option("--subscription", "-s", help="This device's subscription (an enrolled "
                                              "device's file names its own).")] = "",
    database: Annotated[str, typer.Option("--database", help="This device's database: a SQLite file path, or a "
                                                             "sqlite:/// or postgresql:// URL.")] = "",
    token_file: Annotated[str | None, typer.Option("--token-file", help=f"A file holding the token (mode 600); "
                                                                        f"else {TOKEN_ENV}; an enrolled device's "
                                                                        "file keeps its own.")] = None,
    enroll: Annotated[str | None, typer.Option("--enroll", help=f"Enroll this device into a device group with the "
                                               f"operator's enrollment secret (sse_...) or a JWT of the identity "
                                               f"provider the group trusts (or {ENROLL_ENV}), once: it keeps its own "
                                               "credential in its file and later syncs need neither.")] = None,
    ca_file: Annotated[str | None, typer.Option("--ca-file", help="PEM of a private CA the server's certificate "
                                                                  "is signed by.")] = None,
    continuous: Annotated[bool, typer.Option("--continuous", help="Sync again and again.")] = False,
    polling_interval: Annotated[float, typer.Option("--polling-interval", min=0.0,
                                                    help="Seconds between syncs with --continuous.")] = 60.0,
    rounds: Annotated[int, typer.Option("--rounds", min=0, help="With --continuous: stop after N syncs (0 = never).")] = 0,
    generations_per_batch: Annotated[int, typer.Option(
        min=1, max=10_000, help="Generations per upload request and per download batch.")] = PER_BATCH,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable sync summary.")] = False,
    reinitialize: Annotated[bool, typer.Option("--reinitialize", help="Set the device's file aside (kept as "
                                               "<file>.replaced-<time>) and start a new one from the snapshot, "
                                               "under a fresh replica identity: the new file holds the subscription "
                                               "from then on, whichever file held it before.")] = False,
    upload_first: Annotated[bool, typer.Option("--upload-first", help="With --reinitialize: upload the old file's "
                                               "changes first.")] = False,
    recover: Annotated[bool, typer.Option("--recover", help="This file is an older copy of the file that holds "
                                          "the subscription (restored from a backup, the newer file gone): it takes "
                                          "the subscription over, its changes since the copy uploaded.")] = False,
    key_file: KeyFileOption = None,
    key_env: KeyEnvOption = None,
) -> None:
    """On a device: sync its database with the publisher over HTTPS (upload, then download). Needs no Spark
    and no Java."""
    if not database:
        raise typer.BadParameter("required", param_hint="--database")
    secret = enroll or os.environ.get(ENROLL_ENV) or None
    if secret is not None and (subscription or token_file):
        raise typer.BadParameter("an enrolling device gets its subscription and token from the door",
                                 param_hint="--enroll")
    if upload_first and not reinitialize:
        raise typer.BadParameter("goes with --reinitialize", param_hint="--upload-first")
    if recover and (reinitialize or continuous):
        raise typer.BadParameter("--recover is one sync of this file, not with --reinitialize or --continuous",
                                 param_hint="--recover")
    if reinitialize and continuous:
        raise typer.BadParameter("--reinitialize is one sync, not --continuous", param_hint="--reinitialize")
    url = api.database_url(database)
    token = read_token(token_file) if token_file or os.environ.get(TOKEN_ENV) or (subscription and not secret) else None
    device = api.Device(url, server or None, subscription or None, token, ca_file, generations_per_batch,
                        key=device_key(key_file, key_env))
    if secret is not None:
        if not server:
            raise typer.BadParameter("an enrollment needs the server", param_hint="--server")
        device.enroll(secret, sync=False, progress=reporter if not as_json else (lambda m: None))

    def once() -> bool:
        summary = device.sync(reinitialize=reinitialize, upload_first=upload_first, recover=recover,
                              progress=reporter if not as_json else (lambda m: None))
        show_summary(summary, as_json)
        return summary.ok

    if not keep_running(once, continuous, polling_interval, rounds):
        raise typer.Exit(1)
