"""Integration tests of ``helmlog.integrations``: the core, each framework."""
