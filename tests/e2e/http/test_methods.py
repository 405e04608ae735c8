"""HEAD and OPTIONS on the wire: a HEAD answer, whatever its status, carries no body bytes,
so the next answer on the connection parses from its first byte; a CORS preflight from an
allowed origin is answered 200 with access-control-allow-origin, and from any origin on a
server that allows none, 400 "Disallowed CORS origin"."""

from __future__ import annotations

import pytest

from tests.e2e.http.wire_client import Client, exchange, parse, request
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

ORIGIN = "https://ui.example"
cors = server_fixture(["--allowed-origins", f'["{ORIGIN}"]'])
PREFLIGHT = [("Origin", ORIGIN), ("Access-Control-Request-Method", "GET")]


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/v1/chat/completions", "/nope"])
def test_a_head_answer_has_no_body_bytes(sim: SimServer, path: str) -> None:
    # On the wire: the HEAD answer's head, then at once the next answer's status line.
    data = exchange(sim, request("HEAD", path) + request("GET", "/v1/models", close=True))
    head, models = parse(data, ["HEAD", "GET"])
    assert models.status == 200 and models.json()["object"] == "list"
    assert head.body == b""
    first_end = data.index(b"\r\n\r\n") + 4
    assert data[first_end:].startswith(b"HTTP/1.1 200 ")


def test_head_requests_keep_the_connection_usable(sim: SimServer) -> None:
    with Client(sim) as client:
        statuses = []
        for method, path in [("HEAD", "/health"), ("HEAD", "/v1/models"), ("GET", "/health")]:
            reply = client.send(method, path)
            assert reply.body == b""
            statuses.append(reply.status)
        models = client.send("GET", "/v1/models")
    assert statuses[-1] == 200
    assert models.json()["object"] == "list"


def test_a_preflight_from_an_allowed_origin_is_a_200(cors: SimServer) -> None:
    with Client(cors) as client:
        reply = client.send("OPTIONS", "/v1/models", PREFLIGHT)
        assert reply.status == 200
        assert reply.header("access-control-allow-origin") == ORIGIN.encode()
        assert reply.header("content-length") == str(len(reply.body)).encode()
        # The answer is framed right: the connection goes on.
        after = client.send("GET", "/v1/models", [("Origin", ORIGIN)])
    assert after.status == 200
    assert after.header("access-control-allow-origin") == ORIGIN.encode()


def test_a_preflight_is_refused_where_no_origin_is_allowed(sim: SimServer) -> None:
    with Client(sim) as client:
        reply = client.send("OPTIONS", "/v1/models", PREFLIGHT)
        assert reply.status == 400
        assert b"Disallowed CORS origin" in reply.body
        assert reply.header("access-control-allow-origin") is None
        assert client.send("GET", "/health").status == 200
