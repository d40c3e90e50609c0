"""Spark plumbing: the session factory and the replica Python Data Source."""
