"""Redis fixtures (placeholder until the Redis store lands)."""
