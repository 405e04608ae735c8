"""Typed access to the generated gRPC client (protoc's stubs carry no annotations)."""

from __future__ import annotations

import grpc

from vllm_sim.proto import engine_pb2_grpc


def engine_stub(channel: grpc.Channel) -> engine_pb2_grpc.VllmEngineStub:
    return engine_pb2_grpc.VllmEngineStub(channel)  # type: ignore[no-untyped-call]
