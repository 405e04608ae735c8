"""gRPC's transport on the HTTP port, through a real server: server reflection (v1alpha and
v1), the standard health service (sleep and drain included), TLS with ALPN, upstream's own
generated client, HTTP/1.1 beside gRPC calls in flight, the drain on SIGTERM, connections
that only look like HTTP/2, and data-parallel ranks."""

from __future__ import annotations

import datetime
import json
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from tests.support.grpc_client import (
    Reflection,
    engine_stub,
    reflection_v1,
    reflection_v1alpha,
    serving_status,
)
from tests.support.native import consecutive_free_ports, wait_healthy
from tests.support.server import SimServer, free_port, run_cli
from vllm_sim.proto import engine_pb2 as pb

ROOT = Path(__file__).resolve().parents[3]
IDS = [32, 45, 78, 13]
ENGINE = "vllm.grpc.engine.VllmEngine"
HEALTH = "grpc.health.v1.Health"
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
REFLECTION_V1ALPHA = "grpc.reflection.v1alpha.ServerReflection"
ENGINE_FILE = "pkg/grpc/engine.proto"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# An empty SETTINGS frame: what an HTTP/2 client sends right after the preface.
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
HEALTH_REQUEST = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
TIMEOUT = 10.0  # a gRPC call's deadline: generous, nothing here takes near as long
READ_TIMEOUT = 1  # seconds: the --request-read-timeout of the `plain` server
SLOW = ["--time-to-first-token", "10ms", "--inter-token-latency", "50ms"]


def generate(
    ids: list[int], max_tokens: int, stream: bool = False, request_id: str = ""
) -> pb.GenerateRequest:
    """Token ids in; exactly `max_tokens` out (the end of sequence is ignored)."""
    return pb.GenerateRequest(
        request_id=request_id,
        tokenized=pb.TokenizedInput(input_ids=ids),
        sampling_params=pb.SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        stream=stream,
    )


def channel_to(server: SimServer, port: int | None = None) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{port or server.port}")


@pytest.fixture(scope="module")
def plain() -> Iterator[SimServer]:
    """Plain HTTP and h2c on one port; a short read timeout for the stalled-preface test."""
    args = ["--mode", "echo", "--max-num-seqs", "4", "--request-read-timeout", f"{READ_TIMEOUT}s"]
    with SimServer(args) as server:
        yield server


@pytest.fixture(scope="module")
def channel(plain: SimServer) -> Iterator[grpc.Channel]:
    with channel_to(plain) as channel:
        yield channel


@pytest.fixture(scope="module")
def slow() -> Iterator[SimServer]:
    """Random text at 50 ms a token, for calls that must stay in flight for a while."""
    with SimServer([*SLOW, "--max-num-seqs", "4"]) as server:
        yield server


# ---- 1. server reflection ----


def reflect(
    method: Reflection, *requests: reflection_pb2.ServerReflectionRequest
) -> list[reflection_pb2.ServerReflectionResponse]:
    return list(method(iter(requests), timeout=TIMEOUT))


def listed_services(method: Reflection) -> list[str]:
    [answer] = reflect(method, reflection_pb2.ServerReflectionRequest(list_services=""))
    assert answer.WhichOneof("message_response") == "list_services_response"
    return [service.name for service in answer.list_services_response.service]


def files_containing(method: Reflection, symbol: str) -> list[descriptor_pb2.FileDescriptorProto]:
    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
    [answer] = reflect(method, request)
    assert answer.WhichOneof("message_response") == "file_descriptor_response", answer
    return [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in answer.file_descriptor_response.file_descriptor_proto
    ]


@pytest.mark.parametrize("version", ["v1alpha", "v1"])
def test_reflection_lists_every_service(channel: grpc.Channel, version: str) -> None:
    method = reflection_v1alpha(channel) if version == "v1alpha" else reflection_v1(channel)
    services = listed_services(method)
    assert sorted(services) == sorted([ENGINE, HEALTH, REFLECTION_V1, REFLECTION_V1ALPHA])


