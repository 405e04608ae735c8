"""Replays in simulated time through the Python API: the recorded vLLM run of bench/data is
reproduced by the roofline model, prefix-aware routing beats round-robin on a trace with
shared prefixes, a request the server refuses is a failed record while the run goes on,
and the fleet is sampled until the last request ends."""

from __future__ import annotations

import csv
import itertools
import json
import math
import random
import statistics
from pathlib import Path

import pytest

from tests.support.recorded_run import RECORDED_RUN_FLAGS, RECORDED_TRACE
from vllm_sim.config import Config, load_config
from vllm_sim.whatif.results import MAX_SAMPLES, RunResult
from vllm_sim.whatif.simulation import Replay, replay
from vllm_sim.whatif.trace import MOONCAKE_BLOCK, Trace, TraceRequest, read_trace


def measured_means(path: Path) -> tuple[float, float]:
    """The recorded run's mean TTFT (first token from queueing) and mean TPOT."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    ttft = [float(r["first_token_s"]) - float(r["queued_s"]) for r in rows]
    tpot = [
        (float(r["last_token_s"]) - float(r["first_token_s"])) / (int(r["output_tokens"]) - 1)
        for r in rows
    ]
    return statistics.fmean(ttft), statistics.fmean(tpot)


@pytest.fixture(scope="module")
def recorded_replay() -> RunResult:
    """The bundled trace replayed on the recorded run's server."""
    cfg = load_config(RECORDED_RUN_FLAGS, {})
    return Replay(cfg, read_trace(RECORDED_TRACE), environ={}).run()


def test_the_recorded_vllm_run_is_reproduced(recorded_replay: RunResult) -> None:
    """All 300 requests complete; the simulated mean TPOT is within 10% and the mean TTFT
    within 20% of the ones vLLM measured; the batch fills up to --max-num-seqs 128."""
    summary = recorded_replay.summary
    assert (summary.requests, summary.completed, summary.failed) == (300, 300, 0)
    measured_ttft, measured_tpot = measured_means(RECORDED_TRACE)
    ttft, tpot = summary.latencies["ttft"], summary.latencies["itl"]
    assert ttft is not None and tpot is not None
    assert tpot.mean == pytest.approx(measured_tpot, rel=0.10)
    assert ttft.mean == pytest.approx(measured_ttft, rel=0.20)
    assert summary.max_running == 128
    assert max(max(s.running_per_instance) for s in recorded_replay.samples) == 128


def test_the_recorded_runs_requests_keep_their_trace_lengths(recorded_replay: RunResult) -> None:
    """Each record has its trace line, arrival and prompt length, generates exactly the
    traced output (lengths are forced) and has consistent latencies."""
    trace = read_trace(RECORDED_TRACE)
    records = recorded_replay.records
    assert [r.index for r in records] == list(range(300))
    for record, traced in zip(records, trace.requests, strict=True):
        assert record.line == traced.line
        assert record.arrival == traced.arrival
        assert record.input_tokens == traced.input_length
        assert record.output_tokens == traced.output_length
        assert record.finish_reason == "length"
        assert record.instance == 0
        assert record.ttft is not None and record.e2e is not None and record.itl is not None
        assert 0 < record.ttft <= record.e2e
        assert record.itl == pytest.approx((record.e2e - record.ttft) / (record.output_tokens - 1))


