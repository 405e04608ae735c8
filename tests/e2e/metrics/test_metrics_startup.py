"""GET /metrics of a freshly started real-mode simulator: families, help texts, buckets and
startup values as vLLM shows them."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.support.metrics import (
    ADMISSION_REJECTIONS,
    CACHE_CONFIG,
    CHAT,
    COMPLETIONS,
    COUNTERS,
    E2E,
    HISTOGRAMS,
    KV_USAGE,
    LORA_INFO,
    METRICS_CONTENT_TYPE,
    PARAMS_MAX_TOKENS,
    PROMPT_BY_SOURCE,
    PROMPT_CACHED_BY_SOURCE,
    PROMPT_HIST,
    PROMPT_TOTAL,
    QUEUE,
    RUNNING,
    SLEEP_STATE,
    SUCCESS,
    TPOT,
    TTFT,
    WAITING,
    WAITING_BY_REASON,
    Metrics,
    assert_promtool_clean,
    chat,
    scrape,
)
from tests.support.server import SimServer

MODEL = "first-name"
ALIAS = "second-name"
ENGINE = {"engine": "0", "model_name": MODEL}  # every per-engine series' labels
LABELS = f'engine="0",model_name="{MODEL}"'  # as printed: sorted by name
TTFT_BOUNDS = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
]  # fmt: skip
TPOT_BOUNDS = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
]  # fmt: skip
LAT_BOUNDS = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
]  # fmt: skip
# 1-2-5 buckets up to --max-model-len 600
TOKEN_BOUNDS = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]


@dataclass
class Started:
    sim: SimServer
    before: float  # wall clock just before the process was started
    after: float  # wall clock once it answered /health
    response: httpx.Response  # the very first /metrics answer


@pytest.fixture(scope="module")
def started() -> Iterator[Started]:
    args = [
        "--served-model-name", MODEL, ALIAS,
        "--block-size", "8",
        "--kv-cache-size", "16",
        "--max-loras", "2",
        "--max-model-len", "600",
    ]  # fmt: skip
    before = time.time()
    with SimServer(args) as sim:
        after = time.time()
        response = httpx.get(sim.url + "/metrics", timeout=10)
        yield Started(sim, before, after, response)


@pytest.fixture(scope="module")
def first(started: Started) -> Metrics:
    assert started.response.status_code == 200
    return Metrics(started.response.text)


def test_content_type_is_prometheus_text(started: Started) -> None:
    assert started.response.headers["content-type"].startswith(METRICS_CONTENT_TYPE)


def test_startup_gauges_are_zero_for_the_first_served_name(first: Metrics) -> None:
    for name in (RUNNING, WAITING, KV_USAGE):
        assert first.types[name] == "gauge"
        assert first.series(name) == [(ENGINE, 0.0)]
        assert f"{name}{{{LABELS}}} 0.0\n" in first.text


def test_startup_waiting_reasons_and_sleep_state(first: Metrics) -> None:
    assert first.series(WAITING_BY_REASON) == [
        ({**ENGINE, "reason": "capacity"}, 0.0),
        ({**ENGINE, "reason": "deferred"}, 0.0),
    ]
    assert first.series(SLEEP_STATE) == [
        ({**ENGINE, "sleep_state": "awake"}, 1.0),
        ({**ENGINE, "sleep_state": "weights_offloaded"}, 0.0),
        ({**ENGINE, "sleep_state": "discard_all"}, 0.0),
    ]


def test_help_texts_follow_vllm(first: Metrics) -> None:
    assert first.help[RUNNING] == "Number of requests in model execution batches."
    assert first.help[WAITING] == "Number of requests waiting to be processed."
    assert first.help[KV_USAGE] == "KV-cache usage. 1 means 100 percent usage."
    assert first.help[E2E] == "Histogram of e2e request latency in seconds."
    assert first.help[TTFT] == "Histogram of time to first token in seconds."
    assert first.help[LORA_INFO] == "Running stats on lora requests."
    assert first.help["vllm:request_success"] == "Count of successfully processed requests."
    assert f"# HELP {CACHE_CONFIG} Information of the LLMEngine CacheConfig\n" in first.text


def test_lora_requests_info_is_startup_time_in_whole_seconds(
    started: Started, first: Metrics
) -> None:
    [(labels, value)] = first.series(LORA_INFO)
    assert labels == {"max_lora": "2", "running_lora_adapters": "", "waiting_lora_adapters": ""}
    assert value == int(value)
    assert int(started.before) - 1 <= value <= started.after + 1
    # Python's prometheus_client prints a large value in exponent form
    line = re.search(rf"^{LORA_INFO}{{[^}}]*}} (\S+)$", first.text, re.M)
    assert line is not None
    assert re.fullmatch(r"1\.\d+e\+09", line.group(1)), line.group(1)


def test_cache_config_info_labels_come_from_the_flags(first: Metrics) -> None:
    assert first.types[CACHE_CONFIG] == "gauge"
    [(labels, value)] = first.series(CACHE_CONFIG)
    assert value == 1.0
    assert labels["block_size"] == "8"
    assert labels["num_gpu_blocks"] == "16"
    assert labels["kv_cache_size_tokens"] == "128"
    assert labels["kv_cache_max_concurrency"] == str(128 / 600)
    assert labels["enable_prefix_caching"] == "True"  # on by default, as in vLLM
    assert labels["engine"] == "0"
    assert "model_name" not in labels


def test_every_counter_and_histogram_exists_at_zero(first: Metrics) -> None:
    for name in COUNTERS:
        assert first.series(name) == [(ENGINE, 0.0)], name
    for name in HISTOGRAMS:
        assert first.types[name] == "histogram", name
        assert first.series(name + "_count") == [(ENGINE, 0.0)], name
        assert first.series(name + "_sum") == [(ENGINE, 0.0)], name
        buckets = first.series(name + "_bucket")
        assert buckets and all(v == 0.0 for _, v in buckets), name
        assert {(lbl["model_name"], lbl["engine"]) for lbl, _ in buckets} == {(MODEL, "0")}
    for name, sources in (
        (PROMPT_BY_SOURCE, ["local_compute", "local_cache_hit", "external_kv_transfer"]),
        (PROMPT_CACHED_BY_SOURCE, ["device", "host", "disk", "p2p", "external_unspecified"]),
    ):
        assert first.series(name) == [({**ENGINE, "source": s}, 0.0) for s in sources], name
    assert first.series(ADMISSION_REJECTIONS) == [
        ({"model_name": MODEL, "reason": reason}, 0.0)
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens")
    ]


def test_success_counter_has_vllm_reasons_at_zero(first: Metrics) -> None:
    assert first.types["vllm:request_success"] == "counter"
    reasons = ("stop", "length", "abort", "error", "repetition")
    assert first.success(MODEL) == dict.fromkeys(reasons, 0.0)
    assert len(first.series(SUCCESS)) == 5
    for reason in reasons:
        line = f'{SUCCESS}{{engine="0",finished_reason="{reason}",model_name="{MODEL}"}} 0.0\n'
        assert line in first.text
    assert "finish_reason=" not in first.text


def test_families_are_vllms_with_created_samples(first: Metrics) -> None:
    """vLLM's registry: the client library's collectors, the engine's families, the HTTP
    instrumentator's; every counter and histogram series with its `_created` sample."""
    created = {name for name in first.types if name.endswith("_created")}
    vllm = {name for name in first.types if name.startswith("vllm:")} - created
    expected = {
        RUNNING, WAITING, WAITING_BY_REASON, SLEEP_STATE, KV_USAGE, LORA_INFO, CACHE_CONFIG,
        *HISTOGRAMS,
    }  # fmt: skip
    counters = (*COUNTERS, SUCCESS, PROMPT_BY_SOURCE, PROMPT_CACHED_BY_SOURCE)
    expected |= {name.removesuffix("_total") for name in (*counters, ADMISSION_REJECTIONS)}
    assert vllm == expected
    assert {"python_info", "process_resident_memory_bytes", "python_gc_collections"} < set(
        first.types
    )
    for name in (*counters, ADMISSION_REJECTIONS):
        stamps = name.removesuffix("_total") + "_created"
        assert len(first.series(stamps)) == len(first.series(name)), name
    for name in HISTOGRAMS:
        assert len(first.series(name + "_created")) == 1, name
    assert "vllm:max_num_generation_tokens" not in first.text
    assert "vllm:request_max_num_generation_tokens_bucket" in first.text