@pytest.mark.parametrize("version", ["v1alpha", "v1"])
def test_reflection_finds_the_engine_file(channel: grpc.Channel, version: str) -> None:
    method = reflection_v1alpha(channel) if version == "v1alpha" else reflection_v1(channel)
    files = files_containing(method, ENGINE)
    assert files[0].name == ENGINE_FILE
    [service] = [s for s in files[0].service if s.name == "VllmEngine"]
    assert files[0].package == "vllm.grpc.engine"
    assert "Generate" in [m.name for m in service.method]


def test_reflection_keeps_one_stream_for_several_requests(channel: grpc.Channel) -> None:
    """Reflection is a bidirectional stream: one answer per request, in order."""
    answers = reflect(
        reflection_v1(channel),
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=ENGINE),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="no.such.Symbol"),
    )
    kinds = [answer.WhichOneof("message_response") for answer in answers]
    assert kinds == ["list_services_response", "file_descriptor_response", "error_response"]
    assert answers[2].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


# ---- 2. the health service ----


@pytest.mark.parametrize("service", ["", ENGINE, HEALTH])
def test_health_serves_the_server_and_its_services(channel: grpc.Channel, service: str) -> None:
    assert serving_status(channel, service) == SERVING


def test_health_of_an_unknown_service_is_not_found(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        serving_status(channel, "no.such.Service")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_sleeping_engine_is_not_serving_until_woken() -> None:
    # /sleep exists in vLLM's dev mode only, and sleeps only with --enable-sleep-mode.
    server = SimServer(["--enable-sleep-mode"], env={"VLLM_SERVER_DEV_MODE": "1"})
    with server, channel_to(server) as channel, httpx.Client(base_url=server.url) as http:
        stub = engine_stub(channel)
        assert stub.HealthCheck(pb.HealthCheckRequest(), timeout=TIMEOUT).healthy
        assert http.post("/sleep").status_code == 200
        assert http.get("/is_sleeping").json() == {"is_sleeping": True}
        assert serving_status(channel) == NOT_SERVING
        assert serving_status(channel, ENGINE) == NOT_SERVING
        asleep = stub.HealthCheck(pb.HealthCheckRequest(), timeout=TIMEOUT)
        assert not asleep.healthy
        assert asleep.message
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Generate(generate(IDS, 2), timeout=TIMEOUT))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert http.post("/wake_up").status_code == 200
        assert serving_status(channel) == SERVING
        assert serving_status(channel, ENGINE) == SERVING
        assert stub.HealthCheck(pb.HealthCheckRequest(), timeout=TIMEOUT).healthy
        [message] = list(stub.Generate(generate(IDS, 2), timeout=TIMEOUT))
        assert message.complete.completion_tokens == 2


# ---- 3. TLS: HTTPS, gRPC over TLS with ALPN h2, h2c ----


def write_localhost_pair(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for the name "localhost" (CN and SAN) and its key: the
    server's own --self-signed-certs certificate names no host, which gRPC's hostname
    check cannot pass."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture(scope="module")
def self_signed() -> Iterator[SimServer]:
    with SimServer(["--self-signed-certs"], https=True) as server:
        yield server


@pytest.fixture(scope="module")
def localhost_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    cert, key = write_localhost_pair(tmp_path_factory.mktemp("localhost-pair"))
    args = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    with SimServer(args, https=True) as server:
        yield server


@pytest.fixture(params=["self-signed", "localhost pair"])
def tls(request: pytest.FixtureRequest) -> SimServer:
    """Each TLS server in turn: --self-signed-certs, and a given pair."""
    name = "self_signed" if request.param == "self-signed" else "localhost_tls"
    server: SimServer = request.getfixturevalue(name)
    return server


def selected_alpn(port: int, offered: list[str]) -> str | None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(offered)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as conn,
    ):
        return conn.selected_alpn_protocol()


def test_https_serves_the_rest_api_over_http_1_1(tls: SimServer) -> None:
    answer = httpx.get(tls.url + "/v1/models", verify=False, timeout=TIMEOUT)
    assert answer.status_code == 200
    assert answer.http_version == "HTTP/1.1"
    assert answer.json()["data"][0]["id"] == tls.model


