"""Replication metadata: declared once (schema.py), installed and read (store.py)."""
