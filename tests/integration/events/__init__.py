"""Integration tests of the events layer's Redis store, through the runtime."""
