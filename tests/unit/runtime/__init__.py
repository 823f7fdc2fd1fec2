"""Unit tests for helmlog.runtime."""
