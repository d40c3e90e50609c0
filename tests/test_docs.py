"""The README documents every command and option of the CLI, and both set-up commands."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from sparksync.cli.app import app

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_and_option_is_documented():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    group = typer.main.get_command(app)
    assert hasattr(group, "commands")
    for name, cmd in group.commands.items():
        assert f"sparksync {name}" in readme, f"command {name} is not in the README"
        assert f"**`{name}`**" in readme, f"command {name} has no description in the README"
        for param in cmd.params:
            for opt in param.opts:
                if opt.startswith("--") and opt != "--help":
                    assert opt in readme, f"option {opt} of {name} is not in the README"


def test_readme_gives_the_two_setup_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^make demo\b", readme, re.M) and re.search(r"^make test\b", readme, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_architecture_names_files_that_exist():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    names = set(re.findall(r"`((?:[a-z_]+/)*[a-z_0-9]+\.(?:py|sql|properties))", text))
    assert len(names) > 15
    src = ROOT / "src" / "sparksync"
    missing = [n for n in names if not (src / n).exists() and not (ROOT / n).exists()
               and not list(src.rglob(Path(n).name))]
    assert not missing, f"ARCHITECTURE.md names files that do not exist: {missing}"
