"""Merge replication: publishing articles, change tracking, generations."""
