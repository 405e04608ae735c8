"""The step engine through the real server: `--timing-model roofline` with a model folder's
config.json, what /metrics then says about the KV cache and the steps, and the start-up
refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from tests.support.metrics import scrape
from tests.support.server import SimServer, free_port, run_cli
from tests.unit.server.test_step_timing import LLAMA_8B
from vllm_sim.perf import RooflineModel, StepLoad, gpu_spec
from vllm_sim.perf.shape import ModelShape

CONTEXT = "8192"


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models") / "llama-8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_8B))
    return folder


@pytest.fixture(scope="module")
def roofline(llama_folder: Path) -> Iterator[SimServer]:
    args = ["--timing-model", "roofline", "--gpu", "H100", "--max-model-len", CONTEXT]
    with SimServer(args, model=str(llama_folder)) as server:
        yield server


def completion(server: SimServer, prompt_words: int, tokens: int) -> dict[str, object]:
    body = {
        "model": server.model,
        "prompt": " ".join(f"w{i}" for i in range(prompt_words)),
        "max_tokens": tokens,
        "ignore_eos": True,
    }
    response = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, object] = response.json()
    return answer


def test_the_kv_cache_is_sized_from_the_model_and_the_gpu(roofline: SimServer) -> None:
    with httpx.Client(base_url=roofline.url) as client:
        metrics = scrape(client)
    (labels, _), *_ = metrics.series("vllm:cache_config_info")
    blocks = int(labels["num_gpu_blocks"])
    model = RooflineModel(ModelShape.from_config(LLAMA_8B), gpu_spec("H100"))
    assert blocks == model.num_gpu_blocks(16, 0.92)
    assert labels["gpu_memory_utilization"] == "0.92"


def test_requests_run_in_steps_and_the_metrics_count_them(roofline: SimServer) -> None:
    answer = completion(roofline, prompt_words=300, tokens=20)
    assert answer["usage"]["completion_tokens"] == 20  # type: ignore[index]
    with httpx.Client(base_url=roofline.url) as client:
        metrics = scrape(client)
    steps = metrics.hist("vllm:iteration_tokens_total")
    assert steps.count >= 20  # the prefill step and one step per later token
    assert steps.sum >= 300 + 19
    assert metrics.hist("vllm:request_prefill_time_seconds").count >= 1


@pytest.mark.timing
def test_inter_token_latency_follows_the_model(roofline: SimServer) -> None:
    """One sequence decoding alone: each step is the model's batch-1 decode step."""
    with httpx.Client(base_url=roofline.url) as client:
        before = scrape(client).hist("vllm:inter_token_latency_seconds")
        completion(roofline, prompt_words=100, tokens=60)
        after = scrape(client).hist("vllm:inter_token_latency_seconds")
    mean = (after.sum - before.sum) / (after.count - before.count)
    model = RooflineModel(ModelShape.from_config(LLAMA_8B), gpu_spec("H100"))
    load = StepLoad()
    load.add_decode(130)
    predicted = model.step_seconds(load)
    # Timers land late on a loaded machine, never early: generous above, tight below.
    assert predicted * 0.95 <= mean <= predicted * 1.5 + 0.003, (mean, predicted)


def test_a_model_without_a_shape_does_not_start() -> None:
    port = str(free_port())
    result = run_cli(["--model", "acme/unknown", "--timing-model", "roofline", "--port", port])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(
        "vllm-sim: invalid configuration: --timing-model roofline needs the model's config.json"
    )


def test_a_kv_starved_server_preempts_and_every_request_completes(llama_folder: Path) -> None:
    """64 blocks of 16 tokens hold 1,024 tokens; eight requests of ~300 need 2,400. The
    newest running ones are preempted and recomputed, and each still gets every token."""
    args = [
        "--timing-model", "roofline", "--gpu", "H100", "--max-model-len", "1024",
        "--num-gpu-blocks-override", "64", "--max-num-seqs", "8", "--time-scale", "2",
    ]  # fmt: skip
    with SimServer(args, model=str(llama_folder)) as server:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: completion(server, 100, 200), range(8)))
        with httpx.Client(base_url=server.url) as client:
            metrics = scrape(client)
    assert [a["usage"]["completion_tokens"] for a in answers] == [200] * 8  # type: ignore[index]
    assert metrics.value("vllm:num_preemptions_total") > 0
    preempted = metrics.hist("vllm:request_num_preemptions")
    assert preempted.count == 8 and preempted.sum > 0
    # Each request's time in the engine is its prefill (to the first token) plus its
    # decode (to the last), split where the phases really changed.
    inference = metrics.hist("vllm:request_inference_time_seconds")
    prefill = metrics.hist("vllm:request_prefill_time_seconds")
    decode = metrics.hist("vllm:request_decode_time_seconds")
    assert inference.count == prefill.count == decode.count == 8
    assert prefill.sum + decode.sum == pytest.approx(inference.sum, rel=1e-6)
    assert decode.sum > prefill.sum > 0


