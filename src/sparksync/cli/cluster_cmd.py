"""sparksync cluster-pack: the Python environment a Spark cluster's executors run sparksync's tasks in."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparksync import api
from sparksync.cli.common import console, handle_errors, reporter


@handle_errors
def cluster_pack_command(
    output: Annotated[Path, typer.Option("--output", "-o", help="The archive to write (.tar.gz).")] =
        Path("sparksync-env.tar.gz"),
) -> None:
    """Pack sparksync and what its Spark tasks import into one archive for a cluster's executors (shipped with each
    application by spark.archives: no path of this host is needed on theirs); prints the [spark] conf to add."""
    packed = api.cluster_pack(output, progress=reporter)
    console.print(f"{packed.path}: {packed.bytes / 2**20:,.0f} MiB, in {packed.seconds:.0f}s ({packed.source})",
                  highlight=False)
    conf = ", ".join(f'"{k}" = "{v}"' for k, v in packed.conf().items())
    console.print(f"[spark] conf to add (with spark.cores.max as docs/operations.md says):\nconf = {{ {conf} }}",
                  highlight=False, markup=False)
