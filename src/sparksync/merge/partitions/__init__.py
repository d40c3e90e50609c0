"""Filtered publications: partition schemes, precomputed partitions and evaluation at sync time."""
