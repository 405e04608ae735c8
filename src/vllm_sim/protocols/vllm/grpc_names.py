"""The names of vLLM's gRPC engine service, apart from its messages: what the server's
set-up needs without loading gRPC or protobuf."""

from __future__ import annotations

SERVICE = "vllm.grpc.engine.VllmEngine"
GENERATE_PATH = f"/{SERVICE}/Generate"
