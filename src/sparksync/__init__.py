"""sparksync: merge and transactional replication for SQLite and PostgreSQL, on Apache Spark."""

__version__ = "0.1.0"
