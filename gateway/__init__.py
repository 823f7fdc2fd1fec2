"""helmlog.gateway."""
