"""A fake clock for merge metadata: time passes by moving every time the replicas recorded back."""

from __future__ import annotations

from sparksync.dialects import connect
from sparksync.metadata.schema import MERGE
from sparksync.types import Kind


def advance(urls: list[str], days: float) -> None:
    """The fake clock: every time recorded in the replicas' merge metadata moves ``days`` back."""
    for url in urls:
        with connect(url) as r, r.transaction():
            for table in MERGE.tables:
                stamps = [c.name for c in table.columns if c.type.kind is Kind.TIMESTAMPTZ]
                if not stamps or not r.dialect.metadata_table_exists(r, table.name):
                    continue
                if r.dialect.capabilities.name == "postgresql":
                    moved = [f"{r.dialect.quote(c)} = {r.dialect.quote(c)} - interval '{float(days)} days'" for c in stamps]
                else:                    # ISO text, as the SQLite dialect stores it
                    moved = [f"{q} = strftime('%Y-%m-%d %H:%M:%f', {q}, '-{float(days)} days') || '+00:00'"
                             for q in map(r.dialect.quote, stamps)]
                r.execute(f"UPDATE {r.meta(table.name)} SET {', '.join(moved)}")