@pytest.mark.parametrize(
    ("offered", "selected"),
    [
        (["h2", "http/1.1"], "http/1.1"),  # curl, browsers: the REST API
        (["http/1.1", "h2"], "http/1.1"),
        (["h2"], "h2"),  # a gRPC client
        (["http/1.1"], "http/1.1"),
    ],
)
def test_alpn_keeps_http_1_1_and_gives_h2_to_grpc_clients(
    tls: SimServer, offered: list[str], selected: str
) -> None:
    assert selected_alpn(tls.port, offered) == selected


def test_grpc_over_tls(localhost_tls: SimServer) -> None:
    pem = ssl.get_server_certificate(("127.0.0.1", localhost_tls.port)).encode()
    credentials = grpc.ssl_channel_credentials(root_certificates=pem)
    options = [("grpc.ssl_target_name_override", "localhost")]
    target = f"127.0.0.1:{localhost_tls.port}"
    with grpc.secure_channel(target, credentials, options=options) as channel:
        stub = engine_stub(channel)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=TIMEOUT)
        assert info.model_path == localhost_tls.model
        messages = list(stub.Generate(generate(IDS, 5, stream=True), timeout=TIMEOUT))
        assert [m.WhichOneof("response") for m in messages] == ["chunk"] * 5 + ["complete"]
        assert all(len(m.chunk.token_ids) == 1 for m in messages[:-1])
        assert messages[-1].complete.finish_reason == "length"
        assert serving_status(channel) == SERVING
        assert listed_services(reflection_v1(channel))
    # HTTPS still answers on the port after the gRPC connection.
    assert httpx.get(localhost_tls.url + "/health", verify=False).status_code == 200


def test_plaintext_h2c_still_works_on_the_tls_port(tls: SimServer) -> None:
    """The TLS port looks at each connection's first bytes: the HTTP/2 preface in clear is
    gRPC without TLS, a ClientHello is TLS, and plain HTTP/1.1 is still refused."""
    with channel_to(tls) as channel:
        info = engine_stub(channel).GetModelInfo(pb.GetModelInfoRequest(), timeout=5)
    assert info.model_path == tls.model
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{tls.port}/health", timeout=5)
    assert httpx.get(tls.url + "/health", verify=False, timeout=5).status_code == 200


# ---- 4. upstream's own generated client ----


