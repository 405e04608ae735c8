"""Reading a real run's measurements for calibration: vllm bench serve's detailed JSON
(with its send times, or its arrivals rebuilt from the request rate), per-request JSONL
and CSV under their common spellings, and /metrics scrapes; every unusable file, line or
time is a one-line MeasurementError naming where."""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path

import pytest

from tests.support.recorded_run import RECORDED_TRACE
from vllm_sim.whatif.measurements import (
    MeasurementError,
    detect_format,
    read_measurements,
)

REQUEST: dict[str, object] = {
    "arrival_s": 1.0,
    "input_tokens": 100,
    "output_tokens": 11,
    "first_token_s": 1.2,
    "last_token_s": 2.2,
}


def jsonl(path: Path, rows: list[dict[str, object]], extra: str = "") -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + extra, encoding="utf-8")
    return path


def error_of(path: Path, fmt: str = "auto") -> str:
    with pytest.raises(MeasurementError) as info:
        read_measurements(path, fmt)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return message


def bench_json(tmp_path: Path, **fields: object) -> Path:
    data: dict[str, object] = {
        "request_rate": 4.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": 10.0,
        "input_lens": [100, 200, 300],
        "output_lens": [3, 2, 1],
        "ttfts": [0.1, 0.2, 0.3],
        "itls": [[0.02, 0.03], [0.04], []],
        "errors": ["", "", ""],
    }
    data.update(fields)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ---------------------------------------------------------------------- per request
def test_the_bundled_llmservingsim_csv_reads_whole() -> None:
    """300 requests in arrival order from 0; TTFT and latency from the arrival column."""
    measured = read_measurements(RECORDED_TRACE)
    assert measured.format == "requests-csv" and measured.failed == 0
    assert len(measured.requests) == len(measured.workload) == 300
    first = measured.requests[0]
    assert (first.arrival, first.input_tokens, first.output_tokens) == (0.0, 2358, 531)
    assert first.ttft == pytest.approx(0.169525)
    assert first.e2e == pytest.approx(15.713402)
    assert first.tpot == pytest.approx((15.713402 - 0.169525) / 530)
    arrivals = [r.arrival for r in measured.requests]
    assert arrivals == sorted(arrivals)
    assert [w.arrival for w in measured.workload] == arrivals
    assert statistics.fmean(r.tpot or 0 for r in measured.requests) == pytest.approx(
        0.0325, abs=2e-4
    )


def test_jsonl_takes_relative_spellings_and_skips_failed_requests(tmp_path: Path) -> None:
    """TTFT and latency in milliseconds beside the arrival; a request with an error or
    success false is counted as failed and left out; blank lines are nothing."""
    rows: list[dict[str, object]] = [
        {"arrival": 5.0, "prompt_tokens": 10, "completion_tokens": 4, "ttft_ms": 50, "e2e_ms": 80},
        {"arrival": 5.5, "prompt_tokens": 10, "completion_tokens": 4, "error": "timeout"},
        {"arrival": 6.0, "prompt_tokens": 10, "completion_tokens": 1, "ttft": 0.04, "e2e": 0.04},
        {"arrival": 6.5, "success": False, "prompt_tokens": 1, "completion_tokens": 1},
    ]
    measured = read_measurements(jsonl(tmp_path / "m.jsonl", rows, "\n\n"))
    assert measured.format == "requests-jsonl" and measured.failed == 2
    assert [r.line for r in measured.requests] == [1, 3]
    assert [r.arrival for r in measured.requests] == [0.0, 1.0]
    assert measured.requests[0].ttft == pytest.approx(0.05)
    assert measured.requests[0].tpot == pytest.approx(0.01)
    assert measured.requests[1].tpot is None  # one token: no time per output token
    assert measured.fittable == 1


