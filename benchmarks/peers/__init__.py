"""Peers run beside memoryd on the same data (`python -m benchmarks.peers`)."""
