"""POST /pause, POST /resume, GET /is_paused (dev mode), as RL trainers use them around a
weight update: abort, wait and keep, on a real server with real streams."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import chat_body, json_ok, post
from tests.support.metrics import scrape

pytestmark = pytest.mark.timing

TOKENS = 30
paused_sim = server_fixture(
    ["--inter-token-latency", "40ms", "--max-num-seqs", "4"],
    env={"VLLM_SERVER_DEV_MODE": "1"},
)
client = http_fixture("paused_sim", scope="function")


@pytest.fixture(autouse=True)
def resumed_after(client: httpx.Client) -> Iterator[None]:
    """A failed test must not leave the shared server paused for the next ones."""
    yield
    client.post("/resume")


def _is_paused(client: httpx.Client) -> bool:
    body = json_ok(client.get("/is_paused"))
    assert set(body) == {"is_paused"}
    state: bool = body["is_paused"]
    return state


class Streamed:
    """A chat stream read on a thread: its content chunks, with their arrival times."""

    def __init__(self, client: httpx.Client, max_tokens: int = TOKENS) -> None:
        self.times: list[float] = []
        self.chunks: list[dict[str, Any]] = []
        body = chat_body(max_tokens=max_tokens, ignore_eos=True, stream=True)
        self._thread = threading.Thread(target=self._read, args=(str(client.base_url), body))
        self._thread.start()

    def _read(self, url: str, body: dict[str, Any]) -> None:
        with (
            httpx.Client(base_url=url, timeout=30) as own,
            own.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    self.chunks.append(json.loads(line[6:]))
                    self.times.append(time.monotonic())

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + 10
        while len(self.chunks) < count:
            assert time.monotonic() < deadline, "the stream stalled"
            time.sleep(0.01)

    def join(self) -> None:
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()

    @property
    def tokens(self) -> int:
        """Chunks that carry a token (not the role chunk, nor a finish-only chunk)."""
        return sum(1 for c in self.chunks if c["choices"][0]["delta"].get("content"))

    @property
    def finish_reason(self) -> str:
        reason: str = self.chunks[-1]["choices"][0]["finish_reason"]
        return reason


def _later(action: Callable[[], httpx.Response]) -> Callable[[], httpx.Response]:
    """Runs `action` on a thread now; the returned call waits for its answer."""
    result: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: result.append(action()))
    thread.start()

    def answer() -> httpx.Response:
        thread.join(timeout=30)
        return result[0]

    return answer


def test_abort_ends_streams_with_what_they_had(client: httpx.Client) -> None:
    stream = Streamed(client)
    stream.wait_for(4)
    paused = json_ok(client.post("/pause"))  # abort is the default mode
    assert paused == {"status": "paused"}
    assert _is_paused(client)
    stream.join()
    assert stream.finish_reason == "abort"
    assert 3 <= stream.tokens < TOKENS
    queued = _later(lambda: post(client, "/v1/chat/completions", chat_body(max_tokens=2)))
    time.sleep(0.4)
    assert json_ok(client.post("/resume")) == {"status": "resumed"}
    assert not _is_paused(client)
    answer = json_ok(queued())  # it waited for the resume, then ran
    assert answer["choices"][0]["finish_reason"] in ("stop", "length")


def test_non_streamed_request_aborted_by_pause(client: httpx.Client) -> None:
    aborted = scrape(client).success("test-model").get("abort", 0.0)
    body = chat_body(max_tokens=TOKENS, ignore_eos=True)
    pending = _later(lambda: post(client, "/v1/chat/completions", body))
    time.sleep(0.3)
    assert client.post("/pause", params={"mode": "abort"}).status_code == 200
    answer = json_ok(pending())
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "abort"
    assert 0 < answer["usage"]["completion_tokens"] < TOKENS
    # vLLM counts a request its engine aborted under finished_reason="abort".
    assert scrape(client).success("test-model")["abort"] == aborted + 1
    assert client.post("/resume").status_code == 200


def test_keep_freezes_streams_until_resume(client: httpx.Client) -> None:
    stream = Streamed(client, max_tokens=12)
    stream.wait_for(3)
    assert client.post("/pause", params={"mode": "keep"}).status_code == 200
    frozen_at = len(stream.chunks)
    time.sleep(0.6)
    assert len(stream.chunks) <= frozen_at + 1  # at most one token already on its way
    resumed = time.monotonic()
    assert client.post("/resume").status_code == 200
    stream.join()
    assert stream.finish_reason == "length"
    assert stream.tokens == 12
    assert stream.times[-1] > resumed


def test_wait_answers_once_running_requests_finished(client: httpx.Client) -> None:
    stream = Streamed(client, max_tokens=10)
    stream.wait_for(2)
    started = time.monotonic()
    assert json_ok(client.post("/pause", params={"mode": "wait"})) == {"status": "paused"}
    stream.join()
    assert stream.finish_reason == "length" and stream.tokens == 10
    assert stream.times[-1] <= time.monotonic()
    assert time.monotonic() - started > 0.2  # the pause answered after the stream's end
    queued = _later(lambda: post(client, "/v1/chat/completions", chat_body(max_tokens=1)))
    time.sleep(0.3)
    assert _is_paused(client)
    assert client.post("/resume").status_code == 200
    json_ok(queued())


def test_deprecated_wait_flag_and_bad_parameters(client: httpx.Client) -> None:
    stream = Streamed(client, max_tokens=5)
    stream.wait_for(2)
    params = {"wait_for_inflight_requests": "true", "clear_cache": "false"}
    assert client.post("/pause", params=params).status_code == 200
    stream.join()
    assert stream.finish_reason == "length"  # waited for, not aborted
    assert client.post("/resume").status_code == 200
    bad_mode = client.post("/pause", params={"mode": "later"})
    assert_openai_error(bad_mode, 400, param="mode", contains="abort, wait, keep")
    bad_flag = client.post("/pause", params={"clear_cache": "maybe"})
    assert_openai_error(bad_flag, 400, param="clear_cache")
    assert not _is_paused(client)
    assert client.get("/pause").status_code == 405
    assert client.post("/is_paused").status_code == 405


def test_a_paused_engine_reads_as_sleeping(client: httpx.Client) -> None:
    """vLLM 0.32's /is_sleeping counts a paused scheduler as sleeping."""
    assert client.get("/is_sleeping").json() == {"is_sleeping": False}
    json_ok(client.post("/pause"))
    assert client.get("/is_sleeping").json() == {"is_sleeping": True}
    json_ok(client.post("/resume"))
    assert client.get("/is_sleeping").json() == {"is_sleeping": False}
