"""sparksync partitions"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from sparksync.cli.common import DEFAULT_CONFIG_PATH, ConfigOption, console, handle_errors, load
from sparksync.cli.status_cmd import print_partitions
from sparksync.dialects import connect
from sparksync.errors import ConfigurationError, NotInitialized
from sparksync.merge.partitions.evaluation import describe_partitions
from sparksync.merge.partitions.scheme import scheme_of
from sparksync.merge.tracking.articles import published_articles
from sparksync.metadata import store
from sparksync.metadata.records import PublicationRow


@handle_errors
def partitions_command(
    config: ConfigOption = DEFAULT_CONFIG_PATH,
    publication: Annotated[str | None, typer.Option("--publication", "-p",
                                                    help="Only this publication.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The partitions of filtered merge publications: parameters, subscriptions, rows per article."""
    topology = load(config)
    pubs = [topology.publication(publication)] if publication else topology.publications_of_kind("merge")
    if publication and pubs[0].kind != "merge":
        raise ConfigurationError(f"publication {publication} is transactional: partitions belong to filtered merge "
                                 "publications", obj=publication)
    out: dict[str, list[dict]] = {}
    with connect(topology.publisher_url, topology.publisher.name) as pub:
        store.require_metadata(pub)
        for p in pubs:
            prow = store.select_one(pub, PublicationRow, {"name": p.name})
            if prow is None:
                raise NotInitialized(f"publication {p.name} is not published; run 'sparksync setup'", obj=p.name)
            articles = published_articles(pub, prow.pubid)
            scheme = scheme_of(articles)
            if scheme.filtered:
                out[p.name] = describe_partitions(pub, prow.pubid, articles, scheme, prow.precomputed)
    if as_json:
        console.print_json(json.dumps(out))
        return
    if not out:
        console.print("no filtered merge publication")
    for name, parts in out.items():
        console.print(f"[bold]Publication[/] {name}: {len(parts)} partition(s)")
        print_partitions(parts)
