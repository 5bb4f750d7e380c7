"""The stand-in vLLM's command line (``vllm serve``)."""
