"""helmlog.runtime."""
