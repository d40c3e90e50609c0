"""Transactional replication (seed 001): log reader, distribution database, distribution agent."""
