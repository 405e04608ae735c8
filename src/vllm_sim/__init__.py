"""vllm-sim: a drop-in simulator of a vLLM server that runs no model."""

__version__ = "0.1.0"
