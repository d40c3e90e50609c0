"""Watching transactional publications: status (positions and backlogs) and tracer tokens."""
