"""Integration tests of the actors layer: real Ray hosts on a real Redis."""
