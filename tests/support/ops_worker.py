"""The commands ``test_operations_randomized`` runs, and a process that runs one of them to be killed.

``operations(topology, spark)`` gives each command as a function of its JSON arguments returning a JSON
result; the test runs them in its own process, except the one chosen to die: that one goes to
``python -m tests.support.ops_worker`` (one JSON line per command on stdin, the command and the file
holding the topology's configuration data and folder; one JSON result line on stdout), which a failpoint
armed with ``!kill`` kills with SIGKILL in the middle of it, as an operator's ``kill -9`` would.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def operations(topology, spark) -> dict[str, Callable[[dict], dict]]:
    from sparksync.merge.conflicts.override import resolve_conflict
    from sparksync.merge.maintenance.cleanup import cleanup
    from sparksync.merge.publish.schema_change import change
    from sparksync.merge.session.agent import MergeAgent
    from sparksync.merge.session.summary import MergeOptions
    from sparksync.provision import setup, snapshot
    from sparksync.reinit import reinitialize
    from sparksync.validation.repair import repair
    from sparksync.validation.subscriptions import validate

    def merge(_: dict) -> dict:
        s = MergeAgent(topology, spark).run(MergeOptions())
        return {"ok": s.ok, "errors": [e for x in s.subscriptions for e in x.errors]}

    def do_snapshot(_: dict) -> dict:
        return {"ok": True, "path": snapshot(topology, spark, ["Pub"])["Pub"]}

    def do_cleanup(_: dict) -> dict:
        return {"ok": all(r.error is None for r in cleanup(topology).replicas)}

    def do_repair(_: dict) -> dict:
        report = validate(topology, lambda: spark, checksum=True)
        if report.ok:
            return {"ok": True, "repaired": 0}
        if any(s.pending for s in report.subscriptions):
            return {"ok": True, "repaired": 0, "pending": True}      # refused: a merge comes first
        done = repair(topology, report)
        return {"ok": True, "repaired": sum(s.repaired for s in done.subscriptions)}

    def schema_change(cmd: dict) -> dict:
        return {"ok": True, "recorded": change(topology, "Pub", "K", add=f"{cmd['column']} text")}

    def do_setup(_: dict) -> dict:
        setup(topology, lambda: spark)
        return {"ok": True}

    def reinit(cmd: dict) -> dict:
        reinitialize(topology, lambda: spark, cmd["subscription"], upload_first=True)
        return {"ok": True}

    def resolve(cmd: dict) -> dict:
        return {"ok": True, **resolve_conflict(topology, cmd["conflict_id"], "loser")}

    return {"merge": merge, "snapshot": do_snapshot, "cleanup": do_cleanup, "repair": do_repair,
            "schema-change": schema_change, "reinit": reinit, "resolve": resolve, "setup": do_setup}


def run(ops: dict[str, Callable[[dict], dict]], cmd: dict) -> dict:
    """One command, as a user would run it (waiting for a held lock); its error as data."""
    from sparksync import locks

    try:
        with locks.waiting(120):
            return ops[cmd["op"]](cmd)
    except Exception as e:  # noqa: BLE001 - the test reads it
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main() -> None:
    from sparksync.spark.session import spark_session
    from sparksync.topology import parse_topology

    spark = spark_session("local[2]", app_name="ops-worker", conf={"spark.sql.shuffle.partitions": "2",
                                                                   "spark.default.parallelism": "2"})
    spark.range(1).count()                    # warm: the command to be killed starts at once
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        spec: dict[str, Any] = json.loads(Path(cmd["spec"]).read_text(encoding="utf-8"))
        print(json.dumps(run(operations(parse_topology(spec["data"], Path(spec["base"])), spark), cmd), default=str),
              flush=True)


if __name__ == "__main__":
    main()
