"""Unit tests of the actors layer that need no running Ray."""
