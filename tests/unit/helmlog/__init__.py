"""Unit tests of the helmlog face: its public names, pinned."""
