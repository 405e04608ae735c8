"""What a run measured: latency distributions with linearly interpolated quantiles, and
the summary of a run's requests and samples (completed and failed requests, throughput,
prefix cache hit rate, peaks), flattened to the means that `compare` sets side by side."""

from __future__ import annotations

import json

import pytest

from vllm_sim.whatif.results import (
    LATENCIES,
    REQUEST_COLUMNS,
    Distribution,
    RequestRecord,
    RunResult,
    Sample,
    rows,
    summarize,
)


def test_quantiles_interpolate_linearly_between_ranks() -> None:
    """Of 1..4 (given unsorted): p50 2.5, p90 3.7, p99 3.97, mean 2.5, max 4."""
    dist = Distribution.of([4.0, 1.0, 3.0, 2.0])
    assert dist is not None
    assert dist.count == 4
    assert dist.mean == pytest.approx(2.5)
    assert dist.p50 == pytest.approx(2.5)
    assert dist.p90 == pytest.approx(3.7)
    assert dist.p99 == pytest.approx(3.97)
    assert dist.max == 4.0


def test_quantiles_of_many_values_match_the_closest_ranks() -> None:
    """Of 0..100, the p-th quantile is p itself; of 0..10, p99 sits between 9 and 10."""
    hundred = Distribution.of([float(v) for v in range(101)])
    assert hundred is not None
    assert (hundred.p50, hundred.p90, hundred.p99) == pytest.approx((50.0, 90.0, 99.0))
    ten = Distribution.of([float(v) for v in range(11)])
    assert ten is not None
    assert ten.p99 == pytest.approx(9.9)
    assert ten.p90 == pytest.approx(9.0)


def test_a_single_value_is_every_quantile_and_no_value_is_no_distribution() -> None:
    """One value: all statistics are it. None: there is no distribution."""
    one = Distribution.of([0.25])
    assert one == Distribution(1, 0.25, 0.25, 0.25, 0.25, 0.25)
    assert Distribution.of([]) is None


def record(
    index: int,
    arrival: float,
    e2e: float | None,
    *,
    inputs: int = 100,
    outputs: int = 10,
    cached: int = 0,
    ttft: float | None = None,
    error: str | None = None,
    preemptions: int = 0,
) -> RequestRecord:
    return RequestRecord(
        index,
        index + 1,
        0,
        arrival,
        inputs,
        output_tokens=outputs,
        cached_tokens=cached,
        queue_time=0.0 if e2e is not None else None,
        ttft=ttft if ttft is not None else (None if e2e is None else e2e / 2),
        itl=None if e2e is None else 0.01,
        e2e=e2e,
        preemptions=preemptions,
        error=error,
    )


def sample(time: float, running: int, waiting: int, kv: float) -> Sample:
    return Sample(time, running, waiting, kv, 0, 0, [running])


RECORDS = [
    record(0, 10.0, 2.0, inputs=100, outputs=20, cached=50, ttft=0.1, preemptions=1),
    record(1, 11.0, 2.0, inputs=300, outputs=30, cached=0, ttft=0.3),
    record(2, 12.0, 3.0, inputs=200, outputs=50, cached=100, ttft=0.2),
    # Failed: refused with an error, and one that never finished.
    record(3, 13.0, None, inputs=5000, outputs=0, error="too long", preemptions=2),
    record(4, 14.0, None, inputs=400, outputs=7),
]
SAMPLES = [sample(10.0, 1, 0, 0.1), sample(11.0, 3, 2, 0.5), sample(12.0, 2, 4, 0.3)]
STATS = ("mean", "p50", "p90", "p99")


def test_summary_counts_completed_and_failed_requests() -> None:
    """Only requests with an answer and no error are completed; the rest failed."""
    summary = summarize(RECORDS, SAMPLES)
    assert (summary.requests, summary.completed, summary.failed) == (5, 3, 2)


def test_summary_rates_over_the_run_from_first_arrival_to_last_answer() -> None:
    """Duration runs from the first arrival (10 s) to the last answer (12 + 3 = 15 s);
    throughputs count completed requests and their tokens only."""
    summary = summarize(RECORDS, SAMPLES)
    assert summary.duration == pytest.approx(5.0)
    assert summary.request_throughput == pytest.approx(3 / 5)
    assert summary.output_throughput == pytest.approx((20 + 30 + 50) / 5)
    assert summary.input_throughput == pytest.approx((100 + 300 + 200) / 5)


