"""Merge snapshots: a publication's rows and their lineage written by partition, and subscribers initialized from them."""
