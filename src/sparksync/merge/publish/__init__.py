"""Publishing merge articles: the publication, processing order and schema changes."""
