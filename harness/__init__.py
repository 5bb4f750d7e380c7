"""Speculative-decoding regime harness."""

__version__ = "0.1.0"
