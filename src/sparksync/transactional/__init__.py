"""Transactional replication (seed 001), a folder per stage: capture at the publisher, the log reader and
the distribution database, the distribution agent's delivery, publishing and initialization, status."""