def test_upstream_client_speaks_to_the_server(slow: SimServer) -> None:
    """smg-grpc-proto's stubs, in a process of their own (see tests/support/upstream_proto.py):
    every RPC a gateway calls, as upstream encodes and decodes it."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.upstream_client", str(slow.port), "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)

    stream = result["stream"]
    assert stream["kinds"] == ["chunk"] * 5 + ["complete"]
    assert all(len(ids) == 1 for ids in stream["chunk_ids"])
    assert stream["chunk_completion_tokens"] == [1] * 5
    assert stream["chunk_prompt_tokens"] == [4] * 5
    assert stream["complete"]["finish_reason"] == "length"
    assert stream["complete"]["prompt_tokens"] == 4

    unary = result["unary"]
    assert unary["kinds"] == ["complete"]
    assert len(unary["complete"]["output_ids"]) == 5
    assert unary["complete"]["completion_tokens"] == 5
    assert unary["complete"]["finish_reason"] == "length"
    assert unary["complete"]["prompt_tokens"] == 4

    assert result["model_info"]["model_path"] == slow.model
    assert result["model_info"]["served_model_name"] == slow.model
    assert result["model_info"]["is_generation"] is True
    assert result["server_info"]["server_type"] == "vllm-grpc"
    assert result["server_info"]["uptime_seconds"] > 0
    assert result["server_info"]["max_num_seqs"] == 4
    assert result["health"]["healthy"] is True

    [load] = result["loads"]
    assert load["dp_rank"] == 0
    assert load["num_running_reqs"] == 1  # the stream aborted next
    assert load["max_running_requests"] == 4

    abort = result["abort"]
    assert abort["first"] == "chunk"
    assert abort["code"] == "CANCELLED"
    assert "complete" not in abort["after"]


# ---- 5. HTTP/1.1 beside gRPC calls in flight ----


def test_http_is_answered_on_the_port_while_a_stream_runs(slow: SimServer) -> None:
    received: list[pb.GenerateResponse] = []
    started = threading.Event()
    failures: list[BaseException] = []

    def consume() -> None:
        with channel_to(slow) as channel:
            try:
                for message in engine_stub(channel).Generate(
                    generate(IDS, 40, stream=True), timeout=30
                ):
                    received.append(message)
                    started.set()
            except grpc.RpcError as error:
                failures.append(error)
            finally:
                started.set()

    worker = threading.Thread(target=consume)
    worker.start()
    try:
        assert started.wait(10)
        answers: list[tuple[str, int, bool]] = []
        body = {"model": slow.model, "prompt": "hello", "max_tokens": 1}
        with httpx.Client(base_url=slow.url, timeout=TIMEOUT) as client:
            for i in range(20):
                if i % 2:
                    answer = client.get("/health")
                else:
                    answer = client.post("/v1/completions", json=body)
                in_flight = bool(received) and received[-1].WhichOneof("response") == "chunk"
                answers.append((str(answer.url.path), answer.status_code, in_flight))
    finally:
        worker.join(30)
    assert not worker.is_alive()
    assert failures == []
    assert [status for _, status, _ in answers] == [200] * 20, answers
    # The first HTTP answer came while the stream still had most of its 2 seconds to go.
    assert answers[0][2], answers
    assert [m.WhichOneof("response") for m in received] == ["chunk"] * 40 + ["complete"]
    assert received[-1].complete.finish_reason == "length"


# ---- 6. the drain on SIGTERM ----


def test_sigterm_refuses_new_calls_and_finishes_the_one_in_flight() -> None:
    server = SimServer(SLOW).start()
    process = server.process
    assert process is not None
    try:
        with channel_to(server) as channel:
            stub = engine_stub(channel)
            call = stub.Generate(generate(IDS, 40, stream=True), timeout=30)
            first = next(call)
            assert first.WhichOneof("response") == "chunk"
            process.send_signal(signal.SIGTERM)
            # The health service reads the drain at each check: once it says so, the signal
            # has been handled.
            deadline = time.monotonic() + TIMEOUT
            while serving_status(channel) == SERVING:
                assert time.monotonic() < deadline, "the health service never saw the drain"
                time.sleep(0.01)
            health = stub.HealthCheck(pb.HealthCheckRequest(), timeout=TIMEOUT)
            assert not health.healthy
            assert health.message.startswith("server is shutting down")

            # A new call on the open connection reaches the servicer, which refuses it.
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.Generate(generate(IDS, 2), timeout=TIMEOUT))
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert (caught.value.details() or "").startswith("server is shutting down")

            # A new connection: refused the same way, or not accepted at all.
            with channel_to(server) as fresh, pytest.raises(grpc.RpcError) as caught:
                list(engine_stub(fresh).Generate(generate(IDS, 2), timeout=TIMEOUT))
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE

            rest = list(call)
            assert [m.WhichOneof("response") for m in rest] == ["chunk"] * 39 + ["complete"]
            assert rest[-1].complete.finish_reason == "length"
        assert process.wait(35) == 0, server.stderr()
    finally:
        server.stop()


# ---- 7. connections that only look like HTTP/2 ----


def exchange(port: int, parts: Sequence[bytes], timeout: float = 5.0) -> tuple[bytes, bool]:
    """Sends `parts` as separate writes on one connection; returns what came back and
    whether the server closed the connection (False: still open after `timeout` of
    silence)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        for part in parts:
            sock.sendall(part)
            time.sleep(0.05)  # for the server to read each part on its own
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            return received, False
        except ConnectionResetError:
            pass
        return received, True


def still_serving(server: SimServer, channel: grpc.Channel) -> None:
    assert httpx.get(server.url + "/health", timeout=TIMEOUT).status_code == 200
    with channel_to(server) as fresh:
        info = engine_stub(fresh).GetModelInfo(pb.GetModelInfoRequest(), timeout=TIMEOUT)
    assert info.model_path == server.model
    assert serving_status(channel) == SERVING


