"""Latency as a client sees it: TTFT, inter-token pacing, calculators and the load factor.

Bounds are generous (shared 2-core machines); lower bounds are strict because the engine
never releases a token before its deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.support.async_http import Outcome, chat_body, completion_body, post, run_with_client
from tests.support.fixtures import server_fixture
from tests.support.server import SimServer

TOKENS = 10
pytestmark = pytest.mark.timing  # every test here asserts wall-clock latency windows

SLACK = 0.005  # the engine may release a token up to 0.5 ms early


def start_all(*arg_lists: list[str]) -> list[SimServer]:
    servers: list[SimServer] = []
    try:
        for args in arg_lists:
            servers.append(SimServer(args).start())
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


# TTFT 100 ms, ITL 50 ms, no load factor.
paced = server_fixture(
    ["--max-num-seqs", "8", "--time-to-first-token", "100ms", "--inter-token-latency", "50ms"]
)


# As `paced`, but 2 slots and time-factor-under-load 3.
_LOADED = [
    "--max-num-seqs", "2",
    "--time-to-first-token", "100ms",
    "--inter-token-latency", "50ms",
    "--time-factor-under-load", "3",
]  # fmt: skip
loaded = server_fixture(_LOADED)


@pytest.fixture(scope="module")
def calculators() -> Iterator[dict[str, SimServer]]:
    prefill = ["--prefill-overhead", "1s", "--prefill-time-per-token", "50ms"]
    fast_prefill = ["--prefill-overhead", "200ms", "--prefill-time-per-token", "20ms"]
    names = ["legacy", "constant", "per-token"]
    servers = start_all(
        prefill,
        [*prefill, "--latency-calculator", "constant"],
        ["--latency-calculator", "per-token", "--time-to-first-token", "3s", *fast_prefill],
    )
    yield dict(zip(names, servers, strict=True))
    for server in servers:
        server.stop()


def paced_body(sim: SimServer, chat: bool, stream: bool) -> dict[str, object]:
    make = chat_body if chat else completion_body
    return make(sim, max_tokens=TOKENS, ignore_eos=True, stream=stream)


def check_stream_pacing(outcome: Outcome, ttft: float, itl: float) -> None:
    assert outcome.status == 200 and outcome.done
    times = outcome.token_times
    assert len(times) == TOKENS
    assert ttft - SLACK <= times[0] <= ttft + 0.3, f"first token at {times[0]:.3f}s"
    assert outcome.elapsed >= ttft + (TOKENS - 1) * itl - SLACK
    assert outcome.elapsed <= ttft + (TOKENS - 1) * itl + 0.6
    mean_gap = (times[-1] - times[0]) / (TOKENS - 1)
    assert itl * 0.8 <= mean_gap <= itl * 1.6, f"mean gap {mean_gap:.3f}s"
    # No token comes earlier than its absolute deadline after the first.
    for i, t in enumerate(times):
        assert t - times[0] >= i * itl - 0.02, f"token {i} early"


def test_streaming_ttft_and_inter_token_pacing(paced: SimServer) -> None:
    async def body(client: httpx.AsyncClient) -> None:
        completions = paced.openai_url + "/completions"
        chat = paced.openai_url + "/chat/completions"
        outcomes = await asyncio.gather(
            post(client, completions, paced_body(paced, chat=False, stream=True)),
            post(client, chat, paced_body(paced, chat=True, stream=True)),
            post(client, completions, paced_body(paced, chat=False, stream=False)),
            post(client, chat, paced_body(paced, chat=True, stream=False)),
        )
        for streamed in outcomes[:2]:
            check_stream_pacing(streamed, 0.1, 0.05)
        for whole in outcomes[2:]:
            assert whole.status == 200
            assert whole.json()["usage"]["completion_tokens"] == TOKENS
            assert 0.55 - SLACK <= whole.elapsed <= 0.55 + 0.6

    run_with_client(body)


def test_streaming_sends_nothing_generated_before_ttft(paced: SimServer) -> None:
    async def body(client: httpx.AsyncClient) -> None:
        url = paced.openai_url + "/chat/completions"
        outcome = await post(client, url, paced_body(paced, chat=True, stream=True))
        assert outcome.events, "no events"
        first_time, first = outcome.events[0]
        # The role chunk and the first token go out together, at TTFT.
        assert first["choices"][0]["delta"].get("role") == "assistant"
        assert first_time >= 0.1 - SLACK
        assert outcome.token_times[0] - first_time < 0.03

    run_with_client(body)


def test_load_factor_slows_requests_when_all_slots_are_busy(loaded: SimServer) -> None:
    async def body(client: httpx.AsyncClient) -> None:
        url = loaded.openai_url + "/completions"
        alone = await post(client, url, paced_body(loaded, chat=False, stream=True))
        check_stream_pacing(alone, 0.1, 0.05)
        both = await asyncio.gather(
            post(client, url, paced_body(loaded, chat=False, stream=True)),
            post(client, url, paced_body(loaded, chat=False, stream=True)),
        )
        assert all(o.status == 200 and len(o.token_times) == TOKENS for o in both)
        # The second to start sees 2 of 2 slots busy: TTFT x 3.
        assert max(o.token_times[0] for o in both) >= 0.3 - SLACK
        # While both run every inter-token delay is 150 ms, not 50 ms: each one's
        # first 7 gaps (both surely still running) take at least 7 x 150 ms.
        for o in both:
            assert o.token_times[7] - o.token_times[0] >= 7 * 0.15 - 0.02
            assert o.elapsed >= 1.25
        assert alone.elapsed < 1.0

    run_with_client(body)


def test_prefill_calculators(calculators: dict[str, SimServer]) -> None:
    """Legacy: per-token when TTFT is 0; constant ignores prefill; per-token ignores TTFT."""

    async def body(client: httpx.AsyncClient) -> None:

        async def measure(name: str, prompt: str, stream: bool) -> Outcome:
            sim = calculators[name]
            request = completion_body(sim, prompt=prompt, max_tokens=1, stream=stream)
            return await post(client, sim.openai_url + "/completions", request)

        five = "This is a test."  # 5 tokens
        ten = "This is a test. This is a test."  # 10 tokens
        (
            legacy5,
            legacy10,
            legacy_stream,
            constant5,
            constant10,
            per_token,
        ) = await asyncio.gather(
            measure("legacy", five, False),
            measure("legacy", ten, False),
            measure("legacy", five, True),
            measure("constant", five, False),
            measure("constant", ten, False),
            measure("per-token", ten, False),
        )
        assert legacy5.status == 200 and legacy5.json()["usage"]["prompt_tokens"] == 5
        assert legacy10.json()["usage"]["prompt_tokens"] == 10
        # 1 s + 5 x 50 ms, and 1 s + 10 x 50 ms
        assert 1.25 - SLACK <= legacy5.elapsed <= 1.25 + 0.6
        assert 1.5 - SLACK <= legacy10.elapsed <= 1.5 + 0.6
        assert 1.25 - SLACK <= legacy_stream.token_times[0] <= 1.25 + 0.6
        # constant with TTFT 0: prefill parameters ignored, instant
        assert constant5.status == constant10.status == 200
        assert constant5.elapsed < 0.4 and constant10.elapsed < 0.4
        # per-token ignores the 3 s TTFT: 200 ms + 10 x 20 ms
        assert per_token.status == 200
        assert 0.4 - SLACK <= per_token.elapsed <= 0.4 + 0.6

    run_with_client(body)
