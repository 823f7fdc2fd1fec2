"""helmlog.sinks."""
