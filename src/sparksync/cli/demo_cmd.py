"""sparksync demo"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparksync.cli.common import console, handle_errors, reporter


@handle_errors
def demo_command(
    directory: Annotated[Path, typer.Option("--dir", help="Folder for the demo's databases and config.")] = Path(
        "sparksync-demo"),
) -> None:
    """Build a demo topology on SQLite files (a publisher, three stores) and show it working."""
    from sparksync.cli.demo_scenario import run_demo  # the demo's modules: only when it runs

    result = run_demo(directory, console, reporter)
    if not result.ok:
        raise typer.Exit(1)