@pytest.mark.parametrize(
    "parts",
    [
        [PREFACE + b"\xff" * 64 + b"garbage after the preface"],
        [PREFACE, b"\xff" * 64],
        [PREFACE, b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"],
    ],
    ids=["one write", "two writes", "HTTP/1.1 after the preface"],
)
def test_the_preface_then_garbage_is_dropped_without_harm(
    plain: SimServer, channel: grpc.Channel, parts: list[bytes]
) -> None:
    received, closed = exchange(plain.port, parts)
    assert closed
    assert not received.startswith(b"HTTP/"), received  # the gRPC server's to refuse
    still_serving(plain, channel)


@pytest.mark.parametrize("cut", [3, 16, 18, len(PREFACE) - 1])
@pytest.mark.parametrize("split", [False, True], ids=["one write", "two writes"])
def test_part_of_the_preface_then_http_1_1_is_not_http_2(
    plain: SimServer, channel: grpc.Channel, cut: int, split: bool
) -> None:
    start = PREFACE[:cut]
    parts = [start, HEALTH_REQUEST] if split else [start + HEALTH_REQUEST]
    received, closed = exchange(plain.port, parts)
    assert closed
    assert received == b"" or received.startswith(b"HTTP/1.1 400 "), received
    still_serving(plain, channel)


def test_a_preface_split_over_writes_is_still_http_2(plain: SimServer) -> None:
    with socket.create_connection(("127.0.0.1", plain.port), timeout=5) as sock:
        for part in (PREFACE[:1], PREFACE[1:9], PREFACE[9:], EMPTY_SETTINGS):
            sock.sendall(part)
            time.sleep(0.05)
        head = b""
        while len(head) < 9:
            chunk = sock.recv(9 - len(head))
            assert chunk, f"closed after {head!r}"
            head += chunk
    # The server's first frame: SETTINGS (type 4), not an ACK, on stream 0.
    assert head[3] == 0x04
    assert head[4] & 0x01 == 0
    assert head[5:9] == b"\x00\x00\x00\x00"


def test_a_partial_preface_then_eof_is_closed(plain: SimServer, channel: grpc.Channel) -> None:
    with socket.create_connection(("127.0.0.1", plain.port), timeout=5) as sock:
        sock.sendall(PREFACE[:10])
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(65536) == b""
    still_serving(plain, channel)


def test_a_stalled_partial_preface_times_out(plain: SimServer, channel: grpc.Channel) -> None:
    """A start of the preface that never goes on is a request head that never ends: closed
    after --request-read-timeout, like one."""
    received, closed = exchange(plain.port, [PREFACE[:10]], timeout=READ_TIMEOUT + 9)
    assert closed
    assert received == b"", received
    still_serving(plain, channel)


# ---- 8. data-parallel ranks ----


def test_each_data_parallel_rank_serves_grpc_on_its_port() -> None:
    port = consecutive_free_ports(2)
    server = SimServer(["--data-parallel-size", "2"], port=port)
    with server:
        wait_healthy(port + 1)
        for rank in (0, 1):
            with channel_to(server, port + rank) as channel:
                stub = engine_stub(channel)
                info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=TIMEOUT)
                assert info.model_path == server.model
                [load] = stub.GetLoads(pb.GetLoadsRequest(), timeout=TIMEOUT).loads
                assert load.dp_rank == rank
                [message] = list(stub.Generate(generate(IDS, 3), timeout=TIMEOUT))
                assert message.complete.completion_tokens == 3
                assert serving_status(channel) == SERVING


def test_grpc_port_serves_grpc_on_a_port_of_its_own() -> None:
    grpc_port = free_port()
    with SimServer(["--grpc-port", str(grpc_port)]) as server:
        for port in (grpc_port, server.port):
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                info = engine_stub(channel).GetModelInfo(pb.GetModelInfoRequest(), timeout=5)
            assert info.model_path == server.model


def test_a_grpc_port_in_use_stops_the_start_with_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        args = ["--model", "m", "--grpc-port", str(port), "--port", str(free_port())]
        result = run_cli(args, env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1
    assert "cannot serve gRPC on --grpc-port" in result.stderr
