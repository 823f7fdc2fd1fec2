"""Integration tests of the sinks on a real Redis: watchers and trace export."""
