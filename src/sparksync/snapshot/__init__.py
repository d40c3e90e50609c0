"""Snapshots: writing a publication's data and metadata as Parquet, and initializing subscribers."""
