"""The ``sparksync`` command.

Each command lives in a module of its own (``COMMANDS``). ``main`` imports only the module of the command it is
asked to run (a device's ``sparksync sync`` does not pay for the publisher's commands); help, an unknown command
and ``app`` (the whole command, for the reference docs and the tests) import them all.
"""

from __future__ import annotations

import importlib
import sys

import typer

# command name -> (module, function), in the order help lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "setup": ("setup_cmd", "setup_command"),
    "snapshot": ("snapshot_cmd", "snapshot_command"),
    "status": ("status_cmd", "status_command"),
    "merge": ("merge_cmd", "merge_command"),
    "conflicts": ("conflicts_cmd", "conflicts_command"),
    "history": ("history_cmd", "history_command"),
    "partitions": ("partitions_cmd", "partitions_command"),
    "validate": ("validate_cmd", "validate_command"),
    "reinit": ("reinit_cmd", "reinit_command"),
    "cleanup": ("cleanup_cmd", "cleanup_command"),
    "logreader": ("transactional_cmds", "logreader_command"),
    "distribute": ("transactional_cmds", "distribute_command"),
    "tracer-token": ("transactional_cmds", "tracer_token_command"),
    "schema-change": ("transactional_cmds", "schema_change_command"),
    "token": ("web_cmds", "token_command"),
    "enroll-token": ("fleet_cmds", "enroll_token_command"),
    "devices": ("fleet_cmds", "devices_command"),
    "serve": ("web_cmds", "serve_command"),
    "sync": ("web_cmds", "sync_command"),
    "outbox": ("outbox_cmd", "outbox_command"),
    "cluster-pack": ("cluster_cmd", "cluster_pack_command"),
    "demo": ("demo_cmd", "demo_command"),
}


def build(names: list[str] | None = None) -> typer.Typer:
    """The command with the subcommands ``names`` (None: every one)."""
    app = typer.Typer(
        name="sparksync",
        help="Merge and transactional replication for SQLite and PostgreSQL, with its data pipeline on Apache Spark.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def _group() -> None:            # one subcommand registered is still a subcommand, not the command itself
        """Merge and transactional replication for SQLite and PostgreSQL, with its data pipeline on Apache Spark."""

    for name in names if names is not None else COMMANDS:
        module, function = COMMANDS[name]
        app.command(name)(getattr(importlib.import_module(f"sparksync.cli.{module}"), function))
    return app


def __getattr__(name: str):
    if name == "app":                # every command, built once
        built = globals()["app"] = build()
        return built
    raise AttributeError(name)


def main() -> None:
    asked = sys.argv[1] if len(sys.argv) > 1 else None
    app = build([asked]) if asked in COMMANDS else build()
    if not sys.stdout.isatty():      # a pipe, a file, a log: plain help, every option name whole (rich's
        app.rich_markup_mode = None  # panels cut names to fit 80 columns)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
