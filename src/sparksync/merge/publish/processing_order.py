"""Article nicknames and processing groups (seeds 003 and 004). Pure functions, no database.

* A table referenced by a foreign key gets a lower nickname than the table referencing it.
* Tables with no DRI get nicknames in the order they were added.
* Group 1: articles not involved in join filters and not related through DRI to join-filter articles.
  Group 2: join-filter articles and the articles related to them through DRI.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

from sparksync.ordering import dri_order

A = TypeVar("A", bound=Hashable)   # an article: its name, or its id

NICKNAME_STEP = 10  # gaps let a parent published later slot in before its existing children


def dri_edges(parents_of: Mapping[str, Iterable[str]]) -> set[tuple[str, str]]:
    """(parent, child) pairs between distinct articles."""
    return {(p, c) for c, ps in parents_of.items() for p in ps if p != c and p in parents_of}


def _reach(start: str, step: Mapping[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(step.get(start, ()))
    while stack:
        x = stack.pop()
        if x not in seen:
            seen.add(x)
            stack.extend(step.get(x, ()))
    seen.discard(start)
    return seen


def assign_nicknames(articles: Sequence[str], parents_of: Mapping[str, Iterable[str]],
                     existing: Mapping[str, int] | None = None) -> dict[str, int]:
    """Nicknames for ``articles``, keeping ``existing`` ones (a nickname never changes once given).
    ``existing`` holds every table's nickname in the database, of every publication: a nickname names one
    table (the tracking metadata is keyed by it), so none of them is given to another table.

    A new article gets a nickname above every (transitive) parent's and, where the gaps allow, below
    every (transitive) child's that already has one; otherwise the next multiple of NICKNAME_STEP.
    """
    names = set(articles)
    existing = dict(existing or {})
    result = {a: n for a, n in existing.items() if a in names}
    used = set(existing.values())
    parents = {a: {p for p in parents_of.get(a, ()) if p in names and p != a} for a in articles}
    children: dict[str, set[str]] = {a: set() for a in articles}
    for c, ps in parents.items():
        for p in ps:
            children[p].add(c)
    for a in dri_order(articles, parents_of):
        if a in result:
            continue
        ancestors, descendants = _reach(a, parents), _reach(a, children)
        lo = max((result[x] for x in ancestors if x in result), default=0)
        hi = min((result[x] for x in descendants if x in result), default=None)
        free = [n for n in range(lo + 1, hi) if n not in used] if hi is not None and hi > lo + 1 else []
        if free and hi is not None:        # (free is only ever non-empty below a descendant)
            waiting = sum(1 for x in descendants if x not in result and x not in ancestors)
            target = lo + max(1, (hi - lo) // (waiting + 2))
            candidate = min(free, key=lambda n: (abs(n - target), n))
        else:
            candidate = (max(used | {lo}, default=0) // NICKNAME_STEP + 1) * NICKNAME_STEP
        result[a] = candidate
        used.add(candidate)
    return result


def related_articles(parents_of: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """For each article, the articles linked to it by a foreign key in either direction."""
    rel: dict[str, set[str]] = {a: set() for a in parents_of}
    for p, c in dri_edges(parents_of):
        rel[p].add(c)
        rel[c].add(p)
    return rel


def processing_groups(parents_of: Mapping[str, Iterable[str]], join_filter_articles: Iterable[str] = ()) -> dict[str, int]:
    """Group 2 = join-filter articles plus every article DRI-connected to one; everything else group 1."""
    rel = related_articles(parents_of)
    group2: set[str] = set()
    stack = [a for a in join_filter_articles if a in rel]
    while stack:
        a = stack.pop()
        if a in group2:
            continue
        group2.add(a)
        stack.extend(rel[a] - group2)
    return {a: (2 if a in group2 else 1) for a in parents_of}
