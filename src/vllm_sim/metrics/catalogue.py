"""vLLM's metric families: names, help texts, labels and buckets, for one engine.

Names, help texts and label names are vLLM's (v1 engine); where llm-d-inference-sim
differs (`finished_reason`, `request_max_num_generation_tokens`, help texts, number format,
series present from the start) this follows vLLM, as README.md lists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vllm_sim.metrics.exposition import Family, Registry
from vllm_sim.metrics.families import CallbackGauge, Counter, Gauge, Histogram

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
LORA_INFO = "vllm:lora_requests_info"
CACHE_CONFIG = "vllm:cache_config_info"
TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:time_per_output_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
REQUEST_TPOT = "vllm:request_time_per_output_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"
QUEUE_TIME = "vllm:request_queue_time_seconds"
INFERENCE_TIME = "vllm:request_inference_time_seconds"
PREFILL_TIME = "vllm:request_prefill_time_seconds"
DECODE_TIME = "vllm:request_decode_time_seconds"
PROMPT_TOKENS_HIST = "vllm:request_prompt_tokens"
GENERATION_TOKENS_HIST = "vllm:request_generation_tokens"
MAX_GENERATION_TOKENS = "vllm:request_max_num_generation_tokens"
PARAMS_MAX_TOKENS = "vllm:request_params_max_tokens"
PROMPT_TOKENS = "vllm:prompt_tokens"  # exposed as vllm:prompt_tokens_total
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"
PREFIX_QUERIES = "vllm:prefix_cache_queries"
PREFIX_HITS = "vllm:prefix_cache_hits"

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

# vLLM creates these finish reasons' series at start-up; others appear when first used.
PRECREATED_FINISH_REASONS = ("stop", "length", "abort", "error")
MODEL = ("model_name",)
LORA_LABELS = ("max_lora", "running_lora_adapters", "waiting_lora_adapters")


def one_two_five_buckets(max_model_len: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to max_model_len (vLLM's token-count buckets)."""
    bounds: list[int] = []
    power = 1
    while power <= max_model_len:
        bounds += [m * power for m in (1, 2, 5) if m * power <= max_model_len]
        power *= 10
    return tuple(bounds)


def _phase_histogram(name: str, phase: str) -> Histogram:
    """The time requests spend in one phase of vLLM's scheduler."""
    help_text = f"Histogram of time spent in {phase} phase for request."
    return Histogram(name, help_text, MODEL, LATENCY_BUCKETS)


