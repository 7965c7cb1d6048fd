"""STAND-IN for vLLM, for ircore's CPU tests; only ``vllm._C`` exists."""
