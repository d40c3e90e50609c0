"""Demo data: a small AdventureWorks-like database for demos and tests."""