def test_prefix_cache_hit_rate_is_cached_over_prompt_tokens_of_completed_requests() -> None:
    """(50 + 0 + 100) cached of (100 + 300 + 200) prompt tokens; a run with no prompt
    token completed has a hit rate of 0."""
    assert summarize(RECORDS, SAMPLES).prefix_cache_hit_rate == pytest.approx(150 / 600)
    assert summarize(RECORDS[3:], SAMPLES).prefix_cache_hit_rate == 0.0


def test_summary_peaks_and_latencies() -> None:
    """Peaks and KV usage come from the samples; preemptions from every request;
    latencies from completed requests only."""
    summary = summarize(RECORDS, SAMPLES)
    assert summary.max_running == 3
    assert summary.max_waiting == 4
    assert summary.mean_kv_usage == pytest.approx(0.3)
    assert summary.max_kv_usage == pytest.approx(0.5)
    assert summary.preemptions == 3
    ttft = summary.latencies["ttft"]
    assert ttft is not None
    assert ttft.count == 3
    assert ttft.mean == pytest.approx(0.2)
    assert ttft.max == pytest.approx(0.3)
    e2e = summary.latencies["e2e"]
    assert e2e is not None and e2e.count == 3 and e2e.max == 3.0
    assert set(summary.latencies) == set(LATENCIES)


def test_an_empty_run_summarizes_to_zeros() -> None:
    """No request and no sample: counts and rates are zero, no latency is known."""
    summary = summarize([], [])
    assert (summary.requests, summary.completed, summary.failed) == (0, 0, 0)
    assert summary.request_throughput == 0.0
    assert (summary.max_running, summary.max_waiting, summary.mean_kv_usage) == (0, 0, 0.0)
    assert all(dist is None for dist in summary.latencies.values())
    assert summary.means() == {
        "request_throughput": 0.0,
        "output_throughput": 0.0,
        "prefix_cache_hit_rate": 0.0,
    }


def test_means_are_the_rates_and_each_known_latencys_mean_and_quantiles() -> None:
    """Three rates, then mean/p50/p90/p99 of each latency that has values: a latency no
    request has (here itl) is left out."""
    records = [record(i, float(i), 1.0) for i in range(3)]
    for r in records:
        r.itl = None
    means = summarize(records, []).means()
    assert list(means) == [
        "request_throughput",
        "output_throughput",
        "prefix_cache_hit_rate",
        *(f"{name}_{stat}" for name in ("ttft", "e2e", "queue_time") for stat in STATS),
    ]
    assert means["e2e_p90"] == 1.0
    assert means["ttft_mean"] == pytest.approx(0.5)
    full = summarize(RECORDS, SAMPLES).means()
    assert set(full) == {
        "request_throughput",
        "output_throughput",
        "prefix_cache_hit_rate",
        *(f"{name}_{stat}" for name in LATENCIES for stat in STATS),
    }


def test_a_run_result_serializes_to_json_with_its_summary_and_means() -> None:
    """to_json holds the summary, the means, the speedup over the run's wall time, the
    trace's problems and the samples, and survives a JSON round trip."""
    result = RunResult("replay", {"instances": 1}, RECORDS, SAMPLES, ["line 9: bad"], 0.5)
    data = json.loads(json.dumps(result.to_json()))
    assert data["kind"] == "replay"
    assert data["settings"] == {"instances": 1}
    assert data["summary"]["completed"] == 3
    assert data["summary"]["latencies"]["ttft"]["count"] == 3
    assert data["means"] == pytest.approx(result.summary.means())
    assert data["speedup"] == pytest.approx(5.0 / 0.5)
    assert data["problems"] == ["line 9: bad"]
    assert len(data["samples"]) == 3
    assert data["samples"][1]["running_per_instance"] == [3]


def test_rows_follow_the_request_columns() -> None:
    """A record's row lists its fields in REQUEST_COLUMNS order."""
    row = next(iter(rows([RECORDS[3]])))
    assert dict(zip(REQUEST_COLUMNS, row, strict=True))["error"] == "too long"
    assert REQUEST_COLUMNS[:4] == ("index", "line", "instance", "arrival")
