"""Speculative decoding through the real server: `--speculative-config` registers vLLM's four
spec_decode counters (with `model_name` and `engine`, each draft position its own series),
whose counts add up to the tokens the clients received; without it they are absent. At
acceptance 1 the counts are exact, a stream's tokens come in bursts of k + 1, and gRPC's
answer reports its request's drafts."""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import pairwise

import grpc
import httpx
import pytest

from tests.support.grpc_client import engine_stub
from tests.support.metrics import (
    COMPLETIONS,
    GENERATION_TOTAL,
    ITL,
    Metrics,
    scrape,
    timed_stream,
)
from tests.support.server import SimServer, free_port, run_cli
from vllm_sim.proto import engine_pb2 as pb

NGRAM = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
K = 3
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
MAX_TOKENS = (1, 2, 7, 20, 33, 50, 64, 100)


@pytest.fixture(scope="module")
def spec_sim() -> Iterator[SimServer]:
    """Speculation at the default acceptance (0.7), under the token clock with no latency."""
    with SimServer(["--speculative-config", NGRAM], model="spec-model") as server:
        yield server


@pytest.fixture(scope="module")
def sure_sim() -> Iterator[SimServer]:
    """Every draft accepted, one verification step every 40 ms."""
    args = [
        "--speculative-config", NGRAM, "--spec-acceptance-rate", "1",
        "--inter-token-latency", "40ms",
    ]  # fmt: skip
    with SimServer(args, model="sure-model") as server:
        yield server


def complete(client: httpx.Client, model: str, max_tokens: int) -> int:
    """One completion of exactly `max_tokens` tokens; its usage's completion_tokens."""
    body = {"model": model, "prompt": "a b c d", "max_tokens": max_tokens, "ignore_eos": True}
    answer = client.post(COMPLETIONS, json=body)
    assert answer.status_code == 200, answer.text
    tokens: int = answer.json()["usage"]["completion_tokens"]
    assert tokens == max_tokens
    return tokens


def counts(metrics: Metrics) -> tuple[float, float, float, list[float]]:
    """(drafts, draft tokens, accepted, accepted by position) of engine 0."""
    per_pos = [metrics.value(PER_POS, position=str(p), engine="0") for p in range(K)]
    return (
        metrics.value(DRAFTS, engine="0"),
        metrics.value(DRAFT_TOKENS, engine="0"),
        metrics.value(ACCEPTED, engine="0"),
        per_pos,
    )


def test_the_four_families_are_there_from_the_start(spec_sim: SimServer) -> None:
    with httpx.Client(base_url=spec_sim.url) as client:
        metrics = scrape(client)
    for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
        [(labels, value)] = metrics.series(name)
        assert labels == {"model_name": "spec-model", "engine": "0"}
        assert value == 0
        assert metrics.series(name.removesuffix("_total") + "_created")
    positions = sorted(labels["position"] for labels, _ in metrics.series(PER_POS))
    assert positions == ["0", "1", "2"]
    assert all(labels["model_name"] == "spec-model" for labels, _ in metrics.series(PER_POS))
    assert metrics.types["vllm:spec_decode_num_drafts"] == "counter"
    assert metrics.help["vllm:spec_decode_num_accepted_tokens_per_pos"] == (
        "Accepted tokens per draft position."
    )


def test_the_counts_add_up_to_the_tokens_sent(spec_sim: SimServer) -> None:
    """Every token after a request's first comes from a verification: tokens sent =
    requests + drafts + accepted, less the accepted drafts past each answer's end (at most
    k a request). Each step is one draft of k tokens and one ITL observation."""
    with httpx.Client(base_url=spec_sim.url, timeout=30) as client:
        before = scrape(client)
        sent = sum(complete(client, "spec-model", m) for m in MAX_TOKENS)
        after = scrape(client)
    drafts, draft_tokens, accepted = (
        a - b for a, b in zip(counts(after)[:3], counts(before)[:3], strict=True)
    )
    assert after.value(GENERATION_TOTAL) - before.value(GENERATION_TOTAL) == sent
    assert draft_tokens == K * drafts
    assert sum(counts(after)[3]) - sum(counts(before)[3]) == accepted
    assert counts(after)[3] == sorted(counts(after)[3], reverse=True)  # a chain
    requests = len(MAX_TOKENS)
    cut = requests + drafts + accepted - sent
    assert 0 <= cut <= K * requests
    assert drafts >= sum(m - 1 for m in MAX_TOKENS) / (K + 1)  # no step makes more than k + 1
    assert 0.3 < accepted / draft_tokens < 0.8  # about (a + a^2 + a^3) / 3 = 0.51
    itl = after.hist(ITL).count - before.hist(ITL).count
    assert itl == drafts  # one observation per step, however many tokens it made