@pytest.mark.parametrize(
    ("name", "bounds"),
    [
        (TTFT, TTFT_BOUNDS),
        (TPOT, TPOT_BOUNDS),
        (E2E, LAT_BOUNDS),
        (QUEUE, LAT_BOUNDS),
        (PROMPT_HIST, TOKEN_BOUNDS),
        (PARAMS_MAX_TOKENS, TOKEN_BOUNDS),
    ],
)
def test_bucket_bounds(first: Metrics, name: str, bounds: list[float]) -> None:
    les = [lbl["le"] for lbl, _ in first.series(name + "_bucket")]
    assert les[-1] == "+Inf"
    assert [float(le) for le in les[:-1]] == bounds
    # printed like Python floats: le="1.0", le="0.001"
    assert all(le == repr(b) for le, b in zip(les, bounds, strict=False))


def test_counter_and_bucket_lines_print_python_floats(first: Metrics) -> None:
    assert f'{PROMPT_HIST}_bucket{{engine="0",le="1.0",model_name="{MODEL}"}} 0.0\n' in first.text
    assert f'{TTFT}_bucket{{engine="0",le="0.001",model_name="{MODEL}"}} 0.0\n' in first.text
    assert f"{PROMPT_TOTAL}{{{LABELS}}} 0.0\n" in first.text


