"""A stand-in for vLLM 0.34.0 (tests/gpu_stand_ins/stand_in_engine.py): no engine, its protocol only."""

__version__ = "0.34.0"
