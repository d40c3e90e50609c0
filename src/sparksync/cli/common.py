"""What every command shares: the config option, the console, progress, and error handling."""

from __future__ import annotations

import datetime as dt
import functools
import os
import sys
from pathlib import Path
from typing import IO, Annotated, cast

import typer
from rich.align import AlignMethod
from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.style import Style
from rich.text import Text, TextType

from sparksync import api, locks
from sparksync.config import DEFAULT_CONFIG, Topology
from sparksync.errors import ConfigurationError, SparksyncError
from sparksync.redaction import RedactingStream
from sparksync.spark.failures import recover, spark_error_message

WIDE = 10_000       # columns of output that is not a terminal (a log, a pipe, `| less`): a table is as wide
                    # as its content, never cut
RULE_WIDTH = 80     # a section rule's columns there (or its title's, when longer): a line, not WIDE of them


class _Console(Console):
    """rich's console, whose section rules (``rule``) are short lines where the output is not a terminal (its
    width is ``WIDE`` there, and a rule fills the width)."""

    def rule(self, title: TextType = "", *, characters: str = "─", style: str | Style = "rule.line",
             align: AlignMethod = "center") -> None:
        if self.is_terminal:
            super().rule(title, characters=characters, style=style, align=align)
            return
        text = title if isinstance(title, Text) else self.render_str(title)
        width = min(self.width, max(RULE_WIDTH, text.cell_len + 6))      # the title whole, a little line each side
        self.print(Rule(title, characters=characters, style=style, align=align), width=width)


# Everything the CLI prints goes through the redaction: no password reaches a terminal or a log.
# (RedactingStream forwards everything else to the real stream: rich sees a terminal as a terminal.)
# soft_wrap: a message is one line, whatever the width (a log, a pipe)
console = _Console(file=cast(IO[str], RedactingStream(lambda: sys.stdout)), soft_wrap=True)
err_console = _Console(file=cast(IO[str], RedactingStream(lambda: sys.stderr)), stderr=True, soft_wrap=True)

LockTimeoutOption = Annotated[float, typer.Option(
    "--lock-timeout", min=0.0, help="Seconds to wait for a publication's lock held by another command "
    "(0: refuse at once, naming the holder).")]
ConfigOption = Annotated[Path, typer.Option("--config", "-c", help="Topology configuration file (TOML).",
                                            show_default=True)]
DEFAULT_CONFIG_PATH = Path(DEFAULT_CONFIG)
KeyFileOption = Annotated[str | None, typer.Option(
    "--key-file", help="An encrypted device file's passphrase: a file only its owner may read (mode 600).")]
KeyEnvOption = Annotated[str | None, typer.Option(
    "--key-env", metavar="VAR", help="An encrypted device file's passphrase: the environment variable VAR.")]


def device_key(key_file: str | None, key_env: str | None) -> api.KeySource | None:
    """The key source ``--key-file`` or ``--key-env`` names (one of them), or None: a plain file."""
    if key_file and key_env:
        raise typer.BadParameter("give --key-file or --key-env, not both", param_hint="--key-file")
    if key_file:
        return api.key_from_file(key_file)
    return api.key_from_env(key_env) if key_env else None


def reporter(message: str) -> None:
    err_console.print(f"[dim]{dt.datetime.now():%H:%M:%S}[/] {escape(message)}", highlight=False)


def load(config: Path) -> Topology:
    return api.load(config)


# Exit codes by error code: the configuration and the command line are the user's to fix (2, like a
# usage error); everything else that stops a command is 1. Interrupted: 130.
# A lock held by another command past --lock-timeout, a sync server busy at every attempt, or a change capture
# slot other readers kept busy: 75 (EX_TEMPFAIL),
# nothing was done; try later. A server's certificate not verified, or a URL of the wrong scheme: 2 (--ca-file,
# --server).
EXIT_CODES = {"config": 2, "invalid_name": 2, "encryption_key": 2, "tls": 2, "busy": 75, "server_busy": 75,
              "capture_busy": 75}


def exit_code(error: SparksyncError) -> int:
    return EXIT_CODES.get(error.code, 1)


def handle_errors(fn):
    """Run a command: typed errors (raised here or reported by a Spark task) become one message and
    the exit code of their code, never a traceback. A command with a ``lock_timeout`` parameter waits
    that long for a held lock (``locks.waiting``), saying so on stderr."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _fit_output()
        try:
            with locks.waiting(kwargs.get("lock_timeout"), reporter):
                return fn(*args, **kwargs)
        except (typer.Exit, typer.TyperException):
            raise           # a usage error is printed by typer with the command's usage, exit 2
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/]")
            raise typer.Exit(130) from None
        except Exception as e:  # noqa: BLE001
            error = recover(e)
            if error is not None:
                err_console.print(f"[bold red]error:[/] {escape(error.message)}", highlight=False)
                raise typer.Exit(exit_code(error)) from None
            if os.environ.get("SPARKSYNC_DEBUG"):
                raise
            msg = spark_error_message(e)
            err_console.print(f"[bold red]error:[/] {escape(msg or f'{type(e).__name__}: {e}')}", highlight=False)
            err_console.print("[dim](set SPARKSYNC_DEBUG=1 to see the traceback)[/]")
            raise typer.Exit(1) from None

    return wrapper


def _fit_output() -> None:
    """Tables as wide as they need when the output is not a terminal (rich would cut them at 80
    columns; a section rule stays short: ``_Console.rule``); a terminal's own width otherwise."""
    for c in (console, err_console):
        c.width = None if c.is_terminal else WIDE  # type: ignore[assignment]


def check_subscriptions(topology: Topology, names: list[str] | None, kind: str, other_command: str) -> None:
    """Every ``--subscription`` exists and is served by this command (else: which command serves it)."""
    for name in names or []:
        s = topology.subscription(name)
        other = topology.publication(s.publication).kind
        if other != kind:
            raise ConfigurationError(f"subscription {name} belongs to {other} publication {s.publication}; "
                                     f"use 'sparksync {other_command}'", obj=name)


def make_spark(topology: Topology, serving: bool = False):
    def factory():
        reporter(f"starting Spark ({topology.spark_master})")
        from sparksync.spark.session import spark_session

        return spark_session(topology.spark_master, conf=topology.spark.application_conf(serving),
                             executor_wait_s=topology.spark.executor_wait_s, report=reporter)

    return factory


def flush() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
