"""helmlog."""
