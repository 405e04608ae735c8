"""Typed access to the generated gRPC clients: the engine service's (protoc's stubs carry no
annotations), the standard health service's and server reflection's (v1alpha and v1)."""

from __future__ import annotations

import time
from typing import TypeAlias, cast

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from vllm_sim.proto import engine_pb2, engine_pb2_grpc


def engine_stub(channel: grpc.Channel) -> engine_pb2_grpc.VllmEngineStub:
    return engine_pb2_grpc.VllmEngineStub(channel)  # type: ignore[no-untyped-call]


HEALTH_CHECK = "/grpc.health.v1.Health/Check"
REFLECTION_V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"

# grpc's callables are generic in the type stubs only: the alias stays a string at run time.
Reflection: TypeAlias = (
    "grpc.StreamStreamMultiCallable[reflection_pb2.ServerReflectionRequest, "
    "reflection_pb2.ServerReflectionResponse]"
)


def health_check(
    channel: grpc.Channel,
) -> grpc.UnaryUnaryMultiCallable[health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse]:
    """The standard health service's Check (the health stubs' HealthStub declares none)."""
    return channel.unary_unary(
        HEALTH_CHECK,
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )


def serving_status(channel: grpc.Channel, service: str = "") -> int:
    """The health service's status of `service` (health_pb2.HealthCheckResponse.SERVING...)."""
    answer = health_check(channel)(health_pb2.HealthCheckRequest(service=service), timeout=10)
    return answer.status


def reflection_v1alpha(channel: grpc.Channel) -> Reflection:
    """Reflection v1alpha through its generated stub (which carries no annotations)."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    return cast(Reflection, stub.ServerReflectionInfo)


def reflection_v1(channel: grpc.Channel) -> Reflection:
    """Reflection v1: v1alpha's messages, wire-identical, under the v1 method name."""
    return channel.stream_stream(
        REFLECTION_V1,
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )


def wait_for_requests(
    stub: engine_pb2_grpc.VllmEngineStub, count: int
) -> engine_pb2.GetLoadsResponse:
    """The loads once `count` requests are queued or running (or after 5 s)."""
    deadline = time.monotonic() + 5
    loads: engine_pb2.GetLoadsResponse = stub.GetLoads(engine_pb2.GetLoadsRequest())
    while loads.loads[0].num_total_reqs < count and time.monotonic() < deadline:
        time.sleep(0.02)
        loads = stub.GetLoads(engine_pb2.GetLoadsRequest())
    return loads