class VllmMetrics:
    """Every family of one engine, registered in vLLM's order, series created as vLLM does."""

    def __init__(self, model_name: str, max_model_len: int) -> None:
        self.model_name = model_name
        self.registry = Registry()
        tokens = one_two_five_buckets(max_model_len)
        self.lora_info = Gauge(LORA_INFO, "Running stats on lora requests.", LORA_LABELS)
        self.cache_config = Gauge(
            CACHE_CONFIG,
            "Information of the LLMEngine CacheConfig",
            ("block_size", "num_gpu_blocks"),
        )
        self.prompt_tokens = Counter(PROMPT_TOKENS, "Number of prefill tokens processed.", MODEL)
        self.generation_tokens = Counter(
            GENERATION_TOKENS, "Number of generation tokens processed.", MODEL
        )
        self.request_success = Counter(
            REQUEST_SUCCESS,
            "Count of successfully processed requests.",
            ("model_name", "finished_reason"),
        )
        self.prefix_queries = Counter(
            PREFIX_QUERIES, "Prefix cache queries, in terms of number of queried tokens.", MODEL
        )
        self.prefix_hits = Counter(
            PREFIX_HITS, "Prefix cache hits, in terms of number of cached tokens.", MODEL
        )
        self._token_histograms(tokens)
        self._latency_histograms()

    def _token_histograms(self, tokens: tuple[int, ...]) -> None:
        self.prompt_tokens_hist = Histogram(
            PROMPT_TOKENS_HIST, "Number of prefill tokens processed.", MODEL, tokens
        )
        self.generation_tokens_hist = Histogram(
            GENERATION_TOKENS_HIST, "Number of generation tokens processed.", MODEL, tokens
        )
        self.max_generation_tokens = Histogram(
            MAX_GENERATION_TOKENS,
            "Histogram of maximum number of requested generation tokens.",
            MODEL,
            tokens,
        )
        self.params_max_tokens = Histogram(
            PARAMS_MAX_TOKENS, "Histogram of the max_tokens request parameter.", MODEL, tokens
        )

    def _latency_histograms(self) -> None:
        self.ttft = Histogram(
            TTFT, "Histogram of time to first token in seconds.", MODEL, TTFT_BUCKETS
        )
        self.tpot = Histogram(
            TPOT, "Histogram of time per output token in seconds.", MODEL, TPOT_BUCKETS
        )
        self.itl = Histogram(
            ITL, "Histogram of inter-token latency in seconds.", MODEL, TPOT_BUCKETS
        )
        self.e2e = Histogram(
            E2E, "Histogram of e2e request latency in seconds.", MODEL, LATENCY_BUCKETS
        )
        self.queue_time = _phase_histogram(QUEUE_TIME, "WAITING")
        self.inference_time = _phase_histogram(INFERENCE_TIME, "RUNNING")
        self.prefill_time = _phase_histogram(PREFILL_TIME, "PREFILL")
        self.decode_time = _phase_histogram(DECODE_TIME, "DECODE")
        self.request_tpot = Histogram(
            REQUEST_TPOT,
            "Histogram of time_per_output_token_seconds per request.",
            MODEL,
            TPOT_BUCKETS,
        )

    def register(self, gauges: Sequence[Family], request_families: bool = True) -> None:
        """Registers the scheduler gauges given (live or fake), then the other families."""
        families = [*gauges, self.lora_info, self.cache_config]
        if request_families:
            families += self.request_families()
        for family in families:
            self.registry.register(family)

    def request_families(self) -> list[Counter | Histogram]:
        return [
            self.prompt_tokens,
            self.generation_tokens,
            self.request_success,
            self.prefix_queries,
            self.prefix_hits,
            self.prompt_tokens_hist,
            self.generation_tokens_hist,
            self.max_generation_tokens,
            self.params_max_tokens,
            self.ttft,
            self.tpot,
            self.itl,
            self.e2e,
            self.queue_time,
            self.inference_time,
            self.prefill_time,
            self.decode_time,
            self.request_tpot,
        ]

    def precreate_series(self) -> None:
        """vLLM's start-up state: every model series at 0, so rate() has data at once."""
        for family in self.request_families():
            if family is self.request_success:
                for reason in PRECREATED_FINISH_REASONS:
                    family.labels(self.model_name, reason)
            else:
                family.labels(self.model_name)


class SchedulerGauges:
    """Live engine state the three scheduler gauges read at scrape time."""

    def __init__(
        self,
        running: Callable[[], float],
        waiting: Callable[[], float],
        kv_usage: Callable[[], float],
    ) -> None:
        self.running = running
        self.waiting = waiting
        self.kv_usage = kv_usage


def live_gauges(model_name: str, state: SchedulerGauges) -> list[CallbackGauge]:
    """vLLM's running, waiting and KV-usage gauges, read from the engine when scraped."""
    labels = (model_name,)
    return [
        CallbackGauge(
            RUNNING,
            "Number of requests in model execution batches.",
            MODEL,
            lambda: [(labels, state.running())],
        ),
        CallbackGauge(
            WAITING,
            "Number of requests waiting to be processed.",
            MODEL,
            lambda: [(labels, state.waiting())],
        ),
        CallbackGauge(
            KV_USAGE,
            "KV-cache usage. 1 means 100 percent usage.",
            MODEL,
            lambda: [(labels, state.kv_usage())],
        ),
    ]


def fake_gauges() -> tuple[Gauge, Gauge, Gauge]:
    """The same three gauges, set by fake metrics instead of read from the engine."""
    return (
        Gauge(RUNNING, "Number of requests in model execution batches.", MODEL),
        Gauge(WAITING, "Number of requests waiting to be processed.", MODEL),
        Gauge(KV_USAGE, "KV-cache usage. 1 means 100 percent usage.", MODEL),
    )
