"""Benchmarks for memoryd: one command each, not part of the test suite (see README.md)."""
