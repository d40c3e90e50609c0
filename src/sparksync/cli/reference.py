"""The CLI reference in docs/cli.md, generated from the typer app (so it cannot drift from it).

``python -m sparksync.cli.reference`` rewrites the generated block of docs/cli.md;
``--check`` exits 1 when the block is not what the app says (``tests/test_docs.py`` checks it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer.main
from typer.core import TyperGroup

from sparksync.cli.app import app

BEGIN = "<!-- BEGIN GENERATED: python -m sparksync.cli.reference -->"
END = "<!-- END GENERATED -->"


def render_reference() -> str:
    """Markdown: every command with its usage, summary and options (as ``--help`` prints them)."""

    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)            # the app has subcommands
    root = typer.Context(group, info_name="sparksync")
    out = []
    for name, cmd in group.commands.items():          # registration order
        ctx = typer.Context(cmd, info_name=name, parent=root)
        summary = " ".join((cmd.help or "").split("\n\n")[0].split())
        out += [f"### `sparksync {name}`", "", summary, "", "| option | |", "|---|---|"]
        for param in cmd.params:
            record = param.get_help_record(ctx)
            if record is None:
                continue
            opts, text = record
            out.append(f"| `{opts}` | {' '.join(text.split()).replace('|', '&#124;')} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def with_reference(doc: str) -> str:
    """``doc`` with its generated block replaced by the current reference."""
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    return doc[:start] + "\n" + render_reference() + doc[end:]


def main(argv: list[str]) -> int:
    path = Path(__file__).resolve().parents[3] / "docs" / "cli.md"
    doc = path.read_text(encoding="utf-8")
    new = with_reference(doc)
    if "--check" in argv:
        if new != doc:
            print(f"{path}: the CLI reference is out of date; run: python -m sparksync.cli.reference")
            return 1
        return 0
    path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
