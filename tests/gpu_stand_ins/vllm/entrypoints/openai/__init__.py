"""The stand-in vLLM's OpenAI-compatible server."""
