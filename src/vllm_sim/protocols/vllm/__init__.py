"""vLLM's own API: generate (HTTP and gRPC), tokenize, LoRA, sleep, pause, server info."""
