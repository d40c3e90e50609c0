"""Rendering trigger and function SQL from the per-dialect template files."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

from sparksync.names import quote_ident, quote_literal

_ROOT = Path(__file__).parent
STATEMENT_SEPARATOR = "-- statement"


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_ROOT)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters["q"] = quote_ident
    env.filters["lit"] = quote_literal
    return env


def render(template: str, ctx: dict) -> str:
    return _env().get_template(template).render(**ctx)


def render_statements(template: str, ctx: dict) -> list[str]:
    """Render a template whose statements are separated by ``-- statement`` lines."""
    text = render(template, ctx)
    return [s.strip() for s in text.split(STATEMENT_SEPARATOR) if s.strip()]
