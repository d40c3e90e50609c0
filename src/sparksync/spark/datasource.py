"""A Python Data Source that reads replica tables in partitions, as Arrow record batches.

The driver plans every read (SQL, parameters, bounds, consistent-snapshot id) and passes the plan
as the ``plan`` option; each partition opens its own connection inside ``read()``. Because bounds
are fixed at planning time, a retried task reads the same rows. Usage::

    spark.read.format("sparksync").schema(ddl).option("plan", plan.to_json()).load()
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

FETCH_ROWS = 10_000


@dataclass
class ReadPartition(InputPartition):
    """One task: one SQL query against one replica."""

    url: str
    sql: str
    params: list = field(default_factory=list)
    columns: list = field(default_factory=list)      # [[name, SqlType dict], ...]
    snapshot: str | None = None                      # PostgreSQL exported snapshot id
    label: str = ""
    mode: str = "rows"                               # "rows" | "changes" (see merge/changes.py)
    constants: dict = field(default_factory=dict)    # changes: source, source_nick, tablenick, op


@dataclass
class ReadPlan:
    partitions: list[ReadPartition]

    def to_json(self) -> str:
        return json.dumps([asdict(p) for p in self.partitions], default=str)

    @classmethod
    def from_json(cls, text: str) -> "ReadPlan":
        return cls([ReadPartition(**d) for d in json.loads(text)])

    def spark_schema(self) -> str:
        from ..types import SqlType

        if self.partitions[0].mode == "changes":
            from ..merge.changes import CHANGE_SCHEMA

            return CHANGE_SCHEMA
        cols = self.partitions[0].columns
        return ", ".join(f"`{n}` {SqlType.from_dict(t).to_spark()}" for n, t in cols)


class ReplicaSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sparksync"

    def schema(self):
        return ReadPlan.from_json(self.options["plan"]).spark_schema()

    def reader(self, schema):
        return ReplicaReader(self.options["plan"], schema)


class ReplicaReader(DataSourceReader):
    def __init__(self, plan_json: str, schema):
        self.plan_json = plan_json
        self.schema = schema

    def partitions(self):
        return ReadPlan.from_json(self.plan_json).partitions

    def read(self, partition: ReadPartition):
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..dialects import connect
        from ..types import SqlType, ValueError_, rows_to_record_batch

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        columns = [(n, SqlType.from_dict(t)) for n, t in partition.columns]
        codec = None
        if partition.mode == "changes":
            from ..merge.changes import RowCodec

            codec = RowCodec(columns)
        replica = connect(partition.url, partition.label or None)
        try:
            for rows in replica.dialect.stream(replica, partition.sql, partition.params, FETCH_ROWS,
                                               snapshot=partition.snapshot):
                try:
                    if partition.mode == "changes":
                        yield _change_batch(rows, codec, partition.constants, arrow_schema, partition.label)
                    else:
                        yield rows_to_record_batch(rows, columns, arrow_schema, partition.label)
                except ValueError_ as e:
                    raise ValueError(str(e)) from None
        finally:
            replica.close()


def _change_batch(rows, codec, constants: dict, arrow_schema, where: str):
    """Query rows (generation, rowguid, lineage, colv, <article columns>...) -> change rows."""
    import pyarrow as pa

    from ..merge.changes import RETRY_GENERATION, json_text
    from ..types import ValueError_

    n = len(rows)
    out = {k: [constants.get(k)] * n for k in ("source", "source_nick", "tablenick", "target", "op")}
    out["rowguid"] = [str(r[1]) for r in rows]
    out["generation"] = [RETRY_GENERATION] * n if constants.get("target") else [int(r[0]) for r in rows]
    out["lineage"] = [json_text(r[2]) for r in rows]
    out["colv"] = [json_text(r[3]) for r in rows]
    if constants["op"] == "upsert":
        encode, encoded = codec.encode, []
        for r in rows:
            try:
                encoded.append(encode(r[4:]))
            except ValueError_ as e:
                raise ValueError_(f"{where}, row {r[1]}: {e}") from None
        out["row"] = encoded
    else:
        out["row"] = [None] * n
    return pa.RecordBatch.from_arrays(
        [pa.array(out[name], type=arrow_schema.field(name).type) for name in arrow_schema.names], schema=arrow_schema)
