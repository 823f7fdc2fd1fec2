"""Smoke tests of the benchmarks in bench/."""
