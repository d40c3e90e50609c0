"""sparksync setup"""

from __future__ import annotations

from sparksync import api
from sparksync.cli.common import (
    DEFAULT_CONFIG_PATH,
    ConfigOption,
    LockTimeoutOption,
    console,
    handle_errors,
    load,
    make_spark,
    reporter,
)
from sparksync.locks import DEFAULT_WAIT


@handle_errors
def setup_command(config: ConfigOption = DEFAULT_CONFIG_PATH, lock_timeout: LockTimeoutOption = DEFAULT_WAIT) -> None:
    """Publish, track, snapshot and initialize subscribers (idempotent: safe to run again)."""
    topology = load(config)
    summary = api.setup(topology, spark=make_spark(topology), progress=reporter)
    done = [r for r in summary.initialized if r.ok and not r.skipped]
    console.print(f"[green]setup complete[/]: {len(topology.publications)} publication(s), "
                  f"{len(summary.snapshots)} snapshot(s) written, {len(done)} subscription(s) initialized")
