"""Keeping replicas healthy: metadata cleanup, expiration and integrity checks."""
