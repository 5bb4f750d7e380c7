"""A stand-in for SGLang 0.5.23 (tests/gpu_stand_ins/stand_in_engine.py): no engine, its protocol only."""

__version__ = "0.5.23"
