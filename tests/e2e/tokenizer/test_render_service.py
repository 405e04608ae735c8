"""`--render-url`: prompt token ids from an external render service, on the reference's
wire, and a clear 503 naming the service when it cannot answer."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.support.server import SimServer, free_port


class RenderStub:
    """A render service whose next answers the test chooses; it records what it was asked."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.status = 200
        self.answer: bytes | None = None  # None: token ids 1..len(words)
        self.delay = 0.0
        self.announce = True  # False: no Content-Length, the body ends with the connection
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.received.append((self.path, dict(self.headers), body))
                time.sleep(stub.delay)
                payload = stub.answer if stub.answer is not None else stub.default(self.path, body)
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/json")
                if stub.announce:
                    self.send_header("Content-Length", str(len(payload)))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                # The simulator stops reading an answer over its limit.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def default(path: str, body: dict[str, Any]) -> bytes:
        if path.endswith("/chat/completions/render"):
            return json.dumps({"token_ids": list(range(1, 101))}).encode()
        count = len(body["prompt"].split())
        return json.dumps([{"token_ids": list(range(1, count + 1))}]).encode()


@pytest.fixture(scope="module")
def stub() -> Iterator[RenderStub]:
    service = RenderStub()
    yield service
    service.server.shutdown()


@pytest.fixture(scope="module")
def sim(stub: RenderStub) -> Iterator[SimServer]:
    # A second of room: a loaded CI machine once took over 500 ms for a stub's answer.
    args = ["--render-url", stub.url + "/", "--render-timeout", "1s"]
    with SimServer(args, model="org/model") as server:
        yield server


@pytest.fixture(autouse=True)
def reset(stub: RenderStub) -> None:
    stub.received.clear()
    stub.status, stub.answer, stub.delay, stub.announce = 200, None, 0.0, True


def _post(sim: SimServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(sim.url + path, json={"max_tokens": 1, **body}, timeout=30)


def test_completion_prompts_are_counted_by_the_service(sim: SimServer, stub: RenderStub) -> None:
    answer = _post(sim, "/v1/completions", {"prompt": ["one two three", "four five"]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["prompt_tokens"] == 5
    paths = [path for path, _, _ in stub.received]
    assert paths == ["/v1/completions/render"] * 2
    _, headers, body = stub.received[0]
    assert body == {"model": "org/model", "prompt": "one two three"}
    assert headers["Content-Type"] == "application/json"


def test_chat_messages_go_to_the_service_as_sent(sim: SimServer, stub: RenderStub) -> None:
    messages = [{"role": "user", "content": "Hello"}]
    answer = _post(sim, "/v1/chat/completions", {"messages": messages})
    assert answer.json()["usage"]["prompt_tokens"] == 100
    path, _, body = stub.received[0]
    assert path == "/v1/chat/completions/render"
    assert body["model"] == "org/model"
    assert [(m["role"], m["content"]) for m in body["messages"]] == [("user", "Hello")]


def test_token_id_prompts_do_not_ask_the_service(sim: SimServer, stub: RenderStub) -> None:
    answer = _post(sim, "/v1/completions", {"prompt": [5, 6, 7]})
    assert answer.json()["usage"]["prompt_tokens"] == 3 and stub.received == []


@pytest.mark.parametrize(
    ("status", "answer", "reason"),
    [
        (200, b"", "empty response body"),
        (200, b"[]", "render returned empty array"),
        (200, b'{"ids": [1]}', "an answer without token ids"),
        (500, b'{"error": {"message": "boom"}}', "status 500: boom"),
    ],
)
def test_a_failing_service_is_a_503_naming_it(
    sim: SimServer, stub: RenderStub, status: int, answer: bytes, reason: str
) -> None:
    stub.status, stub.answer = status, answer
    failed = _post(sim, "/v1/completions", {"prompt": "hi"})
    assert failed.status_code == 503
    message = failed.json()["error"]["message"]
    assert stub.url in message and reason in message
    assert httpx.get(sim.url + "/health").status_code == 200


def test_a_refusal_of_the_service_is_the_clients_400(sim: SimServer, stub: RenderStub) -> None:
    stub.status, stub.answer = 400, b'{"error": {"message": "bad messages"}}'
    failed = _post(sim, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    assert failed.status_code == 400 and "bad messages" in failed.json()["error"]["message"]


def test_a_slow_service_times_out(sim: SimServer, stub: RenderStub) -> None:
    stub.delay = 3.0
    failed = _post(sim, "/v1/completions", {"prompt": "hi"})
    assert failed.status_code == 503 and "ReadTimeout" in failed.json()["error"]["message"]


def test_a_service_that_is_down_is_a_503_and_the_server_stays_up() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with SimServer(["--render-url", nowhere]) as sim:
        for _ in range(3):
            failed = _post(sim, "/v1/completions", {"prompt": "hi"})
            assert failed.status_code == 503 and nowhere in failed.json()["error"]["message"]
        assert _post(sim, "/v1/completions", {"prompt": [1, 2]}).status_code == 200


# 40 MB of token ids: far more than any prompt of the context needs.
HUGE = json.dumps({"token_ids": list(range(5_000_000))}).encode()


@pytest.mark.parametrize("announce", [True, False], ids=["announced", "unannounced"])
def test_an_answer_over_the_limit_is_a_503_read_no_further(
    sim: SimServer, stub: RenderStub, announce: bool
) -> None:
    stub.answer, stub.announce = HUGE, announce
    failed = _post(sim, "/v1/completions", {"prompt": "hi"})
    assert failed.status_code == 503
    message = failed.json()["error"]["message"]
    assert "over the limit of 1.5 MiB (--render-max-response-mb)" in message, message
    stub.answer = None
    assert _post(sim, "/v1/completions", {"prompt": "one two"}).status_code == 200


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_hundred_huge_answers_at_once_leave_memory_and_health_alone(
    stub: RenderStub,
) -> None:
    """100 requests in flight, each answered 40 MB (announced, as a vLLM render service's
    answers are: refused unread): the server's peak RSS stays under 300 MB and /health
    answers. The health figure is wall-clock time on a shared machine: the bound has room."""
    stub.answer, stub.announce = HUGE, True
    args = ["--render-url", stub.url, "--render-timeout", "30s"]
    with SimServer(args, model="org/model") as sim:
        assert sim.process is not None
        before = _peak_rss_mb(sim.process.pid)
        results: list[int] = []

        def ask() -> None:
            results.append(_post(sim, "/v1/completions", {"prompt": "hi"}).status_code)

        threads = [threading.Thread(target=ask) for _ in range(100)]
        for thread in threads:
            thread.start()
        # Asked from a process of its own: this one is busy with 200 threads.
        probe = (
            "import httpx, time\n"
            "t = time.perf_counter()\n"
            f"r = httpx.get('{sim.url}/health', timeout=30)\n"
            "print(r.status_code, time.perf_counter() - t)\n"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        status, health_s = done.stdout.split()
        for thread in threads:
            thread.join()
        peak = _peak_rss_mb(sim.process.pid)
    assert results == [503] * 100
    assert status == "200" and float(health_s) < 2.0, health_s
    assert peak < 300, f"peak RSS {peak:.0f} MB (at start {before:.0f} MB)"
