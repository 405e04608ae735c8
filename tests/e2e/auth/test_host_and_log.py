"""--host chooses the address the server binds; secrets in a query string never reach the
access log."""

from __future__ import annotations

import httpx

from tests.support.server import SimServer


def reachable(host: str, port: int) -> bool:
    try:
        return httpx.get(f"http://{host}:{port}/health", timeout=2).status_code == 200
    except httpx.ConnectError:
        return False


def test_default_binds_every_address() -> None:
    with SimServer() as sim:
        # 127.0.0.0/8 is all loopback: a wildcard bind answers on 127.0.0.2 too.
        assert reachable("127.0.0.2", sim.port)
        assert "0.0.0.0" in sim.stderr()


def test_host_127_0_0_1_binds_only_there() -> None:
    with SimServer(["--host", "127.0.0.1"]) as sim:
        assert reachable("127.0.0.1", sim.port)
        assert not reachable("127.0.0.2", sim.port)
        assert f"http://127.0.0.1:{sim.port}" in sim.stderr()


def test_host_another_address() -> None:
    with SimServer(["--host", "127.0.0.2"], host="127.0.0.2") as sim:
        assert reachable("127.0.0.2", sim.port)
        assert not reachable("127.0.0.1", sim.port)


def test_access_log_hides_query_secrets() -> None:
    secret = "sk-very-secret-value"
    names = ["api_key", "key", "token", "API_KEY"]
    with SimServer(["--log-http", "--api-key", secret]) as sim:
        for name in names:
            response = httpx.get(f"{sim.url}/v1/models?{name}={secret}&limit=2", timeout=5)
            assert response.status_code == 401  # a query parameter is not a credential
            httpx.get(f"{sim.url}/health?x=1&{name}={secret}", timeout=5)
        log = sim.stderr()
    assert secret not in log
    for name in names:
        assert f"GET /v1/models?{name}=[REDACTED]&limit=2 HTTP/1.1" in log
        assert f"GET /health?x=1&{name}=[REDACTED] HTTP/1.1" in log
