"""What every command shares: the config option, the console, progress, and error handling."""

from __future__ import annotations

import datetime as dt
import functools
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..config import DEFAULT_CONFIG, Topology, load_config
from ..errors import ConfigurationError, SparksyncError

console = Console()
err_console = Console(stderr=True)

ConfigOption = Annotated[Path, typer.Option("--config", "-c", help="Topology configuration file (TOML).",
                                            show_default=True)]
DEFAULT_CONFIG_PATH = Path(DEFAULT_CONFIG)


def reporter(message: str) -> None:
    err_console.print(f"[dim]{dt.datetime.now():%H:%M:%S}[/] {message}", highlight=False)


def load(config: Path) -> Topology:
    return load_config(config)


def spark_error_message(exc: BaseException) -> str | None:
    """The useful line of an error that crossed Spark (a Python exception inside a task)."""
    text = str(exc)
    if "Traceback" not in text and "PythonException" not in type(exc).__name__ and "Py4J" not in type(exc).__name__:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(("ValueError:", "sparksync.", "SchemaError", "ConnectionFailed", "RuntimeError:")) or \
                (":" in ln and ln.split(":", 1)[0].endswith(("Error", "Exception")) and " " not in ln.split(":", 1)[0]):
            return ln
    return lines[0] if lines else type(exc).__name__


def handle_errors(fn):
    """Run a command: typed errors become one message and a non-zero exit, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except ConfigurationError as e:
            err_console.print(f"[bold red]error:[/] {e.message}", highlight=False)
            raise typer.Exit(2) from None
        except SparksyncError as e:
            err_console.print(f"[bold red]error:[/] {e.message}", highlight=False)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/]")
            raise typer.Exit(130) from None
        except Exception as e:  # noqa: BLE001
            msg = spark_error_message(e)
            if os.environ.get("SPARKSYNC_DEBUG"):
                raise
            err_console.print(f"[bold red]error:[/] {msg or f'{type(e).__name__}: {e}'}", highlight=False)
            err_console.print("[dim](set SPARKSYNC_DEBUG=1 to see the traceback)[/]")
            raise typer.Exit(1) from None

    return wrapper


def make_spark(topology: Topology):
    def factory():
        reporter(f"starting Spark ({topology.spark_master})")
        from ..spark.session import spark_session

        return spark_session(topology.spark_master, conf=topology.spark.conf)

    return factory


def flush() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