def test_a_replays_own_requests_csv_is_measurements(tmp_path: Path) -> None:
    """`vllm-sim replay` (and its --target runs against a real vLLM) writes arrival, ttft
    and e2e per request: calibration reads it as it is."""
    path = tmp_path / "requests.csv"
    path.write_text(
        "index,line,instance,arrival,input_tokens,output_tokens,cached_tokens,queue_time,"
        "ttft,itl,e2e,preemptions,finish_reason,error\n"
        "0,2,0,0.0,100,5,0,0.01,0.05,0.01,0.09,0,length,\n"
        "1,3,0,0.5,100,5,0,,,,,0,,400: too long\n",
        encoding="utf-8",
    )
    measured = read_measurements(path)
    assert measured.failed == 1 and len(measured.requests) == 1
    assert measured.requests[0].e2e == pytest.approx(0.09)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"first_token_s": 0.5}, "line 2: the first token comes before the arrival"),
        ({"last_token_s": 1.1}, "line 2: the last token comes before the first"),
        ({"arrival_s": -1.0}, "line 2: arrival is negative"),
        ({"first_token_s": "nan"}, "line 2: first token is not finite"),
        ({"last_token_s": "later"}, "line 2: last token 'later' is not a number"),
        ({"output_tokens": 0}, "line 2: output tokens is 0, below 1"),
        ({"input_tokens": 2.5}, "line 2: input tokens 2.5 is not a whole number"),
        ({"first_token_s": None}, "line 2: no first-token time"),
        ({"output_tokens": None}, "line 2: no output tokens"),
    ],
)
def test_an_inconsistent_line_is_refused_with_its_number(
    tmp_path: Path, change: dict[str, object], reason: str
) -> None:
    bad = {**REQUEST, **change}
    path = jsonl(tmp_path / "m.jsonl", [REQUEST, bad])
    assert reason in error_of(path)


def test_a_line_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "m.jsonl", [REQUEST], "{not json\n")
    assert error_of(path).startswith(f"{path}: line 2: not JSON")


