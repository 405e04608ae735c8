"""vLLM 0.32's engine metric families: names, help texts, labels and buckets, for one engine.

Names, help texts, label names and buckets are vLLM's (the families of its 0.32 `/metrics`,
in its order); every per-engine series carries `model_name` and `engine` (the data-parallel
rank). Where llm-d-inference-sim differs (`finished_reason`, the max-generation histogram's
name, help texts, series present from the start) this follows vLLM, as README.md lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from vllm_sim.metrics.cache_config import CACHE_CONFIG_LABELS
from vllm_sim.metrics.exposition import Families
from vllm_sim.metrics.families import CallbackGauge, Counter, Family, Gauge, Histogram
from vllm_sim.metrics.offload import OffloadFamilies

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
SLEEP_STATE = "vllm:engine_sleep_state"
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
ITERATION_TOKENS = "vllm:iteration_tokens_total"  # a histogram, named so by vLLM
MAX_GENERATION_TOKENS = "vllm:request_max_num_generation_tokens"
PARAMS_N = "vllm:request_params_n"
PARAMS_MAX_TOKENS = "vllm:request_params_max_tokens"
NUM_PREEMPTIONS_HIST = "vllm:request_num_preemptions"
PREFILL_KV_COMPUTED = "vllm:request_prefill_kv_computed_tokens"
# Counters, exposed as <name>_total and <name>_created.
ESTIMATED_FLOPS = "vllm:estimated_flops_per_gpu"
ESTIMATED_READ_BYTES = "vllm:estimated_read_bytes_per_gpu"
ESTIMATED_WRITE_BYTES = "vllm:estimated_write_bytes_per_gpu"
PREFIX_QUERIES = "vllm:prefix_cache_queries"
PREFIX_HITS = "vllm:prefix_cache_hits"
EXTERNAL_PREFIX_QUERIES = "vllm:external_prefix_cache_queries"
EXTERNAL_PREFIX_HITS = "vllm:external_prefix_cache_hits"
MM_CACHE_QUERIES = "vllm:mm_cache_queries"
MM_CACHE_HITS = "vllm:mm_cache_hits"
NUM_PREEMPTIONS = "vllm:num_preemptions"
PROMPT_TOKENS = "vllm:prompt_tokens"
PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source"
PROMPT_TOKENS_CACHED = "vllm:prompt_tokens_cached"
PROMPT_TOKENS_CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source"
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"
ADMISSION_REJECTIONS = "vllm:admission_rejections"
# Speculative decoding's counters, registered only when it is on.
SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"

RUNNING_HELP = "Number of requests in model execution batches."
WAITING_HELP = "Number of requests waiting to be processed."
KV_USAGE_HELP = "KV-cache usage. 1 means 100 percent usage."
WAITING_BY_REASON_HELP = (
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
    "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
    "blocked status). Sum of all reasons equals vllm:num_requests_waiting."
)
SLEEP_STATE_HELP = (
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
    "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
)
CACHED_BY_SOURCE_HELP = (
    "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
    "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
    "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
    "vllm:external_prefix_cache_hits."
)

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
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)

# vLLM creates these finish reasons' series at start-up; others appear when first used.
PRECREATED_FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
MODEL = ("model_name", "engine")
LORA_LABELS = ("max_lora", "running_lora_adapters", "waiting_lora_adapters")

WaitingReason = Literal["capacity", "deferred"]
WAITING_REASONS: tuple[WaitingReason, ...] = ("capacity", "deferred")
SleepState = Literal["awake", "weights_offloaded", "discard_all"]
SLEEP_STATES: tuple[SleepState, ...] = ("awake", "weights_offloaded", "discard_all")
# Where a prompt token's KV came from: computed here, found in this engine's prefix cache,
# or transferred by a KV connector (the decode leg of a P/D pair).
PromptSource = Literal["local_compute", "local_cache_hit", "external_kv_transfer"]
PROMPT_SOURCES: tuple[PromptSource, ...] = (
    "local_compute",
    "local_cache_hit",
    "external_kv_transfer",
)
# The cache tier a cached prompt token came from.
CachedSource = Literal["device", "host", "disk", "p2p", "external_unspecified"]
CACHED_SOURCES: tuple[CachedSource, ...] = ("device", "host", "disk", "p2p", "external_unspecified")
# Which queue cap refused an admission; the simulator's only cap counts requests.
AdmissionReason = Literal["max_num_queued_reqs", "max_num_queued_tokens"]
ADMISSION_REASONS: tuple[AdmissionReason, ...] = ("max_num_queued_reqs", "max_num_queued_tokens")


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


def _per_gpu_estimate(name: str, what: str) -> Counter:
    help_text = f"Estimated number of {what} per GPU (for Model Flops Utilization calculations)."
    return Counter(name, help_text, MODEL)


class SpecDecodeFamilies:
    """vLLM's speculative-decoding counters: one draft per sequence and step that verified
    drafts, its draft tokens, the accepted ones, and the accepted ones by draft position
    (`position` 0 to k - 1)."""

    def __init__(self, positions: int) -> None:
        self.positions = positions
        self.drafts = Counter(SPEC_DRAFTS, "Number of spec decoding drafts.", MODEL)
        self.draft_tokens = Counter(SPEC_DRAFT_TOKENS, "Number of draft tokens.", MODEL)
        self.accepted = Counter(SPEC_ACCEPTED, "Number of accepted tokens.", MODEL)
        self.accepted_per_pos = Counter(
            SPEC_ACCEPTED_PER_POS, "Accepted tokens per draft position.", (*MODEL, "position")
        )

    def families(self) -> list[Counter]:
        return [self.drafts, self.draft_tokens, self.accepted, self.accepted_per_pos]

    def precreate(self, labels: tuple[str, str]) -> None:
        """Every series at 0, each position's too, as vLLM creates them at start-up."""
        for family in (self.drafts, self.draft_tokens, self.accepted):
            family.ensure(*labels)
        for position in range(self.positions):
            self.accepted_per_pos.ensure(*labels, str(position))


