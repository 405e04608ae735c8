"""The gRPC transport: vLLM's engine service over the front end."""
