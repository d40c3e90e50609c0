"""The CLI run in-process, as a user runs it."""

from __future__ import annotations

from typer.testing import CliRunner

from sparksync.cli.app import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    """``sparksync *args``: its exit code and its output (stdout and stderr, interleaved as a user sees
    them) on one line; never a traceback."""
    result = runner.invoke(app, list(args))
    out = result.output
    assert "Traceback" not in out
    return result.exit_code, " ".join(out.split())
