"""Helpers for the observability tests: scraping /metrics, timed streams, error envelopes."""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.http import post_sse, sse_events, token_times

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
# vLLM 0.32 answers with prometheus_client's latest text content type (version 1.0.0).
METRICS_CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"
REAL_METRICS_ONLY = "the simulator is reporting real metrics; fake metrics cannot be updated"
FAKE_PREFIX = "Failed to update fake metrics: "
POD_HEADERS = ("x-inference-pod", "x-inference-port", "x-inference-namespace")

TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:time_per_output_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
REQUEST_TPOT = "vllm:request_time_per_output_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"
QUEUE = "vllm:request_queue_time_seconds"
INFERENCE = "vllm:request_inference_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
DECODE = "vllm:request_decode_time_seconds"
PROMPT_HIST = "vllm:request_prompt_tokens"
GENERATION_HIST = "vllm:request_generation_tokens"
MAX_GENERATION_HIST = "vllm:request_max_num_generation_tokens"
PARAMS_MAX_TOKENS = "vllm:request_params_max_tokens"
PROMPT_TOTAL = "vllm:prompt_tokens_total"
GENERATION_TOTAL = "vllm:generation_tokens_total"
SUCCESS = "vllm:request_success_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
LORA_INFO = "vllm:lora_requests_info"
CACHE_CONFIG = "vllm:cache_config_info"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
SLEEP_STATE = "vllm:engine_sleep_state"
ITERATION_TOKENS = "vllm:iteration_tokens_total"
PARAMS_N = "vllm:request_params_n"
NUM_PREEMPTIONS_HIST = "vllm:request_num_preemptions"
PREFILL_KV_COMPUTED = "vllm:request_prefill_kv_computed_tokens"
NUM_PREEMPTIONS = "vllm:num_preemptions_total"
ADMISSION_REJECTIONS = "vllm:admission_rejections_total"
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
PROMPT_CACHED = "vllm:prompt_tokens_cached_total"
PROMPT_CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"
EXTERNAL_PREFIX_QUERIES = "vllm:external_prefix_cache_queries_total"
EXTERNAL_PREFIX_HITS = "vllm:external_prefix_cache_hits_total"

HISTOGRAMS = (
    TTFT,
    TPOT,
    ITL,
    REQUEST_TPOT,
    E2E,
    QUEUE,
    INFERENCE,
    PREFILL,
    DECODE,
    PROMPT_HIST,
    GENERATION_HIST,
    MAX_GENERATION_HIST,
    PARAMS_MAX_TOKENS,
    ITERATION_TOKENS,
    PARAMS_N,
    NUM_PREEMPTIONS_HIST,
    PREFILL_KV_COMPUTED,
)
COUNTERS = (
    PROMPT_TOTAL,
    GENERATION_TOTAL,
    PREFIX_QUERIES,
    PREFIX_HITS,
    EXTERNAL_PREFIX_QUERIES,
    EXTERNAL_PREFIX_HITS,
    "vllm:mm_cache_queries_total",
    "vllm:mm_cache_hits_total",
    NUM_PREEMPTIONS,
    PROMPT_CACHED,
    "vllm:estimated_flops_per_gpu_total",
    "vllm:estimated_read_bytes_per_gpu_total",
    "vllm:estimated_write_bytes_per_gpu_total",
)


@dataclass(frozen=True)
class Histogram:
    """One histogram series: cumulative buckets by upper bound, count and sum."""

    buckets: dict[float, float]
    count: float
    sum: float

    def le(self, bound: float) -> float:
        return self.buckets[bound]


class Metrics:
    """A parsed /metrics page (through prometheus_client's own parser)."""

    def __init__(self, text: str) -> None:
        self.text = text
        # sample name -> list of (labels, value)
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        self.types: dict[str, str] = {}
        self.help: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            self.help[family.name] = family.documentation
            for sample in family.samples:
                self.samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        return self.samples.get(name, [])

    def value(self, name: str, **labels: str) -> float:
        """The value of the one series of `name` whose labels include `labels`."""
        found = [v for lbl, v in self.series(name) if labels.items() <= lbl.items()]
        assert len(found) == 1, (name, labels, self.series(name))
        return found[0]

    def hist(self, name: str, **labels: str) -> Histogram:
        buckets: dict[float, float] = {}
        for lbl, value in self.series(name + "_bucket"):
            if labels.items() <= lbl.items():
                buckets[float(lbl["le"])] = value
        assert buckets, (name, labels)
        return Histogram(
            buckets, self.value(name + "_count", **labels), self.value(name + "_sum", **labels)
        )

    def success(self, model: str) -> dict[str, float]:
        """finished_reason -> value for one model."""
        return {
            lbl["finished_reason"]: v
            for lbl, v in self.series(SUCCESS)
            if lbl.get("model_name") == model
        }


