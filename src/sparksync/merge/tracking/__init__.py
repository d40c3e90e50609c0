"""Change tracking: tracked articles and their triggers, generations, lineage."""