def test_requests_to_any_alias_count_under_the_first_name(started: Started) -> None:
    with httpx.Client(base_url=started.sim.url, timeout=30) as client:
        before = scrape(client)
        for model in (ALIAS, MODEL, None):
            body = chat(max_tokens=2) if model is None else chat(model=model, max_tokens=2)
            assert client.post(CHAT, json=body).status_code == 200
        response = client.post(COMPLETIONS, json={"model": ALIAS, "prompt": "hi", "max_tokens": 2})
        assert response.status_code == 200
        assert response.json()["model"] == MODEL
        after = scrape(client)
    assert all(lbl["model_name"] == MODEL for lbl, _ in after.series(E2E + "_count"))
    assert after.value(E2E + "_count") - before.value(E2E + "_count") == 4
    ended = sum(after.success(MODEL).values()) - sum(before.success(MODEL).values())
    assert ended == 4
    names = set(re.findall(r'model_name="([^"]*)"', after.text))
    assert names == {MODEL}


def test_promtool_check_metrics(started: Started) -> None:
    """promtool finds nothing wrong but the `vllm:` prefix, which is vLLM's own naming."""
    text = httpx.get(started.sim.url + "/metrics", timeout=10).text
    assert_promtool_clean(text)


def test_disable_log_stats_keeps_only_the_scheduler_view() -> None:
    """vLLM's --disable-log-stats: no request metrics; routers still see the gauges."""
    with SimServer(["--disable-log-stats"]) as sim, httpx.Client(base_url=sim.url) as client:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        assert client.post("/v1/chat/completions", json=body).status_code == 200
        text = client.get("/metrics").text
    assert f'vllm:num_requests_running{{engine="0",model_name="{sim.model}"}} 0.0' in text
    assert "vllm:cache_config_info" in text
    assert "vllm:request_success_total" not in text
    assert "vllm:time_to_first_token_seconds" not in text
