"""The Spark side of the replica reads (``reads.py``): the Python Data Source ``format("sparksync")``,
registered by ``session.spark_session``. Each Spark partition carries one ``ReadPartition``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from sparksync.spark.reads import ReadPartition, ReadPlan, read_partition


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
        return [InputPartition(p) for p in ReadPlan.from_json(self.plan_json).partitions]

    def read(self, partition: InputPartition):
        from pyspark.sql.pandas.types import to_arrow_schema

        assert isinstance(partition.value, ReadPartition)
        return read_partition(partition.value, to_arrow_schema(self.schema, timezone="UTC"))