def test_without_the_flag_there_are_no_such_families(http: httpx.Client) -> None:
    complete(http, "test-model", 5)
    assert "vllm:spec_decode" not in scrape(http).text


def test_at_acceptance_one_the_counts_are_exact(sure_sim: SimServer) -> None:
    """m tokens: the prefill's, then ceil((m - 1) / 4) steps of 4 drafts accepted each."""
    with httpx.Client(base_url=sure_sim.url, timeout=30) as client:
        before = counts(scrape(client))
        for m in (1, 5, 6, 13):
            complete(client, "sure-model", m)
        after = counts(scrape(client))
    steps = sum(math.ceil((m - 1) / (K + 1)) for m in (1, 5, 6, 13))
    assert after[0] - before[0] == steps == 6
    assert after[1] - before[1] == K * steps
    assert after[2] - before[2] == K * steps
    assert [a - b for a, b in zip(after[3], before[3], strict=True)] == [steps] * K


@pytest.mark.timing
def test_a_streams_tokens_come_in_bursts_of_k_plus_one(sure_sim: SimServer) -> None:
    """13 tokens: the first, then three steps 40 ms apart, each sending 4 tokens at once,
    still one chunk per token."""
    body = {"model": "sure-model", "prompt": "a b", "max_tokens": 13, "ignore_eos": True}
    with httpx.Client(base_url=sure_sim.url, timeout=30) as client:
        timed = timed_stream(client, COMPLETIONS, {**body, "stream": True})
    times = timed.token_times
    assert len(times) == 13
    bursts = [1]
    for previous, current in pairwise(times):
        if current - previous > 0.02:
            bursts.append(1)
        else:
            bursts[-1] += 1
    assert bursts == [1, 4, 4, 4]


def test_an_admin_update_changes_the_acceptance(sure_sim: SimServer) -> None:
    with httpx.Client(base_url=sure_sim.url, timeout=30) as client:
        assert client.post("/admin/config", json={"spec-acceptance-rate": 0}).status_code == 200
        try:
            before = counts(scrape(client))
            complete(client, "sure-model", 6)
            after = counts(scrape(client))
        finally:
            client.post("/admin/config", json={"spec-acceptance-rate": 1})
    assert after[0] - before[0] == 5  # one token a step
    assert after[2] - before[2] == 0


def test_grpc_reports_the_drafts_of_its_request(sure_sim: SimServer) -> None:
    params = pb.SamplingParams(max_tokens=9, ignore_eos=True)
    request = pb.GenerateRequest(
        tokenized=pb.TokenizedInput(input_ids=[5, 6, 7]), sampling_params=params
    )
    with grpc.insecure_channel(f"127.0.0.1:{sure_sim.port}") as channel:
        [message] = list(engine_stub(channel).Generate(request, timeout=30))
    complete = message.complete
    assert complete.completion_tokens == 9
    assert (complete.spec_draft_tokens, complete.spec_accepted_tokens) == (2 * K, 2 * K)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ('{"method":"ngram"}', "num_speculative_tokens is required with method ngram"),
        ('{"method":"ngram","num_speculative_tokens":0}',
         "num_speculative_tokens must be a positive integer, not 0"),
    ],
)  # fmt: skip
def test_a_bad_config_stops_the_server_with_one_line(value: str, reason: str) -> None:
    port = str(free_port())
    result = run_cli(["--model", "m", "--port", port, "--speculative-config", value])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"vllm-sim: invalid configuration: invalid speculative-config: {reason}"
    ]
