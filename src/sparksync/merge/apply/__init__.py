"""Applying changes at a destination: decisions, staging, generation batches and watermarks."""
