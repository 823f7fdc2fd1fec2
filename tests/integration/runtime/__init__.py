"""Integration tests of the runtime on a real Redis (and other processes)."""