def test_a_csv_without_the_columns_is_not_a_per_request_file(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("when,prompt\n1,2\n", encoding="utf-8")
    assert "not a per-request file: no arrival column" in error_of(path)


def test_missing_unreadable_and_unknown_files_are_refused(tmp_path: Path) -> None:
    assert error_of(tmp_path / "none.jsonl") == f"{tmp_path / 'none.jsonl'}: no such file"
    text = tmp_path / "notes.txt"
    text.write_text("hello\n", encoding="utf-8")
    assert "not a measurements file" in error_of(text)
    binary = tmp_path / "m.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    assert error_of(binary, "requests-jsonl") == f"{binary}: not a text file"


# ---------------------------------------------------------------------- vllm bench serve
def test_a_bench_result_with_start_times_keeps_them(tmp_path: Path) -> None:
    """Arrivals are the saved send times from the first; a request's latency is its TTFT
    plus its gaps; a failed request (an error) is left out."""
    path = bench_json(
        tmp_path, start_times=[100.0, 100.5, 101.25], errors=["", "boom", ""], ttfts=[0.1, 0, 0.3]
    )
    assert detect_format(path) == "vllm-bench"
    measured = read_measurements(path)
    assert measured.failed == 1 and measured.max_concurrency is None
    assert [r.arrival for r in measured.requests] == [0.0, 1.25]
    assert measured.requests[0].e2e == pytest.approx(0.15)
    assert measured.requests[0].tpot == pytest.approx(0.025)
    assert measured.arrivals == "as recorded (start_times)"


def test_without_start_times_arrivals_are_rebuilt_as_the_benchmark_draws_them(
    tmp_path: Path,
) -> None:
    """Poisson gaps at the rate, stretched so the last request goes at count/rate (the
    benchmark's own normalization), seeded; all at once at an infinite rate; evenly at
    an infinite burstiness; a closed loop's cap goes along."""
    count = 200
    fields: dict[str, object] = {
        "input_lens": [10] * count,
        "output_lens": [2] * count,
        "ttfts": [0.1] * count,
        "itls": [[0.01]] * count,
        "errors": [""] * count,
        "duration": 100.0,
    }
    poisson = read_measurements(bench_json(tmp_path, **fields), seed=3)
    arrivals = [r.arrival for r in poisson.requests]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    first_gap = read_measurements(bench_json(tmp_path, **fields), seed=3).requests[1].arrival
    assert first_gap == arrivals[1]  # the same seed, the same draws
    assert read_measurements(bench_json(tmp_path, **fields), seed=4).requests[1].arrival != (
        first_gap
    )
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert statistics.fmean(gaps) == pytest.approx(1 / 4.0, rel=0.2)
    assert statistics.stdev(gaps) == pytest.approx(statistics.fmean(gaps), rel=0.3)
    assert "Poisson at 4 req/s (seed 3)" in poisson.arrivals

    at_once = read_measurements(bench_json(tmp_path, **{**fields, "request_rate": "inf"}))
    assert {r.arrival for r in at_once.requests} == {0.0}
    even = read_measurements(bench_json(tmp_path, **{**fields, "burstiness": math.inf}))
    assert even.requests[1].arrival == pytest.approx(0.25)
    closed = read_measurements(bench_json(tmp_path, **{**fields, "max_concurrency": 8}))
    assert closed.max_concurrency == 8 and "at most 8 open" in closed.arrivals


def test_a_bench_ramp_up_rebuilds_its_rising_rate(tmp_path: Path) -> None:
    count = 100
    path = bench_json(
        tmp_path,
        request_rate="inf",
        ramp_up_strategy="linear",
        ramp_up_start_rps=1,
        ramp_up_end_rps=50,
        input_lens=[10] * count,
        output_lens=[2] * count,
        ttfts=[0.1] * count,
        itls=[[0.01]] * count,
        errors=[""] * count,
    )
    arrivals = [r.arrival for r in read_measurements(path).requests]
    early = arrivals[20] - arrivals[0]
    late = arrivals[99] - arrivals[79]
    assert early > 3 * late  # 20 requests take far longer at the start


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"ttfts": None}, "not a vllm bench serve result: no ttfts"),
        ({"ttfts": [0.1, 0.2]}, "ttfts must be a list of 3 values"),
        ({"ttfts": [0.1, 0.0, 0.3]}, "request 2: no time to first token"),
        ({"ttfts": [0.1, 11.0, 11.1]}, "request 2: a TTFT of 11.000 s, longer than the whole run"),
        ({"ttfts": [0.1, -0.2, 0.3]}, "ttfts of request 2 is negative"),
        ({"output_lens": [3, 0, 1]}, "output_lens of request 2 is 0, below 1"),
        ({"latencies": [0.2, 0.1, 0.4]}, "request 2: the last token comes before the first"),
        ({"request_rate": None}, "no start_times, and request_rate None cannot rebuild"),
        ({"burstiness": 0}, "burstiness must be a positive number"),
        ({"max_concurrency": 0}, "max_concurrency must be a positive integer or null"),
    ],
)
def test_an_unusable_bench_result_is_refused(
    tmp_path: Path, fields: dict[str, object], reason: str
) -> None:
    data = {k: v for k, v in fields.items() if v is not None or k != "ttfts"}
    path = bench_json(tmp_path, **data)
    if fields.get("ttfts", 0) is None:
        raw = json.loads(path.read_text())
        del raw["ttfts"]
        path.write_text(json.dumps(raw))
    assert reason in error_of(path)


def test_a_bench_summary_saved_without_details_says_how_to_save_them(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"mean_ttft_ms": 12.0, "request_rate": 4}), encoding="utf-8")
    assert "run it with --save-result --save-detailed" in error_of(path, "vllm-bench")


