"""Article nicknames and processing groups (seeds 003 and 004). Pure functions, no database.

* A table referenced by a foreign key gets a lower nickname than the table referencing it.
* Tables with no DRI get nicknames in the order they were added.
* Group 1: articles not involved in join filters and not related through DRI to join-filter articles.
  Group 2: join-filter articles and the articles related to them through DRI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

NICKNAME_STEP = 10  # gaps let a parent published later slot in before its existing children


def dri_edges(parents_of: Mapping[str, Iterable[str]]) -> set[tuple[str, str]]:
    """(parent, child) pairs between distinct articles."""
    return {(p, c) for c, ps in parents_of.items() for p in ps if p != c and p in parents_of}


def dri_order(articles: Sequence[str], parents_of: Mapping[str, Iterable[str]]) -> list[str]:
    """Articles ordered parents-first; ties (and cycles) keep the order the articles were added in."""
    position = {a: i for i, a in enumerate(articles)}
    parents = {a: {p for p in parents_of.get(a, ()) if p in position and p != a} for a in articles}
    ordered: list[str] = []
    placed: set[str] = set()
    while len(ordered) < len(articles):
        ready = [a for a in articles if a not in placed and parents[a] <= placed]
        if not ready:  # a foreign-key cycle: break it at the earliest-added article
            ready = [min((a for a in articles if a not in placed), key=position.__getitem__)]
        nxt = min(ready, key=position.__getitem__)
        ordered.append(nxt)
        placed.add(nxt)
    return ordered


def assign_nicknames(articles: Sequence[str], parents_of: Mapping[str, Iterable[str]],
                     existing: Mapping[str, int] | None = None) -> dict[str, int]:
    """Nicknames for ``articles``, keeping ``existing`` ones (a nickname never changes once given).

    New articles get a nickname that is greater than all of their parents' and, where the gaps allow,
    smaller than all of their children's.
    """
    existing = dict(existing or {})
    result = {a: n for a, n in existing.items() if a in set(articles)}
    used = set(existing.values())
    for a in dri_order(articles, parents_of):
        if a in result:
            continue
        lo = max((result[p] for p in parents_of.get(a, ()) if p in result and p != a), default=0)
        children = [c for c, ps in parents_of.items() if a in ps and c in result and c != a]
        hi = min((result[c] for c in children), default=None)
        if hi is None:
            candidate = (max([lo, *used], default=0) // NICKNAME_STEP + 1) * NICKNAME_STEP
        else:
            free = [n for n in range(lo + 1, hi) if n not in used]
            mid = (lo + hi) / 2
            candidate = (min(free, key=lambda n: (abs(n - mid), n)) if free
                         else (max(used | {lo}) // NICKNAME_STEP + 1) * NICKNAME_STEP)
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