def engine_lines(metrics: Metrics) -> list[str]:
    """The vLLM engine families' lines of a page: what the engine recorded, without the
    HTTP and process families, which any request changes."""
    return [line for line in metrics.text.splitlines() if line.startswith("vllm:")]


def scrape(client: httpx.Client, base_url: str = "") -> Metrics:
    response = client.get(base_url + "/metrics")
    assert response.status_code == 200, response.text
    return Metrics(response.text)


async def ascrape(client: httpx.AsyncClient, base_url: str) -> Metrics:
    response = await client.get(base_url + "/metrics")
    assert response.status_code == 200, response.text
    return Metrics(response.text)


def wait_until_idle(client: httpx.Client, base_url: str = "", timeout: float = 5.0) -> Metrics:
    """Scrapes until running and waiting are both 0."""
    deadline = time.monotonic() + timeout
    while True:
        metrics = scrape(client, base_url)
        if metrics.value(RUNNING) == 0 and metrics.value(WAITING) == 0:
            return metrics
        assert time.monotonic() < deadline, "the gauges never returned to 0"
        time.sleep(0.02)


def close(a: float, b: float, tol: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=0, abs_tol=tol)


@dataclass
class Timed:
    """A streamed response read event by event with arrival times (seconds from send)."""

    status: int
    headers: httpx.Headers
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    done: bool = False
    body: bytes = b""

    @property
    def token_times(self) -> list[float]:
        return token_times(self.events, per_choice=True)

    @property
    def usage(self) -> dict[str, Any]:
        usages = [e["usage"] for _, e in self.events if e.get("usage")]
        assert len(usages) == 1, self.events
        result: dict[str, Any] = usages[0]
        return result

    def finish_reasons(self) -> dict[int, str]:
        reasons: dict[int, str] = {}
        for _, event in self.events:
            for choice in event.get("choices", []):
                if choice.get("finish_reason") is not None:
                    assert choice["index"] not in reasons, "one finish per choice"
                    reasons[choice["index"]] = choice["finish_reason"]
        return reasons


def timed_stream(
    client: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Timed:
    """POSTs a streaming request and records when each SSE event arrived."""
    reply = post_sse(client, path, body, headers)
    events, done = sse_events(reply.data)
    return Timed(reply.status, reply.headers, events, done, reply.body)


def chat(content: str = "Hello there", **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], **extra}


def assert_promtool_clean(text: str) -> None:
    """`promtool check metrics` reports nothing (exit 0, no output) on the scraped text; the
    test is skipped where promtool is not installed.

    promlint flags every metric name containing ':' ("metric names should not contain
    ':'"); vLLM's names all start with `vllm:` on purpose, and so must ours (the simulator's
    own families follow the same style under `vllm_sim:`). It also flags
    vLLM's histogram `vllm:iteration_tokens_total` for its `_total` suffix. So the raw text
    may draw exactly those complaints, and with the prefix spelled `vllm_` promtool must be
    satisfied but for the second one.
    """
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not on PATH (Debian package `prometheus`)")
    raw = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    for line in (raw.stdout + raw.stderr).splitlines():
        if line != f"{ITERATION_TOKENS}{_TOTAL_SUFFIX}":
            assert line.startswith(("vllm:", "vllm_sim:")), line
            assert line.endswith(" metric names should not contain ':'"), line
    renamed = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text.replace("vllm:", "vllm_").replace("vllm_sim:", "vllm_sim_"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    complaints = (renamed.stdout + renamed.stderr).splitlines()
    iteration = ITERATION_TOKENS.replace("vllm:", "vllm_")
    assert complaints in ([], [f"{iteration}{_TOTAL_SUFFIX}"]), complaints


_TOTAL_SUFFIX = ' non-counter metrics should not have "_total" suffix'
