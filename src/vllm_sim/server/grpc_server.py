"""The gRPC server that shares the HTTP port: vLLM's engine service, server reflection (v1
and v1alpha) and the standard health service, on a local socket that the HTTP layer
splices HTTP/2 connections to (see vllm_sim/http/splice.py).

On Linux the socket is an abstract one (nothing on disk to clean up after a crash);
elsewhere it lives in a private directory (mode 0700) made at start-up and removed at stop.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from vllm_sim.frontend.context import ApiContext
from vllm_sim.protocols.vllm.grpc_names import SERVICE
from vllm_sim.transports.grpc.caller import Context
from vllm_sim.transports.grpc.service import GrpcState, VllmEngineServicer, engine_handler

log = logging.getLogger("vllm_sim")

REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# Inbound messages are bounded as HTTP bodies are (gRPC's own default, 4 MiB); a
# connection carries at most this many calls at once.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_CONCURRENT_STREAMS = 1000


class _Health(health.aio.HealthServicer):
    """The standard health service: SERVING unless the server drains or sleeps, read
    at each check."""

    def __init__(self, state: GrpcState) -> None:
        super().__init__()
        self._state = state

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: Context
    ) -> health_pb2.HealthCheckResponse:
        if request.service not in ("", SERVICE, HEALTH):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service}")
        serving = not (self._state.drain.active or self._state.sleeping())
        status = health_pb2.HealthCheckResponse.SERVING
        return health_pb2.HealthCheckResponse(
            status=status if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )


def _reflection_v1(servicer: Any) -> grpc.GenericRpcHandler:
    """Reflection v1 is v1alpha's messages under another name: the same servicer answers
    both."""
    method = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(REFLECTION_V1, {"ServerReflectionInfo": method})


class GrpcServer:
    """One instance's gRPC side; `target` is the socket the HTTP layer splices to."""

    def __init__(
        self, ctx: ApiContext, state: GrpcState, extra_port: tuple[str, int] | None = None
    ) -> None:
        self._dir: Path | None = None
        if sys.platform == "linux":
            # An abstract socket: no file to leave behind if the process is killed.
            name = f"vllm-sim-grpc-{os.getpid()}-{secrets.token_hex(8)}"
            self.target, address = "\0" + name, "unix-abstract:" + name
        else:
            self._dir = Path(tempfile.mkdtemp(prefix="vllm-sim-grpc-"))
            self.target = str(self._dir / "engine.sock")
            address = "unix:" + self.target
        self.servicer = VllmEngineServicer(ctx, state)
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
                ("grpc.so_reuseport", 0),
            ]
        )
        server.add_generic_rpc_handlers((engine_handler(self.servicer),))
        health_pb2_grpc.add_HealthServicer_to_server(_Health(state), server)
        names = (SERVICE, HEALTH, reflection.SERVICE_NAME, REFLECTION_V1)
        alpha = reflection.aio.ReflectionServicer(names)
        reflection.enable_server_reflection(names, server)
        server.add_generic_rpc_handlers((_reflection_v1(alpha),))
        server.add_insecure_port(address)
        self._extra = extra_port
        if extra_port is not None:
            host, port = extra_port
            shown = f"[{host}]" if ":" in host else host
            server.add_insecure_port(f"{shown or '0.0.0.0'}:{port}")
        self._server = server

    async def start(self) -> None:
        await self._server.start()

    async def stop(self, grace: float) -> None:
        """Lets calls in flight finish for `grace` seconds, then cancels them."""
        try:
            await self._server.stop(grace)
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