def test_the_recorded_runs_settings_are_the_servers(recorded_replay: RunResult) -> None:
    """The result names the server it simulated, the cache as the flags set it."""
    settings = recorded_replay.settings
    assert settings["instances"] == 1
    assert settings["router"] == "round-robin"
    assert settings["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert settings["timing_model"] == "roofline"
    assert settings["max_num_seqs"] == 128
    assert settings["max_num_batched_tokens"] == 2048
    assert settings["num_gpu_blocks"] == 35913
    assert recorded_replay.kind == "replay"
    assert recorded_replay.problems == []


def test_the_fleet_is_sampled_every_interval_until_the_last_request_ends(
    recorded_replay: RunResult,
) -> None:
    """Samples start at 0, one a second, and stop at the first one after the last answer,
    when nothing runs or waits and every request is counted finished."""
    samples = recorded_replay.samples
    times = [s.time for s in samples]
    assert times[0] == 0.0
    assert all(b - a == pytest.approx(1.0) for a, b in itertools.pairwise(times))
    last_answer = max(r.arrival + (r.e2e or 0.0) for r in recorded_replay.records)
    assert times[-2] < last_answer <= times[-1]
    assert (samples[-1].running, samples[-1].waiting, samples[-1].finished) == (0, 0, 300)
    finished = [s.finished for s in samples]
    assert finished == sorted(finished)
    assert all(0.0 <= s.kv_usage <= 1.0 for s in samples)
    assert max(s.kv_usage for s in samples) > 0.0


def shared_prefix_trace(path: Path) -> Path:
    """160 requests, 40 ms apart, each one of 8 prompts' 6 shared 512-token blocks (chosen
    at random) then 300 tokens of its own, 8 tokens generated."""
    rng = random.Random(3)
    blocks = 6
    with path.open("w") as handle:
        for index in range(160):
            group = rng.randrange(8)
            hash_ids = [group * 100 + b for b in range(blocks)] + [10_000 + index]
            line = {
                "timestamp": index * 40,
                "input_length": blocks * MOONCAKE_BLOCK + 300,
                "output_length": 8,
                "hash_ids": hash_ids,
            }
            handle.write(json.dumps(line) + "\n")
    return path


def test_prefix_aware_routing_beats_round_robin_on_shared_prefixes(tmp_path: Path) -> None:
    """Over 4 instances whose caches cannot each hold all 8 shared prefixes, the
    prefix-aware router finds more of the prompts cached and answers faster (median
    TTFT) than round-robin."""
    flags = [
        *RECORDED_RUN_FLAGS[:6],
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "2048",
        "--num-gpu-blocks-override",
        "700",
        "--max-model-len",
        "8192",
    ]
    cfg = load_config(flags, {})
    trace = read_trace(shared_prefix_trace(tmp_path / "mooncake.jsonl"))
    spread = Replay(cfg, trace, instances=4, router="round-robin", environ={}).run()
    aware = Replay(cfg, trace, instances=4, router="prefix-aware", environ={}).run()
    for result in (spread, aware):
        assert result.summary.completed == 160
        assert {r.instance for r in result.records} == {0, 1, 2, 3}
    spread_ttft, aware_ttft = spread.summary.latencies["ttft"], aware.summary.latencies["ttft"]
    assert spread_ttft is not None and aware_ttft is not None
    assert aware.summary.prefix_cache_hit_rate > spread.summary.prefix_cache_hit_rate + 0.2
    assert aware_ttft.p50 < spread_ttft.p50 / 2
    assert aware.settings["router"] == "prefix-aware"
    assert aware.settings["instances"] == 4


def test_a_request_too_long_for_the_model_fails_and_the_run_goes_on(
    instant_config: Config,
) -> None:
    """A prompt past --max-model-len (4096) and one whose prompt plus output is past it
    are failed records with the server's error; the requests around them complete."""
    trace = Trace(
        [
            TraceRequest(1, 0.0, 100, 5),
            TraceRequest(2, 0.5, 5000, 5),
            TraceRequest(3, 1.0, 4000, 200),
            TraceRequest(4, 1.5, 100, 5),
        ]
    )
    result = Replay(instant_config, trace, environ={}).run()
    ok, too_long, too_much, after = result.records
    assert ok.ok and after.ok
    assert after.output_tokens == 5
    for failed in (too_long, too_much):
        assert not failed.ok
        assert failed.error is not None and "maximum context length is 4096" in failed.error
        assert failed.e2e is None and failed.ttft is None
    assert (result.summary.completed, result.summary.failed) == (2, 2)


def test_every_request_ends_once_for_the_progress_callback(instant_config: Config) -> None:
    """`progress` is told of every request, failed ones included, once each."""
    told: list[int] = []
    trace = Trace([TraceRequest(i + 1, 0.1 * i, 5000 if i == 2 else 50, 3) for i in range(6)])
    result = replay(instant_config, trace, progress=told.append)
    assert sum(told) == 6
    assert result.summary.failed == 1


def test_openai_requests_are_planned_as_the_server_plans_them(
    tmp_path: Path, instant_config: Config
) -> None:
    """Chat and completion bodies replay with their own max tokens; a body the endpoint
    rejects is a failed record with the 400 error, and the run goes on."""
    path = tmp_path / "requests.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 6},
        {"body": {"prompt": "once upon a time", "max_tokens": 4, "ignore_eos": True}},
        {"body": {"prompt": "x", "max_tokens": 5, "n": "two"}},
        {"body": {"prompt": "the end", "max_tokens": 3, "ignore_eos": True}},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = Replay(instant_config, read_trace(path, rate=2.0), environ={}).run()
    chat, completion, bad, last = result.records
    assert chat.ok and 1 <= chat.output_tokens <= 6
    assert completion.ok and completion.output_tokens == 4
    assert last.ok and last.output_tokens == 3
    assert not bad.ok and bad.error is not None and bad.error.startswith("400: ")
    assert [r.arrival for r in result.records] == pytest.approx([0.0, 0.5, 1.0, 1.5])


def test_preemptions_are_counted_per_request_and_for_the_fleet(tmp_path: Path) -> None:
    """With a KV cache too small for the batch, sequences are preempted: the records and
    the samples count the same preemptions, and every request still completes."""
    flags = [
        *RECORDED_RUN_FLAGS[:6],
        "--num-gpu-blocks-override",
        "600",
        "--max-model-len",
        "4096",
    ]
    cfg = load_config(flags, {})
    trace = Trace([TraceRequest(i + 1, 0.0, 1500, 600) for i in range(12)])
    result = Replay(cfg, trace, sample_interval=0.5, environ={}).run()
    assert result.summary.completed == 12
    assert result.summary.preemptions > 0
    assert result.samples[-1].preemptions == result.summary.preemptions


def test_sampling_goes_on_through_an_idle_gap_between_arrivals(instant_config: Config) -> None:
    """With nothing running between a request at 0 s and one at 4.5 s, the fleet is still
    sampled every half second until the last one has ended."""
    trace = Trace([TraceRequest(1, 0.0, 50, 3), TraceRequest(2, 4.5, 50, 3)])
    result = Replay(instant_config, trace, sample_interval=0.5, environ={}).run()
    assert [s.time for s in result.samples] == pytest.approx([0.5 * i for i in range(10)])
    assert [s.finished for s in result.samples] == [1] * 9 + [2]


def test_a_replay_decodes_speculatively_with_the_servers_flag() -> None:
    """The replayed engines are the server's: with --speculative-config the same trace
    makes the same tokens, each request's inter-token latency a good deal lower, and the
    settings name the speculation."""
    trace = Trace([TraceRequest(i + 1, 0.05 * i, 200, 150) for i in range(16)])
    spec = ["--speculative-config", '{"method":"ngram","num_speculative_tokens":3}']
    plain = Replay(load_config(RECORDED_RUN_FLAGS, {}), trace, environ={}).run()
    fast = Replay(load_config([*RECORDED_RUN_FLAGS, *spec], {}), trace, environ={}).run()
    assert [r.output_tokens for r in fast.records] == [r.output_tokens for r in plain.records]
    plain_itl, fast_itl = (run.summary.latencies["itl"] for run in (plain, fast))
    assert plain_itl is not None and fast_itl is not None
    assert fast_itl.mean < plain_itl.mean / 1.8
    assert fast.settings["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3}
    assert fast.settings["spec_acceptance_rate"] == 0.7
    assert plain.settings["spec_acceptance_rate"] is None


def test_a_phase_schedule_is_refused_not_left_out() -> None:
    from vllm_sim.config import ConfigError

    cfg = load_config(["--model", "m", "--phases", '[{"duration": "1s"}]'], {})
    with pytest.raises(ConfigError, match="a replay runs no phase schedule"):
        Replay(cfg, Trace([]))


def test_a_replayed_prompt_found_whole_still_computes_its_last_block(
    instant_config: Config,
) -> None:
    """Each record's cached tokens are the engine's: as vLLM, at least the last token is
    computed, so a prompt of whole blocks found again hits all but its last block, and a
    prompt with more tokens past the cached blocks hits them all."""
    block = (7,)  # one Mooncake block: the same 512 tokens in every request naming it
    trace = Trace(
        [
            TraceRequest(1, 0.0, MOONCAKE_BLOCK, 3, block),
            TraceRequest(2, 1.0, MOONCAKE_BLOCK, 3, block),
            TraceRequest(3, 2.0, MOONCAKE_BLOCK + 8, 3, block),
        ]
    )
    result = Replay(instant_config, trace, environ={}).run()
    assert [r.cached_tokens for r in result.records] == [0, MOONCAKE_BLOCK - 16, MOONCAKE_BLOCK]
    prompt = sum(r.input_tokens for r in result.records)
    assert result.summary.prefix_cache_hit_rate == (2 * MOONCAKE_BLOCK - 16) / prompt


def test_a_closed_loop_client_keeps_at_most_its_cap_open(roofline_config: Config) -> None:
    """With max_concurrency 3 the trace's 12 requests, all due at once, are sent 3 at a
    time, each as one ends: never more than 3 run, and each is timed from its send (its
    record's arrival), as vllm bench serve --max-concurrency times them."""
    trace = Trace([TraceRequest(i + 1, 0.0, 200, 20) for i in range(12)])
    result = Replay(
        roofline_config, trace, sample_interval=0.005, environ={}, max_concurrency=3
    ).run()
    assert result.summary.completed == 12 and result.summary.max_running == 3
    records = sorted(result.records, key=lambda r: r.index)
    assert [r.arrival for r in records[:3]] == [0.0, 0.0, 0.0]
    ends = sorted(r.arrival + (r.e2e or 0.0) for r in records)
    for record in records[3:]:
        assert record.arrival > 0.0
        assert any(record.arrival == pytest.approx(end) for end in ends)
    open_loop = Replay(roofline_config, trace, sample_interval=0.005, environ={}).run()
    assert open_loop.summary.max_running == 12
    assert max(r.ttft or 0 for r in open_loop.records) > max(r.ttft or 0 for r in records)


def test_coefficients_change_the_replays_timing(roofline_config: Config) -> None:
    trace = Trace([TraceRequest(i + 1, 0.1 * i, 500, 50) for i in range(10)])
    plain = Replay(roofline_config, trace, environ={}).run()
    slower = Replay(
        roofline_config, trace, environ={}, coefficients={"weight_bandwidth_efficiency": 0.3}
    ).run()
    assert slower.summary.means()["itl_mean"] > 1.5 * plain.summary.means()["itl_mean"]


def test_a_replay_does_not_hang_on_the_real_time_turn(roofline_config: Config) -> None:
    """The engine ends a turn's admissions after TURN_SECONDS of real time so a live loop
    stays free; a replay lifts that while it runs (a loaded machine would otherwise admit
    fewer requests a step than an idle one), and puts it back."""
    from vllm_sim.engine import turn

    before = turn.TURN_SECONDS
    trace = Trace([TraceRequest(i + 1, 0.0, 64, 4) for i in range(50)])
    replay = Replay(roofline_config, trace, environ={})
    seen: list[float] = []
    replay.clock.call_at(0.0, lambda: seen.append(turn.TURN_SECONDS))
    replay.run()
    assert seen == [math.inf]
    assert before == turn.TURN_SECONDS


def test_samples_stay_bounded_whatever_the_interval(instant_config: Config) -> None:
    """Two requests 2,000 s apart sampled every millisecond would be 2 million samples:
    past MAX_SAMPLES every other one is dropped and the interval doubles."""
    trace = Trace([TraceRequest(1, 0.0, 50, 3), TraceRequest(2, 2000.0, 50, 3)])
    result = Replay(instant_config, trace, sample_interval=0.001, environ={}).run()
    assert len(result.samples) <= MAX_SAMPLES
    assert result.settings["sample_interval"] == pytest.approx(0.001 * 32)
    times = [s.time for s in result.samples]
    assert times == sorted(times) and times[-1] >= 2000.0
    assert result.summary.completed == 2


def test_an_interrupted_replay_returns_a_partial_result(instant_config: Config) -> None:
    """interrupt() from inside the run (as a signal handler calls it) stops it after the
    event running: the requests so far, those open marked interrupted, partial set."""
    trace = Trace([TraceRequest(i + 1, float(i), 50, 3) for i in range(10)])
    ended: list[int] = []
    replay_run = Replay(
        instant_config, trace, environ={}, on_record=lambda r: ended.append(r.index)
    )
    replay_run.clock.call_at(4.5, replay_run.interrupt)
    result = replay_run.run()
    assert result.partial and result.trace_requests == 10
    assert result.stopped_at == pytest.approx(4.5)
    assert len(result.records) == 5 and ended == [0, 1, 2, 3, 4]
    assert result.to_json()["partial"] is True
