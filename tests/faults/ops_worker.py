"""A process that runs sparksync commands for ``test_operations_randomized``, one JSON line per command
on stdin (the command, and the file holding the topology's configuration data and folder), one JSON
line per result on stdout, with one warm Spark session: killed with SIGKILL in the middle of a command
(a failpoint armed with ``!kill``) as an operator's ``kill -9`` would, then started again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main() -> None:
    from sparksync import locks
    from sparksync.merge.agent import MergeAgent, MergeOptions
    from sparksync.merge.cleanup import cleanup
    from sparksync.merge.override import resolve_conflict
    from sparksync.merge.schema_changes import change
    from sparksync.merge.validation import repair, validate
    from sparksync.provision import snapshot
    from sparksync.reinit import reinitialize
    from sparksync.spark.session import spark_session
    from sparksync.topology import parse_topology

    spark = spark_session("local[2]", app_name="ops-worker", conf={"spark.sql.shuffle.partitions": "2",
                                                                   "spark.default.parallelism": "2"})
    topologies: dict[str, object] = {}
    topology: Any = None

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
        from sparksync.provision import setup

        setup(topology, lambda: spark)
        return {"ok": True}

    def reinit(cmd: dict) -> dict:
        said: list[str] = []
        reinitialize(topology, lambda: spark, cmd["subscription"], upload_first=True, report=said.append)
        return {"ok": True, "said": said}

    def resolve(cmd: dict) -> dict:
        return {"ok": True, **resolve_conflict(topology, cmd["conflict_id"], "loser")}

    ops = {"merge": merge, "snapshot": do_snapshot, "cleanup": do_cleanup, "repair": do_repair,
           "schema-change": schema_change, "reinit": reinit, "resolve": resolve, "setup": do_setup}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["spec"] not in topologies:
            spec = json.loads(Path(cmd["spec"]).read_text(encoding="utf-8"))
            topologies[cmd["spec"]] = parse_topology(spec["data"], Path(spec["base"]))
        topology = topologies[cmd["spec"]]
        try:
            with locks.waiting(120):
                out = ops[cmd["op"]](cmd)
        except Exception as e:  # noqa: BLE001 - the test reads it
            out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
