"""The stand-in vLLM's entry points."""
