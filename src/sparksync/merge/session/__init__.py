"""A merge session: the agent (orchestration), what it reads and plans, and its Spark tasks."""
