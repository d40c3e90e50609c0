"""Publishing transactional articles: the publication, its snapshot and initialized subscribers, schema changes."""
