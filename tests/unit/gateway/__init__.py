"""Unit tests for ``helmlog.gateway``: MCP serving (S1–S6), the MCP client (S7, S8)."""
