"""The gRPC side starts on first use: a server no client calls over gRPC never loads gRPC's
library (a third of an idle server's memory), the first HTTP/2 connection starts it and
is served, and a port of gRPC alone starts it with the server."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx

from tests.support.grpc_client import serving_status
from tests.support.server import SimServer, free_port
from vllm_sim.proto import engine_pb2 as pb

SERVING = 1  # health_pb2.HealthCheckResponse.SERVING
GRPC_LIBRARY = "cygrpc"  # the shared object of gRPC's core


def grpc_loaded(server: SimServer) -> bool:
    assert server.process is not None
    with open(f"/proc/{server.process.pid}/maps") as maps:
        return GRPC_LIBRARY in maps.read()


def status_over(port: int) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return serving_status(channel)


def test_grpc_is_loaded_by_the_first_grpc_connection_only() -> None:
    with SimServer([]) as server:
        httpx.post(
            f"{server.url}/v1/completions",
            json={"model": server.model, "prompt": "hi", "max_tokens": 2},
        ).raise_for_status()
        assert not grpc_loaded(server)
        # Several first connections at once share the one start, and all are served.
        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(status_over, [server.port] * 4))
        assert statuses == [SERVING] * 4
        assert grpc_loaded(server)
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            call = channel.unary_unary(
                "/vllm.grpc.engine.VllmEngine/GetModelInfo",
                request_serializer=pb.GetModelInfoRequest.SerializeToString,
                response_deserializer=pb.GetModelInfoResponse.FromString,
            )
            assert call(pb.GetModelInfoRequest(), timeout=10).model_path
        # HTTP keeps answering beside it.
        assert httpx.get(f"{server.url}/health").status_code == 200


def test_a_port_of_grpc_alone_starts_it_with_the_server() -> None:
    grpc_port = free_port()
    with SimServer(["--grpc-port", str(grpc_port)]) as server:
        assert grpc_loaded(server)
        with socket.create_connection(("127.0.0.1", grpc_port), timeout=5):
            pass  # listening before any gRPC client came
        assert status_over(grpc_port) == SERVING