@dataclass(frozen=True, slots=True)
class SchedulerView:
    """The scheduler's state families: read from the engine, or set by fake metrics.

    `waiting_by_reason` and `sleep_state` exist only where the engine's state is shown."""

    running: Family
    waiting: Family
    kv_usage: Family
    waiting_by_reason: Family | None = None
    sleep_state: Family | None = None


class VllmMetrics:
    """Every family of one engine, registered in vLLM's order, series created as vLLM does."""

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        engine: str = "0",
        num_speculative_tokens: int = 0,
        offload: bool = False,
    ) -> None:
        self.model_name = model_name
        self.engine = engine
        self.labels = (model_name, engine)  # every per-engine series' label values
        self.max_model_len = max_model_len
        self.families = Families()
        self.token_buckets = one_two_five_buckets(max_model_len)
        # As vLLM, only an engine that decodes speculatively has these families.
        self.spec_decode = (
            SpecDecodeFamilies(num_speculative_tokens) if num_speculative_tokens > 0 else None
        )
        # As vLLM, only an engine with the offloading connector has its families.
        self.offload = OffloadFamilies(self.labels) if offload else None
        self._info_gauges()
        self._counters()
        self._token_histograms()
        self._latency_histograms()

    def _info_gauges(self) -> None:
        self.lora_info = Gauge(LORA_INFO, "Running stats on lora requests.", LORA_LABELS)
        self.cache_config = Gauge(
            CACHE_CONFIG, "Information of the LLMEngine CacheConfig", CACHE_CONFIG_LABELS
        )

    def _counters(self) -> None:
        self.estimated_flops = _per_gpu_estimate(ESTIMATED_FLOPS, "floating point operations")
        self.estimated_read_bytes = _per_gpu_estimate(
            ESTIMATED_READ_BYTES, "bytes read from memory"
        )
        self.estimated_write_bytes = _per_gpu_estimate(
            ESTIMATED_WRITE_BYTES, "bytes written to memory"
        )
        self.prefix_queries = Counter(
            PREFIX_QUERIES, "Prefix cache queries, in terms of number of queried tokens.", MODEL
        )
        self.prefix_hits = Counter(
            PREFIX_HITS, "Prefix cache hits, in terms of number of cached tokens.", MODEL
        )
        external = "External prefix cache {} from KV connector cross-instance cache sharing, "
        self.external_prefix_queries = Counter(
            EXTERNAL_PREFIX_QUERIES,
            external.format("queries") + "in terms of number of queried tokens.",
            MODEL,
        )
        self.external_prefix_hits = Counter(
            EXTERNAL_PREFIX_HITS,
            external.format("hits") + "in terms of number of cached tokens.",
            MODEL,
        )
        self.mm_cache_queries = Counter(
            MM_CACHE_QUERIES,
            "Multi-modal cache queries, in terms of number of queried items.",
            MODEL,
        )
        self.mm_cache_hits = Counter(
            MM_CACHE_HITS, "Multi-modal cache hits, in terms of number of cached items.", MODEL
        )
        self.num_preemptions = Counter(
            NUM_PREEMPTIONS, "Cumulative number of preemption from the engine.", MODEL
        )
        self._token_counters()

    def _token_counters(self) -> None:
        self.prompt_tokens = Counter(PROMPT_TOKENS, "Number of prefill tokens processed.", MODEL)
        self.prompt_tokens_by_source = Counter(
            PROMPT_TOKENS_BY_SOURCE, "Number of prompt tokens by source.", (*MODEL, "source")
        )
        self.prompt_tokens_cached = Counter(
            PROMPT_TOKENS_CACHED, "Number of cached prompt tokens (local + external).", MODEL
        )
        self.prompt_tokens_cached_by_source = Counter(
            PROMPT_TOKENS_CACHED_BY_SOURCE, CACHED_BY_SOURCE_HELP, (*MODEL, "source")
        )
        self.generation_tokens = Counter(
            GENERATION_TOKENS, "Number of generation tokens processed.", MODEL
        )
        self.request_success = Counter(
            REQUEST_SUCCESS,
            "Count of successfully processed requests.",
            (*MODEL, "finished_reason"),
        )
        # Counted by the API front end, before any engine: no `engine` label.
        self.admission_rejections = Counter(
            ADMISSION_REJECTIONS,
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"),
        )

    def _token_histograms(self) -> None:
        tokens = self.token_buckets
        self.prompt_tokens_hist = Histogram(
            PROMPT_TOKENS_HIST, "Number of prefill tokens processed.", MODEL, tokens
        )
        self.generation_tokens_hist = Histogram(
            GENERATION_TOKENS_HIST, "Number of generation tokens processed.", MODEL, tokens
        )
        self.iteration_tokens = Histogram(
            ITERATION_TOKENS,
            "Histogram of number of tokens per engine_step.",
            MODEL,
            ITERATION_TOKENS_BUCKETS,
        )
        self.max_generation_tokens = Histogram(
            MAX_GENERATION_TOKENS,
            "Histogram of maximum number of requested generation tokens.",
            MODEL,
            tokens,
        )
        self.params_n = Histogram(
            PARAMS_N, "Histogram of the n request parameter.", MODEL, PARAMS_N_BUCKETS
        )
        self.params_max_tokens = Histogram(
            PARAMS_MAX_TOKENS, "Histogram of the max_tokens request parameter.", MODEL, tokens
        )

    def _latency_histograms(self) -> None:
        self.ttft = Histogram(
            TTFT, "Histogram of time to first token in seconds.", MODEL, TTFT_BUCKETS
        )
        # Hidden in vLLM 0.32 (deprecated for inter_token_latency_seconds); kept because
        # llm-d's fake-metrics contract drives it, and older dashboards read it.
        self.tpot = Histogram(
            TPOT, "Histogram of time per output token in seconds.", MODEL, TPOT_BUCKETS
        )
        self.itl = Histogram(
            ITL, "Histogram of inter-token latency in seconds.", MODEL, TPOT_BUCKETS
        )
        self.request_tpot = Histogram(
            REQUEST_TPOT,
            "Histogram of time_per_output_token_seconds per request.",
            MODEL,
            TPOT_BUCKETS,
        )
        self.e2e = Histogram(
            E2E, "Histogram of e2e request latency in seconds.", MODEL, LATENCY_BUCKETS
        )
        self.queue_time = _phase_histogram(QUEUE_TIME, "WAITING")
        self.inference_time = _phase_histogram(INFERENCE_TIME, "RUNNING")
        self.prefill_time = _phase_histogram(PREFILL_TIME, "PREFILL")
        self.decode_time = _phase_histogram(DECODE_TIME, "DECODE")
        self.num_preemptions_hist = Histogram(
            NUM_PREEMPTIONS_HIST,
            "Histogram of the number of times a request was preempted.",
            MODEL,
            NUM_PREEMPTIONS_BUCKETS,
        )
        self.prefill_kv_computed = Histogram(
            PREFILL_KV_COMPUTED,
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            MODEL,
            self.token_buckets,
        )

    def register(self, scheduler: SchedulerView, request_families: bool = True) -> None:
        """Registers every family in vLLM's order: speculative decoding's counters (when it
        is on), the offloading connector's (when offloading is on), the per-GPU estimates,
        the scheduler's state (live or fake), the counters and histograms, then the info
        gauges."""
        families: list[Family] = []
        if request_families:
            families += self.spec_decode.families() if self.spec_decode is not None else []
            families += self.offload.families() if self.offload is not None else []
            families += self.estimate_families()
        families += [scheduler.running, scheduler.waiting]
        families += [f for f in (scheduler.waiting_by_reason, scheduler.sleep_state) if f]
        families.append(scheduler.kv_usage)
        if request_families:
            families += self.request_families()
        families += [self.lora_info, self.cache_config]
        for family in families:
            self.families.register(family)

    def estimate_families(self) -> list[Counter]:
        return [self.estimated_flops, self.estimated_read_bytes, self.estimated_write_bytes]

    def request_families(self) -> list[Counter | Histogram]:
        """The counters and histograms after the scheduler's gauges, in vLLM's order."""
        return [
            self.prefix_queries,
            self.prefix_hits,
            self.external_prefix_queries,
            self.external_prefix_hits,
            self.mm_cache_queries,
            self.mm_cache_hits,
            self.num_preemptions,
            self.prompt_tokens,
            self.prompt_tokens_by_source,
            self.prompt_tokens_cached,
            self.prompt_tokens_cached_by_source,
            self.generation_tokens,
            self.request_success,
            self.admission_rejections,
            self.prompt_tokens_hist,
            self.generation_tokens_hist,
            self.iteration_tokens,
            self.max_generation_tokens,
            self.params_n,
            self.params_max_tokens,
            self.ttft,
            self.tpot,
            self.itl,
            self.request_tpot,
            self.e2e,
            self.queue_time,
            self.inference_time,
            self.prefill_time,
            self.decode_time,
            self.num_preemptions_hist,
            self.prefill_kv_computed,
        ]

    def precreate_series(self) -> None:
        """vLLM's start-up state: every series at 0, so rate() has data at once (a series
        already there, such as one a recorder derives, is left as it is)."""
        labels = self.labels
        if self.spec_decode is not None:
            self.spec_decode.precreate(labels)
        if self.offload is not None:
            self.offload.precreate()
        labelled: dict[Counter, Iterable[str]] = {
            self.request_success: PRECREATED_FINISH_REASONS,
            self.prompt_tokens_by_source: PROMPT_SOURCES,
            self.prompt_tokens_cached_by_source: CACHED_SOURCES,
        }
        for family in self.estimate_families() + self.request_families():
            if family is self.admission_rejections:
                for reason in ADMISSION_REASONS:
                    family.ensure(self.model_name, reason)
            elif isinstance(family, Counter) and family in labelled:
                for value in labelled[family]:
                    family.ensure(*labels, value)
            else:
                family.ensure(*labels)