# ---------------------------------------------------------------------- /metrics scrapes
def scrape(t: float, done: int, prompt: int, gen: int, ttft: float, itl: tuple[float, int]) -> str:
    return "\n".join(
        [
            f"# scrape {t}",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{finished_reason="stop"}} {done - done // 2}',
            f'vllm:request_success_total{{finished_reason="length"}} {done // 2}',
            f"vllm:prompt_tokens_total {prompt}",
            f"vllm:generation_tokens_total {gen}",
            "# TYPE vllm:time_to_first_token_seconds histogram",
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {done}',
            f"vllm:time_to_first_token_seconds_count {done}",
            f"vllm:time_to_first_token_seconds_sum {ttft}",
            "# TYPE vllm:time_per_output_token_seconds histogram",
            f"vllm:time_per_output_token_seconds_count {itl[1]}",
            f"vllm:time_per_output_token_seconds_sum {itl[0]}",
            "# TYPE vllm:e2e_request_latency_seconds histogram",
            f"vllm:e2e_request_latency_seconds_count {done}",
            f"vllm:e2e_request_latency_seconds_sum {ttft + itl[0]}",
            "",
        ]
    )


def test_metrics_scrapes_give_a_workload_and_per_interval_means(tmp_path: Path) -> None:
    """Requests per interval from the success counter (every label summed), token means
    from the token counters, and each histogram's mean from its sum and count growth; the
    older time_per_output_token histogram stands for the inter-token one."""
    path = tmp_path / "metrics.txt"
    path.write_text(
        scrape(1000, 0, 0, 0, 0.0, (0.0, 0))
        + scrape(1010, 10, 1000, 200, 1.0, (3.8, 190))
        + scrape(1020, 30, 5000, 600, 5.0, (11.8, 570)),
        encoding="utf-8",
    )
    assert detect_format(path) == "metrics"
    measured = read_measurements(path)
    first, second = measured.windows
    assert (first.start, first.end, first.requests) == (0.0, 10.0, 10)
    assert (first.prompt_tokens, first.output_tokens) == (100.0, 20.0)
    assert first.ttft == pytest.approx(0.1) and first.itl == pytest.approx(0.02)
    assert first.e2e == pytest.approx(0.48)
    assert (second.requests, second.prompt_tokens) == (20, 200.0)
    assert second.ttft == pytest.approx(0.2)
    assert len(measured.workload) == 30 and measured.completed == 30
    assert {(w.input_length, w.output_length) for w in measured.workload} == {(100, 20), (200, 20)}
    # Sent one mean latency before they end, evenly over the interval.
    assert measured.origin == pytest.approx(0.5 - 0.48)


def test_metrics_as_jsonl_of_time_and_text(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    texts = [
        scrape(0, 0, 0, 0, 0.0, (0.0, 0)),
        scrape(0, 10, 1000, 200, 1.0, (3.8, 190)),
    ]
    rows = [{"time": 50.0 + 10 * i, "text": text.split("\n", 1)[1]} for i, text in enumerate(texts)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    assert detect_format(path) == "metrics"
    assert read_measurements(path).windows[0].requests == 10


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (scrape(0, 0, 0, 0, 0, (0, 0)), "1 scrape(s): the workload comes from the counters"),
        (
            scrape(0, 10, 100, 20, 1, (1, 10)) + scrape(10, 5, 100, 20, 1, (1, 10)),
            "went down since the scrape before (a server restart?)",
        ),
        (
            scrape(10, 0, 0, 0, 0, (0, 0)) + scrape(5, 10, 100, 20, 1, (1, 10)),
            "its time does not follow the one before",
        ),
        ("# scrape 1\nvllm:request_success_total {{{\n", "not Prometheus text"),
        ("# scrape 1\nfoo 1\n# scrape 2\nfoo 2\n", "no vllm:request_success_total"),
        ("vllm:request_success_total 1\n", "line 1: expected '# scrape <unix seconds>'"),
        (
            scrape(0, 0, 0, 0, 0, (0, 0)) + scrape(10, 10, 0, 0, 1, (1, 10)),
            "the token counters are missing or inconsistent",
        ),
    ],
)
def test_unusable_metrics_are_refused(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "metrics.txt"
    path.write_text(text, encoding="utf-8")
    assert reason in error_of(path, "metrics")
