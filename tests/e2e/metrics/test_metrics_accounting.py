"""Every counter and histogram matches what the clients saw.

One scripted mix runs once against a dedicated server (max-num-seqs 1, queue length 1,
TTFT 50 ms, ITL 10 ms): streamed and plain chat and completions, n > 1, several prompts,
a queue overflow, rejected requests, and a client that hangs up mid-stream. The tests then
compare the final /metrics page with the client-side ledger.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_openai_error, assert_validation_error
from tests.support.fixtures import server_fixture
from tests.support.metrics import (
    ADMISSION_REJECTIONS,
    CHAT,
    COMPLETIONS,
    DECODE,
    E2E,
    GENERATION_HIST,
    GENERATION_TOTAL,
    INFERENCE,
    ITL,
    LORA_INFO,
    MAX_GENERATION_HIST,
    PARAMS_MAX_TOKENS,
    PARAMS_N,
    PREFILL,
    PROMPT_HIST,
    PROMPT_TOTAL,
    QUEUE,
    REQUEST_TPOT,
    RUNNING,
    TPOT,
    TTFT,
    WAITING,
    Metrics,
    assert_promtool_clean,
    chat,
    engine_lines,
    scrape,
    timed_stream,
)
from tests.support.server import SimServer

MODEL = "acct-model"
QUEUE_FULL = "Failed to enqueue request, waiting requests queue is full"
ABORT_PROMPT = [7, 8, 9, 10]  # token ids: exactly 4 prompt tokens
ABORT_MAX_TOKENS = 100
ABORT_READ = 3  # tokens the hanging-up client reads first
MAX_MODEL_LEN = 1024  # a chat without max_tokens may use what its prompt leaves of it


@dataclass
class Ledger:
    """What the clients observed, per sub-request (one choice of one prompt)."""

    subs: int = 0
    prompt: int = 0
    completion: int = 0
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    max_tokens: list[int] = field(default_factory=list)  # effective, per sub-request
    parents: list[int] = field(default_factory=list)  # n of each (request, prompt): vLLM's
    waited: int = 0
    rejected: list[int] = field(default_factory=list)

    def add(
        self,
        usage: dict[str, Any],
        n: int,
        reasons: list[str],
        max_tokens: int | None,
        waited: int,
    ) -> None:
        """`usage` counts each prompt once; the engine counts it for each of the n choices.
        Without max_tokens (only chats here) a request may use what its prompt leaves."""
        self.subs += len(reasons)
        self.prompt += usage["prompt_tokens"] * n
        self.completion += usage["completion_tokens"]
        self.reasons.update(reasons)
        if max_tokens is None:
            max_tokens = MAX_MODEL_LEN - usage["prompt_tokens"]
        self.max_tokens += [max_tokens] * len(reasons)
        self.parents += [n] * (len(reasons) // n)
        self.waited += waited


@dataclass
class Scenario:
    sim: SimServer
    ledger: Ledger
    metrics: Metrics
    abort_received: int
    abort_idle_after: float  # seconds from hanging up to running == 0
    overflow_gauges: tuple[float, float]


def _plain(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _wait_for(
    client: httpx.Client, check: Callable[[Metrics], bool], timeout: float = 5.0
) -> Metrics:
    deadline = time.monotonic() + timeout
    while True:
        metrics = scrape(client)
        if check(metrics):
            return metrics
        assert time.monotonic() < deadline, metrics.text[:2000]
        time.sleep(0.005)


def _run_plain(ledger: Ledger, client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    reply = _plain(client, path, body)
    n = body.get("n", 1)
    prompts = len(body["prompt"]) if isinstance(body.get("prompt"), list) else 1
    subs = n * prompts
    reasons = [c["finish_reason"] for c in reply["choices"]]
    assert len(reasons) == subs
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    # max-num-seqs 1 and an idle server: all but the first sub-request wait.
    ledger.add(reply["usage"], n, reasons, limit, subs - 1)


def _run_stream(ledger: Ledger, client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    result = timed_stream(client, path, body)
    assert result.status == 200 and result.done
    n = body.get("n", 1)
    prompts = len(body["prompt"]) if isinstance(body.get("prompt"), list) else 1
    subs = n * prompts
    reasons = result.finish_reasons()
    assert sorted(reasons) == list(range(subs))
    # one SSE event per generated token
    assert len(result.token_times) == result.usage["completion_tokens"]
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    ledger.add(result.usage, n, list(reasons.values()), limit, subs - 1)


def _overflow(ledger: Ledger, sim: SimServer, client: httpx.Client) -> tuple[float, float]:
    """A runs, B waits, C finds the one queue place taken: 429, and nothing recorded."""
    results: dict[str, Any] = {}

    def long_stream() -> None:
        with httpx.Client(base_url=sim.url, timeout=30) as own:
            body = {"prompt": "overflow a", "max_tokens": 30, "ignore_eos": True}
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            results["a"] = timed_stream(own, COMPLETIONS, body)

    def queued_chat() -> None:
        with httpx.Client(base_url=sim.url, timeout=30) as own:
            results["b"] = _plain(own, CHAT, chat("overflow b", max_tokens=3))

    a = threading.Thread(target=long_stream)
    a.start()
    _wait_for(client, lambda m: m.value(RUNNING) == 1)
    b = threading.Thread(target=queued_chat)
    b.start()
    seen = _wait_for(client, lambda m: m.value(WAITING) == 1)
    gauges = (seen.value(RUNNING), seen.value(WAITING))
    for path, body in [
        (COMPLETIONS, {"prompt": "overflow c", "max_tokens": 2}),
        (CHAT, chat("overflow d", max_tokens=2, stream=True)),
    ]:
        refused = client.post(path, json=body)
        assert_openai_error(refused, 429, QUEUE_FULL, error_type="RateLimitError", param=None)
        ledger.rejected.append(429)
    a.join(30)
    b.join(30)
    stream_a = results["a"]
    assert stream_a.status == 200 and stream_a.done
    ledger.add(stream_a.usage, 1, list(stream_a.finish_reasons().values()), 30, 0)
    reply_b = results["b"]
    ledger.add(reply_b["usage"], 1, [reply_b["choices"][0]["finish_reason"]], 3, 1)
    return gauges


def _rejections(ledger: Ledger, client: httpx.Client) -> None:
    """Requests refused before queueing: none of them may touch a metric."""
    headers = {"X-Return-Error": "503"}
    response = client.post(CHAT, json=chat(max_tokens=3), headers=headers)
    assert_openai_error(response, 503, error_type="InternalServerError", param=None)
    response = client.post(COMPLETIONS, json={"prompt": "x", "stream": True}, headers=headers)
    assert_openai_error(response, 503, error_type="InternalServerError", param=None)
    response = client.post(CHAT, json=chat(model="no-such-model", max_tokens=3))
    assert_openai_error(response, 404, error_type="NotFoundError", param="model")
    response = client.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 0})
    assert_openai_error(response, 400, error_type="BadRequestError", param="max_tokens")
    response = client.post(CHAT, content=b"{not json", headers={"content-type": "application/json"})
    assert_validation_error(response, "body.1", "json_invalid")
    ledger.rejected += [503, 503, 404, 400, 400]


def _hang_up(sim: SimServer, client: httpx.Client) -> tuple[int, float]:
    """Reads a few tokens of a long stream, then closes the connection."""
    body = {
        "prompt": ABORT_PROMPT,
        "max_tokens": ABORT_MAX_TOKENS,
        "ignore_eos": True,
        "stream": True,
    }
    received = 0
    with (
        httpx.Client(base_url=sim.url, timeout=30) as own,
        own.stream("POST", COMPLETIONS, json=body) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and '"text":"' in line and '"text":""' not in line:
                received += 1
                if received == ABORT_READ:
                    break
    hung_up = time.monotonic()
    _wait_for(client, lambda m: m.value(RUNNING) == 0)
    return received, time.monotonic() - hung_up


@pytest.fixture(scope="module")
def scenario() -> Iterator[Scenario]:
    args = [
        "--served-model-name", MODEL,
        "--max-num-seqs", "1",
        "--max-waiting-queue-length", "1",
        "--time-to-first-token", "50ms",
        "--inter-token-latency", "10ms",
        "--max-model-len", str(MAX_MODEL_LEN),
    ]  # fmt: skip
    with SimServer(args) as sim, httpx.Client(base_url=sim.url, timeout=30) as client:
        ledger = Ledger()
        _run_plain(ledger, client, CHAT, chat("one plain chat", max_tokens=5))
        _run_stream(ledger, client, CHAT, chat("one streamed chat", max_completion_tokens=6))
        _run_plain(ledger, client, CHAT, chat("two choices", max_tokens=4, n=2))
        _run_plain(ledger, client, CHAT, chat("no limit at all"))
        _run_stream(ledger, client, CHAT, chat("streamed pair", max_tokens=7, n=2))
        _run_plain(ledger, client, COMPLETIONS, {"prompt": ["a b c", "d e"], "max_tokens": 3})
        _run_stream(ledger, client, COMPLETIONS, {"prompt": "one streamed", "max_tokens": 4})
        _run_stream(
            ledger,
            client,
            COMPLETIONS,
            {"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 5, "ignore_eos": True},
        )
        _run_plain(ledger, client, COMPLETIONS, {"prompt": "pair", "n": 2, "max_tokens": 1})
        _rejections(ledger, client)
        gauges = _overflow(ledger, sim, client)
        received, idle_after = _hang_up(sim, client)
        metrics = _wait_for(client, lambda m: m.success(MODEL)["abort"] >= 1)
        time.sleep(0.1)  # nothing more may arrive
        metrics = scrape(client)
        yield Scenario(sim, ledger, metrics, received, idle_after, gauges)


def _abort_generated(s: Scenario) -> int:
    """Tokens the aborted sequence had produced: the generation total over the ledger."""
    generated = int(s.metrics.value(GENERATION_TOTAL) - s.ledger.completion)
    assert s.abort_received <= generated < ABORT_MAX_TOKENS
    return generated


def test_the_mix_was_what_it_should_be(scenario: Scenario) -> None:
    ledger = scenario.ledger
    assert ledger.subs == 16
    assert ledger.waited == 6
    assert ledger.reasons["length"] >= 5  # ignore_eos and max_tokens 1 end as length
    assert ledger.reasons["stop"] >= 1  # no limit: random text stops on its own
    assert set(ledger.reasons) <= {"stop", "length"}
    assert scenario.overflow_gauges == (1.0, 1.0)
    assert scenario.abort_received == ABORT_READ


def test_success_per_finished_reason(scenario: Scenario) -> None:
    expected = {"stop": 0, "length": 0, "error": 0, "repetition": 0, **scenario.ledger.reasons}
    assert scenario.metrics.success(MODEL) == {**expected, "abort": 1}


def test_queue_overflows_count_as_admission_rejections(scenario: Scenario) -> None:
    """The two 429s of the overflow, once per request; no other refusal counts."""
    rejected = scenario.metrics.value(ADMISSION_REJECTIONS, reason="max_num_queued_reqs")
    assert rejected == scenario.ledger.rejected.count(429) == 2
    assert scenario.metrics.value(ADMISSION_REJECTIONS, reason="max_num_queued_tokens") == 0


def test_gauges_back_to_zero(scenario: Scenario) -> None:
    assert scenario.metrics.value(RUNNING) == 0
    assert scenario.metrics.value(WAITING) == 0


@pytest.mark.timing
def test_abort_frees_the_slot_at_once(scenario: Scenario) -> None:
    # Left alone the sequence would run ~1 s more (97 tokens x 10 ms).
    assert scenario.abort_idle_after < 0.5


def test_token_totals(scenario: Scenario) -> None:
    m, ledger = scenario.metrics, scenario.ledger
    # The aborted sequence had its prefill (it streamed tokens), so its prompt counts.
    assert m.value(PROMPT_TOTAL) == ledger.prompt + len(ABORT_PROMPT)
    assert m.value(GENERATION_TOTAL) == ledger.completion + _abort_generated(scenario)


def test_token_histograms(scenario: Scenario) -> None:
    m, ledger = scenario.metrics, scenario.ledger
    ended = ledger.subs + 1
    prompt = m.hist(PROMPT_HIST)
    assert (prompt.count, prompt.sum) == (ended, ledger.prompt + len(ABORT_PROMPT))
    generation = m.hist(GENERATION_HIST)
    assert (generation.count, generation.sum) == (ended, m.value(GENERATION_TOTAL))
    params = m.hist(PARAMS_MAX_TOKENS)
    # every sub-request, the unlimited chat with what its prompt left (vLLM's default)
    effective = [*ledger.max_tokens, ABORT_MAX_TOKENS]
    assert len(effective) == ended
    assert (params.count, params.sum) == (ended, sum(effective))
    assert params.le(1.0) == ledger.max_tokens.count(1)
    assert params.le(5.0) == sum(1 for v in effective if v <= 5)


def test_n_and_longest_choice_are_observed_once_per_parent(scenario: Scenario) -> None:
    """vLLM's parent request is one prompt's n choices: n and the longest choice's tokens
    are observed once for it, when its last choice ends."""
    m, ledger = scenario.metrics, scenario.ledger
    parents = [*ledger.parents, 1]  # and the aborted stream
    n = m.hist(PARAMS_N)
    assert (n.count, n.sum) == (len(parents), sum(parents))
    assert n.le(1.0) == parents.count(1) and n.le(2.0) == len(parents)
    longest, generation = m.hist(MAX_GENERATION_HIST), m.hist(GENERATION_HIST)
    assert longest.count == len(parents)
    assert longest.sum <= generation.sum
    assert all(longest.le(b) <= generation.le(b) for b in longest.buckets)


@pytest.mark.timing
def test_latency_histogram_counts(scenario: Scenario) -> None:
    m, ledger = scenario.metrics, scenario.ledger
    ended = ledger.subs + 1  # every finished sub-request and the aborted one
    for name in (E2E, INFERENCE, TTFT, PREFILL, DECODE, REQUEST_TPOT, QUEUE):
        assert m.hist(name).count == ended, name
    # every sequence that started records its wait, none included; some waited for the slot
    assert m.hist(QUEUE).sum > 0.05 * ledger.waited


def test_inter_token_counts(scenario: Scenario) -> None:
    m, ledger = scenario.metrics, scenario.ledger
    # N tokens -> N-1 gaps per sequence, each measured when its token was released; the
    # aborted one's too.
    expected = ledger.completion - ledger.subs + _abort_generated(scenario) - 1
    assert m.hist(ITL).count == expected
    assert m.hist(TPOT).count == expected
    assert m.hist(TPOT) == m.hist(ITL)


@pytest.mark.timing
def test_latencies_are_measured_around_their_targets(scenario: Scenario) -> None:
    # What the clients saw: a TTFT of at least the 50 ms target, more after waiting for the
    # slot; gaps of about the 10 ms ITL target.
    m = scenario.metrics
    ttft = m.hist(TTFT)
    assert ttft.le(0.04) == 0 and ttft.sum >= 0.05 * ttft.count, (ttft.sum, ttft.count)
    assert ttft.sum > 0.05 * ttft.count + 0.05 * scenario.ledger.waited  # queueing counts
    itl = m.hist(ITL)
    assert 0.009 * itl.count <= itl.sum <= 0.02 * itl.count, (itl.sum, itl.count)


@pytest.mark.timing
def test_measured_latencies_are_consistent(scenario: Scenario) -> None:
    m = scenario.metrics
    ttft, itl, prefill = m.hist(TTFT), m.hist(ITL), m.hist(PREFILL)
    queue = m.hist(QUEUE)
    ended = ttft.count
    # the TTFT is the wait for a slot plus the prefill (and the moment to read the request)
    waited = queue.sum + prefill.sum
    assert waited - 0.001 * ended <= ttft.sum <= waited + 0.05 * ended
    # e2e covers prefill and decode of each sequence, and includes queueing
    assert m.hist(E2E).sum >= m.hist(INFERENCE).sum
    assert m.hist(E2E).sum >= m.hist(QUEUE).sum + prefill.sum
    assert m.hist(INFERENCE).sum >= prefill.sum + m.hist(DECODE).sum - 0.001 * ended
    assert m.hist(DECODE).sum >= 0.9 * itl.sum


def test_lora_info_untouched_by_base_model_traffic(scenario: Scenario) -> None:
    [(labels, _)] = scenario.metrics.series(LORA_INFO)
    assert labels == {"max_lora": "1", "running_lora_adapters": "", "waiting_lora_adapters": ""}


def test_promtool_after_traffic(scenario: Scenario) -> None:
    assert_promtool_clean(scenario.metrics.text)


# ----------------------------------------------------------------- with std-dev


_JITTERY_ARGS = [
    "--time-to-first-token", "50ms",
    "--time-to-first-token-std-dev", "15ms",
    "--inter-token-latency", "10ms",
    "--inter-token-latency-std-dev", "3ms",
]  # fmt: skip
jittery = server_fixture(_JITTERY_ARGS)


@pytest.mark.timing
def test_std_dev_observations_stay_within_the_clamp(jittery: SimServer) -> None:
    """Sampled values are clamped to [30%, 170%] of the mean: TTFT in [15, 85] ms."""
    with httpx.Client(base_url=jittery.url, timeout=30) as client:
        for i in range(10):
            body = {"prompt": f"jitter {i}", "n": 5, "max_tokens": 3, "ignore_eos": True}
            assert client.post(COMPLETIONS, json=body).status_code == 200
        m = scrape(client)
    ttft, itl = m.hist(TTFT), m.hist(ITL)
    assert ttft.count == 50
    assert ttft.le(0.01) == 0  # none below 15 ms
    assert ttft.le(0.1) == 50  # none above 85 ms
    assert 0.015 * 50 <= ttft.sum <= 0.085 * 50
    # the std-dev has an effect: some observations on either side of the mean
    assert ttft.le(0.04) > 0
    assert ttft.le(0.06) < 50
    assert itl.count == 100
    assert 0.003 * 100 <= itl.sum <= 0.017 * 100
    assert itl.le(0.025) == 100
    assert itl.le(0.01) < 100


# ----------------------------------------------------------------- early disconnects


slow = server_fixture(["--max-num-seqs", "1", "--time-to-first-token", "800ms"])


def test_disconnects_before_the_first_token(slow: SimServer) -> None:
    """Hang-ups while queued or before the first token abort once each, and count as
    stats.py says: the prompt is observed, but prefill never happened, so the prompt
    total, TTFT, queue time (it never left the queue) and decode stay untouched."""
    with httpx.Client(base_url=slow.url, timeout=30) as client:
        before = scrape(client)
        result: dict[str, Any] = {}

        def occupy() -> None:
            with httpx.Client(base_url=slow.url, timeout=30) as own:
                result["a"] = _plain(own, CHAT, chat("slot holder", max_tokens=2))

        holder = threading.Thread(target=occupy)
        holder.start()
        _wait_for(client, lambda m: m.value(RUNNING) == 1)
        # B: a plain request that gives up while queued
        with (
            httpx.Client(base_url=slow.url, timeout=0.3) as impatient,
            pytest.raises(httpx.ReadTimeout),
        ):
            impatient.post(COMPLETIONS, json={"prompt": [1, 2, 3], "max_tokens": 2})
        _wait_for(client, lambda m: m.value(WAITING) == 0, timeout=0.5)
        # C: a stream that is admitted to the queue, then dropped
        with (
            httpx.Client(base_url=slow.url, timeout=30) as own,
            own.stream(
                "POST", COMPLETIONS, json={"prompt": [4, 5], "max_tokens": 2, "stream": True}
            ) as response,
        ):
            assert response.status_code == 200
            assert scrape(client).value(WAITING) == 1
        _wait_for(client, lambda m: m.value(WAITING) == 0, timeout=0.5)
        holder.join(30)
        # D: a plain request that gives up while running, before its first token
        with (
            httpx.Client(base_url=slow.url, timeout=0.3) as impatient,
            pytest.raises(httpx.ReadTimeout),
        ):
            impatient.post(COMPLETIONS, json={"prompt": [6, 7, 8, 9], "max_tokens": 2})
        _wait_for(client, lambda m: m.value(RUNNING) == 0, timeout=0.5)
        time.sleep(0.9)  # long enough for D to have finished, had it not been aborted
        after = scrape(client)

    def delta(name: str) -> float:
        return after.value(name) - before.value(name)

    a = result["a"]
    reason = a["choices"][0]["finish_reason"]
    success = {k: v - before.success(slow.model)[k] for k, v in after.success(slow.model).items()}
    assert success == {"stop": 0, "length": 0, "error": 0, "repetition": 0, reason: 1, "abort": 3}
    assert delta(PROMPT_TOTAL) == a["usage"]["prompt_tokens"]
    assert delta(GENERATION_TOTAL) == a["usage"]["completion_tokens"]
    assert delta(PROMPT_HIST + "_count") == 4
    assert delta(PROMPT_HIST + "_sum") == a["usage"]["prompt_tokens"] + 3 + 2 + 4
    assert delta(GENERATION_HIST + "_count") == 4
    assert delta(PARAMS_MAX_TOKENS + "_count") == 4
    assert delta(E2E + "_count") == 4
    assert delta(INFERENCE + "_count") == 2  # A and D started
    assert delta(QUEUE + "_count") == 2  # A and D were scheduled; B and C never were
    for name in (TTFT, PREFILL, DECODE, REQUEST_TPOT):
        assert delta(name + "_count") == 1, name  # only A reached its first token
    assert after.value(RUNNING) == 0 and after.value(WAITING) == 0


# ----------------------------------------------------------------- two slots


two_slots = server_fixture(
    ["--max-num-seqs", "2", "--time-to-first-token", "500ms", "--max-model-len", "64"]
)


def _deltas(before: Metrics, after: Metrics, *names: str) -> list[float]:
    return [after.value(n) - before.value(n) for n in names]


def test_gauges_with_two_slots_and_three_requests(two_slots: SimServer) -> None:
    with httpx.Client(base_url=two_slots.url, timeout=30) as client:
        before = scrape(client)
        statuses: list[int] = []

        def one(i: int) -> None:
            with httpx.Client(base_url=two_slots.url, timeout=30) as own:
                body = chat(f"concurrent {i}", max_tokens=2)
                statuses.append(own.post(CHAT, json=body).status_code)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        _wait_for(client, lambda m: (m.value(RUNNING), m.value(WAITING)) == (2, 1))
        for thread in threads:
            thread.join(30)
        assert statuses == [200, 200, 200]
        after = _wait_for(client, lambda m: (m.value(RUNNING), m.value(WAITING)) == (0, 0))
        assert _deltas(before, after, E2E + "_count", QUEUE + "_count") == [3, 3]

        # one completion with three prompts: three sub-requests, the third one queued
        result: dict[str, Any] = {}

        def three_prompts() -> None:
            with httpx.Client(base_url=two_slots.url, timeout=30) as own:
                body = {"prompt": ["p one", "p two", "p three"], "max_tokens": 2}
                result["reply"] = _plain(own, COMPLETIONS, body)

        thread = threading.Thread(target=three_prompts)
        thread.start()
        _wait_for(client, lambda m: (m.value(RUNNING), m.value(WAITING)) == (2, 1))
        thread.join(30)
        final = scrape(client)
    assert len(result["reply"]["choices"]) == 3
    assert _deltas(after, final, E2E + "_count", QUEUE + "_count") == [3, 3]
    assert (
        sum(final.success(two_slots.model).values()) - sum(after.success(two_slots.model).values())
        == 3
    )


def test_prompt_and_max_tokens_buckets(two_slots: SimServer) -> None:
    """A 25-token prompt with max_tokens 25: nothing up to le=20, one from le=50 on. A
    completion that sets no max_tokens has vLLM's default, 16, observed as such."""
    with httpx.Client(base_url=two_slots.url, timeout=30) as client:
        before = scrape(client)
        body = {"prompt": list(range(1, 26)), "max_tokens": 25}
        assert _plain(client, COMPLETIONS, body)["usage"]["prompt_tokens"] == 25
        middle = scrape(client)
        assert _plain(client, COMPLETIONS, {"prompt": list(range(1, 26))})
        after = scrape(client)
    for name in (PROMPT_HIST, PARAMS_MAX_TOKENS):
        old, new = before.hist(name), middle.hist(name)
        for bound in (1.0, 2.0, 5.0, 10.0, 20.0):
            assert new.le(bound) == old.le(bound), (name, bound)
        for bound in (50.0, float("inf")):
            assert new.le(bound) == old.le(bound) + 1, (name, bound)
    old, new = middle.hist(PARAMS_MAX_TOKENS), after.hist(PARAMS_MAX_TOKENS)
    assert (new.count, new.sum) == (old.count + 1, old.sum + 16)
    assert new.le(10.0) == old.le(10.0) and new.le(20.0) == old.le(20.0) + 1
    assert after.hist(PROMPT_HIST).count == middle.hist(PROMPT_HIST).count + 1


def test_context_length_rejection_records_nothing(two_slots: SimServer) -> None:
    with httpx.Client(base_url=two_slots.url, timeout=30) as client:
        before = scrape(client)
        body = {"prompt": list(range(1, 61)), "max_tokens": 10}
        response = client.post(COMPLETIONS, json=body)
        error = assert_openai_error(
            response, 400, error_type="BadRequestError", param="input_tokens"
        )
        assert error["message"].startswith("This model's maximum context length is 64 tokens.")
        after = scrape(client)
    # Only the HTTP families (a 400 was answered) and the process's own change.
    assert engine_lines(after) == engine_lines(before)
