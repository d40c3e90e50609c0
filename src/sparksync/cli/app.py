"""The ``sparksync`` command."""

from __future__ import annotations

import sys

import typer

from sparksync.cli.cleanup_cmd import cleanup_command
from sparksync.cli.cluster_cmd import cluster_pack_command
from sparksync.cli.conflicts_cmd import conflicts_command
from sparksync.cli.demo_cmd import demo_command
from sparksync.cli.fleet_cmds import devices_command, enroll_token_command
from sparksync.cli.history_cmd import history_command
from sparksync.cli.merge_cmd import merge_command
from sparksync.cli.outbox_cmd import outbox_command
from sparksync.cli.partitions_cmd import partitions_command
from sparksync.cli.reinit_cmd import reinit_command
from sparksync.cli.setup_cmd import setup_command
from sparksync.cli.snapshot_cmd import snapshot_command
from sparksync.cli.status_cmd import status_command
from sparksync.cli.transactional_cmds import (
    distribute_command,
    logreader_command,
    schema_change_command,
    tracer_token_command,
)
from sparksync.cli.validate_cmd import validate_command
from sparksync.cli.web_cmds import serve_command, sync_command, token_command

app = typer.Typer(
    name="sparksync",
    help="Merge and transactional replication for SQLite and PostgreSQL, with its data pipeline on Apache Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("setup")(setup_command)
app.command("snapshot")(snapshot_command)
app.command("status")(status_command)
app.command("merge")(merge_command)
app.command("conflicts")(conflicts_command)
app.command("history")(history_command)
app.command("partitions")(partitions_command)
app.command("validate")(validate_command)
app.command("reinit")(reinit_command)
app.command("cleanup")(cleanup_command)
app.command("logreader")(logreader_command)
app.command("distribute")(distribute_command)
app.command("tracer-token")(tracer_token_command)
app.command("schema-change")(schema_change_command)
app.command("token")(token_command)
app.command("enroll-token")(enroll_token_command)
app.command("devices")(devices_command)
app.command("serve")(serve_command)
app.command("sync")(sync_command)
app.command("outbox")(outbox_command)
app.command("cluster-pack")(cluster_pack_command)
app.command("demo")(demo_command)


def main() -> None:
    if not sys.stdout.isatty():      # a pipe, a file, a log: plain help, every option name whole (rich's
        app.rich_markup_mode = None  # panels cut names to fit 80 columns)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
