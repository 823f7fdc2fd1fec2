"""helmlog.actors."""
