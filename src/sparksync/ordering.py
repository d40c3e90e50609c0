"""Ordering tables by their foreign keys, parents first (DRI order): used to create, load and apply
the tables of an article set in an order their foreign keys accept (seeds 003/004)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

A = TypeVar("A", bound=Hashable)


def dri_order(articles: Sequence[A], parents_of: Mapping[A, Iterable[A]]) -> list[A]:
    """Articles ordered parents-first; ties (and cycles) keep the order the articles were added in."""
    position = {a: i for i, a in enumerate(articles)}
    parents = {a: {p for p in parents_of.get(a, ()) if p in position and p != a} for a in articles}
    ordered: list[A] = []
    placed: set[A] = set()
    while len(ordered) < len(articles):
        ready = [a for a in articles if a not in placed and parents[a] <= placed]
        if not ready:  # a foreign-key cycle: break it at the earliest-added article
            ready = [min((a for a in articles if a not in placed), key=position.__getitem__)]
        nxt = min(ready, key=position.__getitem__)
        ordered.append(nxt)
        placed.add(nxt)
    return ordered