@pytest.mark.timing
def test_the_constant_model_keeps_the_configured_latencies(llama_folder: Path) -> None:
    """`--timing-model constant` is the reference's model, whatever the model folder
    says: the latency flags time the tokens and `--kv-cache-size` sizes the cache."""
    args = [
        "--timing-model", "constant", "--time-to-first-token", "150ms",
        "--inter-token-latency", "40ms", "--kv-cache-size", "777",
    ]  # fmt: skip
    with SimServer(args, model=str(llama_folder)) as server:
        completion(server, prompt_words=50, tokens=11)
        with httpx.Client(base_url=server.url) as client:
            metrics = scrape(client)
    (labels, _), *_ = metrics.series("vllm:cache_config_info")
    assert labels["num_gpu_blocks"] == "777"
    ttft = metrics.hist("vllm:time_to_first_token_seconds")
    itl = metrics.hist("vllm:inter_token_latency_seconds")
    assert itl.count == 10
    # Deadlines are absolute: a late token makes the next gap shorter, never the pace.
    assert 0.15 * 0.95 <= ttft.sum <= 0.15 * 1.5 + 0.05
    assert 0.04 * 0.95 <= itl.sum / itl.count <= 0.04 * 1.5 + 0.005


NGRAM = '{"method":"ngram","num_speculative_tokens":3}'


@pytest.fixture(scope="module")
def speculative(llama_folder: Path) -> Iterator[SimServer]:
    args = [
        "--timing-model", "roofline", "--gpu", "H100", "--max-model-len", CONTEXT,
        "--speculative-config", NGRAM,
    ]  # fmt: skip
    with SimServer(args, model=str(llama_folder)) as server:
        yield server


def test_speculative_decoding_makes_several_tokens_a_step(speculative: SimServer) -> None:
    """ngram drafts at acceptance 0.7: about 2.53 tokens a step, one ITL observation each;
    the start-up log names the drafter."""
    with httpx.Client(base_url=speculative.url) as client:
        before = scrape(client)
        answer = completion(speculative, prompt_words=100, tokens=300)
        after = scrape(client)
    assert answer["usage"]["completion_tokens"] == 300  # type: ignore[index]
    drafts = after.value("vllm:spec_decode_num_drafts_total") - before.value(
        "vllm:spec_decode_num_drafts_total"
    )
    assert 299 / drafts == pytest.approx(2.53, abs=0.4)
    itl = after.hist("vllm:inter_token_latency_seconds").count
    assert itl - before.hist("vllm:inter_token_latency_seconds").count == drafts
    assert "speculative decoding: ngram, 3 drafts a step, drafted for free" in (
        speculative.stderr()
    )


@pytest.mark.timing
def test_speculative_steps_cost_what_the_model_says(speculative: SimServer) -> None:
    """Alone, a step verifying 3 drafts is memory-bound like a plain decode step, and makes
    2.5 tokens: the time per output token falls by as much."""
    with httpx.Client(base_url=speculative.url) as client:
        before = scrape(client)
        completion(speculative, prompt_words=100, tokens=200)
        after = scrape(client)
    itl_before, itl_after = (m.hist("vllm:inter_token_latency_seconds") for m in (before, after))
    per_step = (itl_after.sum - itl_before.sum) / (itl_after.count - itl_before.count)
    model = RooflineModel(ModelShape.from_config(LLAMA_8B), gpu_spec("H100"))
    load = StepLoad()
    load.add_decode(230)
    load.add_drafts(3, 3 * 231 + 3)
    predicted = model.step_seconds(load)
    assert predicted * 0.95 <= per_step <= predicted * 1.5 + 0.003, (per_step, predicted)
    tpot_before, tpot_after = (
        m.hist("vllm:request_time_per_output_token_seconds") for m in (before, after)
    )
    per_token = tpot_after.sum - tpot_before.sum
    assert per_token < per_step / 1.8


@pytest.mark.timing
def test_a_timing_profile_times_the_steps_and_is_named_at_start_up(
    llama_folder: Path, tmp_path: Path
) -> None:
    """A profile fitted on another GPU: the server starts, says which profile times its
    steps and warns that it was fitted elsewhere; its decode steps take what the profile's
    coefficients make them."""
    profile = tmp_path / "fitted.yaml"
    # No API-server time: a request then never waits for the scheduler in this test.
    profile.write_text(
        "gpu: L40S\ncoefficients:\n  weight_bandwidth_efficiency: 0.36\n  api_server_s: 0\n"
        "  api_server_s_per_token: 0\n"
    )
    args = ["--timing-model", "roofline", "--gpu", "H100", "--max-model-len", CONTEXT]
    with SimServer([*args, "--timing-profile", str(profile)], model=str(llama_folder)) as server:
        started = server.stderr()
        assert f"coefficients from timing profile {profile}, fitted on L40S:" in started
        assert (
            f"WARNING vllm_sim: timing profile {profile} was fitted on L40S, not H100: its "
            "coefficients are applied anyway"
        ) in started
        with httpx.Client(base_url=server.url) as client:
            before = scrape(client).hist("vllm:inter_token_latency_seconds")
            completion(server, prompt_words=100, tokens=30)
            after = scrape(client).hist("vllm:inter_token_latency_seconds")
    mean = (after.sum - before.sum) / (after.count - before.count)
    halved = RooflineModel(
        ModelShape.from_config(LLAMA_8B),
        replace(gpu_spec("H100"), weight_bandwidth_efficiency=0.36),
    )
    load = StepLoad()
    load.add_decode(130)
    assert mean >= 0.95 * halved.step_seconds(load)


def test_a_bad_timing_profile_stops_the_server_with_one_line(tmp_path: Path) -> None:
    profile = tmp_path / "fitted.yaml"
    profile.write_text("coefficients:\n  kv_bandwidth_efficiency: 1.3\n")
    result = run_cli(
        ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--timing-model", "roofline",
         "--timing-profile", str(profile), "--port", str(free_port())]
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"vllm-sim: invalid configuration: timing-profile {profile}: kv_bandwidth_efficiency "
        "is a fraction of peak, at most 1, not 1.3"
    ]
