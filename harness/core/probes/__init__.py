"""Probes: pure functions from raw samples (request records, counter scrapes) to metrics."""