class EngineState:
    """Live engine state the scheduler gauges read at scrape time."""

    def __init__(
        self,
        running: Callable[[], float],
        waiting: Callable[[], float],
        kv_usage: Callable[[], float],
        waiting_by_reason: Callable[[], Mapping[WaitingReason, int]],
        sleep_state: Callable[[], SleepState],
    ) -> None:
        self.running = running
        self.waiting = waiting
        self.kv_usage = kv_usage
        self.waiting_by_reason = waiting_by_reason
        self.sleep_state = sleep_state


def live_scheduler(labels: tuple[str, str], state: EngineState) -> SchedulerView:
    """vLLM's scheduler gauges, read from the engine when scraped."""

    def by_reason() -> list[tuple[tuple[str, ...], float]]:
        counts = state.waiting_by_reason()
        return [((*labels, reason), counts.get(reason, 0)) for reason in WAITING_REASONS]

    def sleep() -> list[tuple[tuple[str, ...], float]]:
        current = state.sleep_state()
        # awake is 1 while awake; each sleep level's own state is 1 while at that level.
        return [((*labels, s), float(s == current)) for s in SLEEP_STATES]

    return SchedulerView(
        running=CallbackGauge(RUNNING, RUNNING_HELP, MODEL, lambda: [(labels, state.running())]),
        waiting=CallbackGauge(WAITING, WAITING_HELP, MODEL, lambda: [(labels, state.waiting())]),
        kv_usage=CallbackGauge(
            KV_USAGE, KV_USAGE_HELP, MODEL, lambda: [(labels, state.kv_usage())]
        ),
        waiting_by_reason=CallbackGauge(
            WAITING_BY_REASON, WAITING_BY_REASON_HELP, (*MODEL, "reason"), by_reason
        ),
        sleep_state=CallbackGauge(SLEEP_STATE, SLEEP_STATE_HELP, (*MODEL, "sleep_state"), sleep),
    )


def fake_scheduler() -> tuple[Gauge, Gauge, Gauge]:
    """The running, waiting and KV-usage gauges, set by fake metrics instead of read from the
    engine (fake metrics configure no reason split and no sleep state)."""
    return (
        Gauge(RUNNING, RUNNING_HELP, MODEL),
        Gauge(WAITING, WAITING_HELP, MODEL),
        Gauge(KV_USAGE, KV_USAGE_HELP, MODEL),
    )
