"""Validation: do the replicas hold the same rows, and repairing those that do not."""
