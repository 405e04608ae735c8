"""THE settings table: the effective configuration, one immutable value the whole
simulator reads, whose every field is one setting's only declaration.

`attr: Type = flag(...)` declares the attribute, its type, the flag `--attr-name` and YAML
key `attr-name` (unless `key=` says otherwise), default, help, rules, env var, whether
POST /admin/config may change it and which fields of other layers' settings views it feeds
(`to=`). Parsing (argv, YAML, env), validation, `--help`, `docs/flags.md`, `/admin/config`
and the views all come from here (see `flags.SETTINGS`).

Fields are in the order the reference validates them: validation walks them and the first
failing rule wins, so a rule sits on the field the reference checks it at, and a config with
several errors reports the same one the reference does. Help and docs regroup them by group,
keeping this order within a group. Durations are `Duration`s (integer nanoseconds), lists
are tuples.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from vllm_sim.perf import GPUS, SpeculativeDecoding

from . import rules as r
from .durations import Duration
from .errors import ConfigError
from .fake_metrics import FakeMetrics
from .kinds import (
    BOOL,
    DURATION,
    FAKE_METRICS,
    FLOAT,
    INT,
    JSON_STRINGS,
    LORAS,
    PHASES,
    STRING,
    STRINGS,
)
from .phases import PhaseSchedule
from .rules import Rule
from .setting import (
    Admin,
    EnvRule,
    EnvVar,
    Group,
    View,
    ViewField,
    env_only,
    flag,
    secret,
    setting,
    vllm_flag,
)
from .speculative import parse_speculative_config
from .values import LoraModule, TimingModel, UvicornLogLevel
from .views import CORS, LATENCY, LIMITS, SERVING, SYNTHESIS
from .vllm_cli import AUTO
from .vllm_kinds import MaxModelLenKind

MS = Duration(1_000_000)
SECOND = Duration(1_000 * MS)
MAX_TIME_FACTOR = 100.0  # a load factor beyond it is no latency model, only a stalled server
MAX_TOOL_NUMBER = 1e15  # generated numbers stay exact integers and their range finite
# vLLM's value on a GPU below 70 GiB, the row --max-num-seqs 256 comes from.
VLLM_MAX_NUM_BATCHED_TOKENS = 2048

S, M, E, L, C, K = Group.SERVER, Group.MODEL, Group.ENGINE, Group.LATENCY, Group.CONTENT, Group.KV
P = Group.PERFORMANCE
GPU_NAMES = tuple(GPUS)
NN = r.not_negative


def _latency(to: View | ViewField, help: str, *rules: Rule, admin: Admin = Admin.LATENCY) -> Any:
    """A latency knob: a duration from 0, feeding the engine's latency view."""
    return flag(DURATION, 0, L, help, admin=admin, rules=rules, to=(to,))


def _keep_alive_seconds(value: str) -> Duration:
    """VLLM_HTTP_TIMEOUT_KEEP_ALIVE: whole seconds, as vLLM reads it."""
    try:
        seconds = int(value)
    except ValueError:
        seconds = -1
    if not 0 < seconds <= 3600:
        raise ConfigError(
            f"VLLM_HTTP_TIMEOUT_KEEP_ALIVE must be whole seconds from 1 to 3600, got {value!r}"
        )
    return Duration(seconds * SECOND)


def _nonzero_integer(value: str) -> bool:
    """vLLM reads its boolean switches as integers: any but 0 is on (anything else: off)."""
    try:
        return int(value) != 0
    except ValueError:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    # fmt: off
    model: str = flag(STRING, "", M, "Base model name (also positional: `vllm-sim [serve] MODEL`)",
        rules=(r.not_empty("model parameter is empty"),),
        env=EnvVar("SIM_MODEL", EnvRule.OVER_YAML), to=(SERVING("base_model"),))
    served_model_name: tuple[str, ...] = flag(STRINGS, (), M,
        "Names the API serves; the first is used in responses and metrics",
        fill=r.fill_served_names, default_doc="[model]", to=(SERVING("served_model_names"),))
    reasoning_parser: str = vllm_flag(C,
        "Answers open with a reasoning part, as vLLM with this parser reports it (chat "
        "`reasoning`, a Responses reasoning item, an Anthropic thinking block, usage's "
        "reasoning_tokens); qwen3 honours chat_template_kwargs enable_thinking", default="",
        default_doc="none", to=(SERVING,), rules=(r.one_of(("", *r.REASONING_PARSERS),
        "invalid reasoning parser: {value} (chose from {{ "
        + ",".join(r.REASONING_PARSERS) + " }})"),))
    reasoning_ratio: float = flag(FLOAT, 0.5, C,
        "With --reasoning-parser: the share of each answer's tokens that is reasoning",
        rules=(r.between(0, 1, "reasoning ratio must be between 0 and 1"),), to=(SERVING,))
    mode: str = flag(STRING, "random", M, "Response text: `random` sentences or `echo` the prompt",
        rules=(r.one_of(r.MODES,
                        "invalid mode '{value}', valid values are 'random' and 'echo'"),))
    seed: int = flag(INT, 0, M, "Random seed for content, lengths and jitter",
        default_factory=time.time_ns, default_doc="current time (Unix ns)")
    port: int = flag(INT, 8000, S, "HTTP (and gRPC) port; rank r of data parallel uses port+r",
        rules=(r.port_range("invalid port '{value}'"),))
    grpc_port: int | None = vllm_flag(S,
        "A port of its own for gRPC too (it is always served on --port as well); rank "
        "r of data parallel uses grpc-port+r", default_doc="none",
        rules=(r.OPTIONAL_PORT,))
    inter_token_latency: Duration = _latency(LATENCY("itl"), "Mean delay between output tokens",
        *r.duration_range("inter token latency"))
    inter_token_latency_std_dev: Duration = _latency(LATENCY("itl_std"),
        "Std-dev of the inter-token latency",
        *r.duration_range("inter token latency standard deviation"),
        r.std_cap("inter_token_latency", "inter token latency standard deviation cannot "
                  "be more than 30% of inter token latency"))
    time_to_first_token: Duration = _latency(LATENCY("ttft"),
        "Mean time to first token (constant calculator)",
        *r.duration_range("time to first token"))
    time_to_first_token_std_dev: Duration = _latency(LATENCY("ttft_std"),
        "Std-dev of the time to first token",
        *r.duration_range("time to first token standard deviation"),
        r.std_cap("time_to_first_token", "time to first token standard deviation cannot "
                  "be more than 30% of time to first token"))
    time_to_generate_image: Duration = _latency(LATENCY("image"),
        "Extra delay for a generated image (omni)",
        *r.duration_range("time to generate image"), admin=Admin.YES)
    time_to_generate_image_std_dev: Duration = _latency(LATENCY("image_std"),
        "Std-dev of the image generation time",
        *r.duration_range("time to generate image standard deviation"),
        r.std_cap("time_to_generate_image", "time to generate image standard deviation "
                  "cannot be more than 30% of time to generate image"), admin=Admin.YES)
    prefill_overhead: Duration = _latency(LATENCY, "Fixed prefill time (per-token calculator)",
        *r.duration_range("prefill overhead"))
    prefill_time_per_token: Duration = _latency(LATENCY("prefill_per_token"),
        "Prefill time per uncached prompt token",
        *r.duration_range("prefill time per token"))
    prefill_time_std_dev: Duration = _latency(LATENCY("prefill_std"),
        "Std-dev of the prefill time (no 30% cap)",
        *r.duration_range("prefill time standard deviation"))
    kv_cache_transfer_time_per_token: Duration = _latency(LATENCY("kv_transfer_per_token"),
        "P/D: KV transfer time per prompt token",
        *r.duration_range("kv-cache transfer time per token"))
    kv_cache_transfer_time_std_dev: Duration = _latency(LATENCY("kv_transfer_per_token_std"),
        "P/D: std-dev of the per-token transfer time",
        *r.duration_range("kv-cache transfer time standard deviation"))
    kv_cache_transfer_latency: Duration = _latency(LATENCY("kv_transfer"),
        "P/D: fixed KV transfer time (constant calculator)",
        *r.duration_range("kv-cache transfer time"))
    kv_cache_transfer_latency_std_dev: Duration = _latency(LATENCY("kv_transfer_std"),
        "P/D: std-dev of the KV transfer time",
        *r.duration_range("kv-cache transfer time standard deviation"),
        r.std_cap("kv_cache_transfer_latency", "kv-cache transfer standard deviation "
                  "cannot be more than 30% of kv-cache transfer"))
    time_factor_under_load: float = flag(FLOAT, 1.0, L,
        "Latency multiplier reached when all max-num-seqs slots run", admin=Admin.LATENCY,
        rules=(r.at_least(1.0, "time factor under load cannot be less than 1.0"),
               r.at_most(MAX_TIME_FACTOR, "time factor under load cannot be more than 100")),
               to=(LATENCY,))
    latency_factor: float = flag(FLOAT, 1.0, L,
        "Multiplies every latency the engine schedules to: TTFT, inter-token, prefill, KV "
        "transfer, image, and the step engine's steps (a phase of --phases sets it for a "
        "while)", admin=Admin.LATENCY, rules=(r.LATENCY_FACTOR,), to=(LATENCY("factor"),))
    max_loras: int = flag(INT, 1, Group.LORA, "LoRAs that can run at the same time",
        rules=(r.at_least(1, "max LoRAs cannot be less than 1"),
               r.at_most(1024, "max LoRAs cannot be more than 1024")), to=(LIMITS,))
    max_cpu_loras: int = flag(INT, 0, Group.LORA, "LoRAs kept loaded; 0 means --max-loras",
        fill=r.fill_cpu_loras, default_doc="max-loras",
        rules=(r.not_below("max_loras", "max CPU LoRAs cannot be less than max LoRAs"),
               r.at_most(65536, "max CPU LoRAs cannot be more than 65536")), to=(LIMITS,))
    max_model_len: int = flag(MaxModelLenKind(), AUTO, M,
        "Context window: prompt plus output tokens; also vLLM's `32k` (x1000), `32K` "
        "(x1024), and `auto`/-1 for the default",
        default_doc="the model's config.json (local folder), else 32768",
        rules=(r.at_least(1, "max model len cannot be less than 1"),
               r.at_most(10_000_000, "max model len cannot be more than 10000000")), to=(LIMITS,
               SERVING))
    max_num_seqs: int = flag(INT, 256, E, "Requests running at once; the rest wait",
        rules=(r.at_least(1, "max num seqs cannot be less than 1"),
               r.at_most(100_000, "max num seqs cannot be more than 100000")), to=(LATENCY, LIMITS))
    max_waiting_queue_length: int = flag(INT, 1000, E,
        "Waiting requests before new ones are refused",
        rules=(NN("max waiting queue size cannot be less than 0"),
               r.at_most(10_000_000, "max waiting queue size cannot be more than 10000000")),
               to=(LIMITS,))
    lora_modules: tuple[LoraModule, ...] = flag(LORAS, (), Group.LORA,
        'LoRAs as JSON, one per value: {"name":..,"path":..,"base_model_name":..}',
        rules=(r.LORA_MODULES,))
    min_tool_call_integer_param: int = flag(INT, 0, C, "Smallest generated integer argument",
        to=(SYNTHESIS("min_integer"),))
    max_tool_call_integer_param: int = flag(INT, 100, C, "Largest generated integer argument",
        rules=(r.not_below("min_tool_call_integer_param", "MaxToolCallIntegerParam cannot be "
                           "less than MinToolCallIntegerParam"),), to=(SYNTHESIS("max_integer"),))
    min_tool_call_number_param: float = flag(FLOAT, 0.0, C, "Smallest generated number argument",
        rules=(r.between(-MAX_TOOL_NUMBER, MAX_TOOL_NUMBER, "MinToolCallNumberParam must be "
                         "between -1e15 and 1e15"),), to=(SYNTHESIS("min_number"),))
    max_tool_call_number_param: float = flag(FLOAT, 100.0, C, "Largest generated number argument",
        rules=(r.between(-MAX_TOOL_NUMBER, MAX_TOOL_NUMBER, "MaxToolCallNumberParam must be "
                         "between -1e15 and 1e15"),
               r.not_below("min_tool_call_number_param", "MaxToolCallNumberParam cannot be "
                           "less than MinToolCallNumberParam")), to=(SYNTHESIS("max_number"),))
    max_tool_call_array_param_length: int = flag(INT, 5, C, "Longest generated array argument",
        rules=(r.not_below("min_tool_call_array_param_length", "MaxToolCallArrayParamLength "
                           "cannot be less than MinToolCallArrayParamLength"),
               r.at_most(1024, "MaxToolCallArrayParamLength cannot be more than 1024")),
               to=(SYNTHESIS("max_items"),))
    min_tool_call_array_param_length: int = flag(INT, 1, C, "Shortest generated array argument",
        rules=(NN("MinToolCallArrayParamLength cannot be negative"),), to=(SYNTHESIS("min_items"),))
    tool_call_not_required_param_probability: int = flag(INT, 50, C,
        "Chance (%) to include an optional tool argument",
        rules=(r.between(0, 100, "ToolCallNotRequiredParamProbability should be between 0 "
                         "and 100"),), to=(SYNTHESIS("optional_param_probability"),))
    object_tool_call_not_required_field_probability: int = flag(INT, 50, C,
        "Chance (%) to include an optional object field",
        rules=(r.between(0, 100, "ObjectToolCallNotRequiredParamProbability should be "
                         "between 0 and 100"),), to=(SYNTHESIS("optional_field_probability"),))
    tool_call_extra_call_probability: int = flag(INT, 45, C, "Chance (%) of one more tool call",
        rules=(r.between(0, 100, "ToolCallExtraCallProbability should be between 0 and 100"),),
        to=(SYNTHESIS("extra_call_probability"),))
    enable_kvcache: bool = flag(BOOL, False, K,
        "Publish KV events and apply cache-hit thresholds (needs POD_IP); blocks are "
        "accounted and prefix-cached without it")
    block_size: int = flag(INT, 16, K, "Tokens per KV block",
        rules=(r.one_of(r.BLOCK_SIZES, "token block size should be one of the following: "
                        "8, 16, 32, 64, 128"),), to=(LIMITS, SERVING))
    kv_cache_size: int = flag(INT, 32768, K,
        "KV cache capacity in blocks (32768 x 16 = 524,288 tokens: a mid-size model on "
        "one datacenter GPU)",
        rules=(NN("KV cache size cannot be negative"),
               r.at_most(100_000_000, "KV cache size cannot be more than 100000000")))
    event_batch_size: int = flag(INT, 16, K, "KV events per published batch",
        rules=(r.at_least(1, "event batch size cannot less than 1"),
               r.at_most(100_000, "event batch size cannot be more than 100000")))
    use_vllm_map_event_format: bool = flag(BOOL, False, K, "Encode KV events as maps, like vLLM")
    hash_seed: str = flag(STRING, "", K, "Seed of the block hashes (vLLM: PYTHONHASHSEED)",
        env=EnvVar("PYTHONHASHSEED", EnvRule.OVER_YAML))
    kv_events_replay_endpoint: str = flag(STRING, "", K, "ZMQ endpoint serving event replay",
        rules=(r.REPLAY_ENDPOINT,))
    kv_events_replay_queue_size: int = flag(INT, 1024, K, "Events kept for replay",
        rules=(r.REPLAY_QUEUE,
               r.at_most(1_000_000, "kv-events-replay-queue-size cannot be more than 1000000")))
    failure_injection_rate: int = flag(INT, 0, Group.FAILURES, "Chance (%) a request fails",
        admin=Admin.YES,
        rules=(r.between(0, 100, "failure injection rate should be between 0 and 100"),))
    image_emission_rate: int = flag(INT, 0, C, "Chance (%) an omni response carries an image",
        admin=Admin.YES,
        rules=(r.between(0, 100, "image emission rate should be between 0 and 100"),))
    failure_types: tuple[str, ...] = flag(STRINGS, (), Group.FAILURES,
        "Failure types to inject; none given means all", admin=Admin.YES,
        rules=(r.FAILURE_TYPES_RULE,), default_doc="all types")
    fake_metrics: FakeMetrics | None = flag(FAKE_METRICS, None, Group.FAILURES,
        "Expose these metrics instead of real ones (JSON object)", admin=Admin.YES,
        rules=(r.FAKE_METRICS_RULE,), default_doc="real metrics")
    fake_metrics_refresh_interval: Duration = flag(DURATION, 100 * MS, Group.FAILURES,
        "How often fake-metric generators are re-evaluated",
        rules=(r.REFRESH_INTERVAL, r.hour_cap("fake metrics refresh interval")))
    phases: PhaseSchedule | None = flag(PHASES, None, Group.FAILURES,
        "A phase schedule from the time the server listens: a YAML file (or the list "
        "inline) of phases, each a `duration` with a `latency-factor`, `failure-rate` and "
        "`failure-types`, or a `sleep` level, a `restart` or a `crash` (`exit-code`); after "
        "the last, the configured values, unless `repeat: true` (README, Phase schedules)",
        admin=Admin.YES, rules=(r.PHASES_RULE,))
    data_parallel_size: int = flag(INT, 1, Group.DATA_PARALLEL,
        "Ranks to run in this process, on port..port+N-1",
        rules=(r.between(1, 8, "data parallel size must be between 1 and 8"),
               r.DATA_PARALLEL_PORTS))
    data_parallel_rank: int = flag(INT, -1, Group.DATA_PARALLEL,
        "Run only this rank (on --port); negative means unset",
        rules=(r.Rule("≤ 7", "data parallel rank must be between 0 and 7",
                      lambda v, _: "data parallel rank must be between 0 and 7"
                      if v > 7 else None),))
    num_instances: int = flag(INT, 1, Group.FLEET,
        "Independent simulated vLLM instances served on port..port+N-1, each with its own "
        "engine, KV cache and events (ZMQ port offset by its index), metrics, LoRA state "
        "and pod name (POD_NAME-<index>)",
        rules=(r.between(1, 1000, "num instances must be between 1 and 1000"),
               r.FLEET_PORTS, r.FLEET_ALONE))
    fleet_processes: int = flag(INT, 1, Group.FLEET,
        "Processes the fleet's instances are spread over (one event loop each; at most one "
        "per instance)",
        rules=(r.between(1, 256, "fleet processes must be between 1 and 256"),))
    fleet_config: str = flag(STRING, "", Group.FLEET,
        "YAML file of per-instance overrides: `instances:`, a list of server settings "
        "(`count: N` repeats one), applied to instances 0, 1, ... in order",
        rules=(r.FLEET_CONFIG,))
    zmq_endpoint: str = flag(STRING, "tcp://127.0.0.1:5557", K, "ZMQ endpoint KV events go to",
        rules=(r.ZMQ_ENDPOINT, r.PORT_CLASH))
    ssl_certfile: str = flag(STRING, "", Group.TLS, "TLS certificate file (serve HTTPS)")
    ssl_keyfile: str = flag(STRING, "", Group.TLS, "TLS private key file", rules=(r.SSL_PAIR,))
    self_signed_certs: bool = flag(BOOL, False, Group.TLS,
        "Serve HTTPS with a generated certificate",
        rules=(r.SELF_SIGNED,))
    dataset_url: str = flag(STRING, "", Group.DATASETS, "Download the dataset from here if missing",
        rules=(r.DATASET_URL,))
    dataset_path: str = flag(STRING, "", Group.DATASETS, "SQLite dataset of responses",
        rules=(r.ECHO_DATASET,))
    dataset_in_memory: bool = flag(BOOL, False, Group.DATASETS,
        "Load the whole dataset into memory")
    dataset_table_name: str = flag(STRING, "llmd", Group.DATASETS, "Table of the dataset")
    latency_calculator: str = flag(STRING, "", L,
        "`constant`, `per-token`, or empty (legacy: per-token when TTFT is unset)",
        admin=Admin.LATENCY,
        rules=(r.one_of(r.LATENCY_CALCULATORS, "unknown latency-calculator {value}, "
                        "supported calculators are: constant and per-token"),),
                        to=(LATENCY("calculator"),))
    global_cache_hit_threshold: float = flag(FLOAT, 0.0, K,
        "Prefix-hit ratio at which requests finish with cache_threshold",
        rules=(r.between(0, 1, "global cache hit threshold must be between in range [0, 1]"),))
    default_embedding_dimensions: int = flag(INT, 384, C, "Embedding size when none is requested",
        rules=(r.at_least(1, "default embedding dimensions must be at least 1"),
               r.at_most(1_048_576, "default embedding dimensions cannot be more than "
                         "1048576")), to=(SERVING,))
    max_request_body_size_mb: int = flag(INT, 4, S, "Largest accepted request body",
        rules=(r.between(1, 512, "max-request-body-size-mb must be between 1 MB and 512 MB, "
                         "got {value}"),))
    max_request_output_tokens: int = flag(INT, 500_000, S,
        "Most output one request may make: n x prompts x max_tokens (counted as 1000 "
        "when unset) x (1 + logprob alternatives per token). A request asking more is a 400 "
        "naming this limit; one making more (a long echo or tool call) fails once past it. "
        "Also caps /detokenize. 0: no limit",
        rules=(NN("max request output tokens cannot be less than 0"),
               r.at_most(10**12, "max request output tokens cannot be more than 10^12")),
               to=(LIMITS, SERVING))
    enable_request_id_headers: bool = flag(BOOL, False, S, "Echo X-Request-Id in responses",
        to=(SERVING("echo_request_id"),))
    enable_prompt_tokens_details: bool = flag(BOOL, False, S,
        "Report cached prompt tokens in usage.prompt_tokens_details (vLLM's flag)",
        to=(SERVING("prompt_tokens_details"),))
    log_http: bool = flag(BOOL, False, S, "Log every HTTP request")
    host: str = flag(STRING, "0.0.0.0", S, "Address to bind (e.g. 127.0.0.1 for this machine only)")
    api_key: tuple[str, ...] = secret(STRINGS, (),
        "Keys accepted as `Authorization: Bearer KEY` on the API routes (several: repeat "
        "the flag or list them); /health, /health/ready and /metrics stay open",
        env=EnvVar("VLLM_API_KEY", EnvRule.OVER_YAML, lambda s: (s,)), repeatable=True)
    admin_api_key: str = secret(STRING, "",
        "Key the control endpoints (/admin/config, /fake_metrics, LoRA loading, sleep) "
        "require instead of --api-key")
    disable_admin: bool = flag(BOOL, False, S, "Remove /admin/config and /fake_metrics (404)")
    allowed_origins: tuple[str, ...] = flag(JSON_STRINGS, (), S,
        'CORS: origins whose pages may call the API, a JSON array such as '
        '`["https://a.example"]` (`["*"]`: any); none by default, as in vLLM', to=(CORS,))
    allowed_methods: tuple[str, ...] = flag(JSON_STRINGS, ("*",), S,
        "CORS: methods a preflight may ask for, as a JSON array", to=(CORS,))
    allowed_headers: tuple[str, ...] = flag(JSON_STRINGS, ("*",), S,
        "CORS: request headers a preflight may ask for, as a JSON array", to=(CORS,))
    allow_credentials: bool = flag(BOOL, False, S,
        "CORS: let pages send cookies and credentials (answers then name the origin)", to=(CORS,))
    disable_log_stats: bool = flag(BOOL, False, S,
        "Record no request metrics (vLLM's flag); /metrics keeps the scheduler gauges")
    startup_duration: Duration = flag(DURATION, 0, S, "/health/ready answers 503 for this long",
        rules=(r.hour_cap("startup duration"),))
    drain_timeout: Duration = flag(DURATION, 30 * SECOND, S,
        "On SIGTERM, how long in-flight requests may finish; then they are stopped with an "
        "error and the exit status is 3",
        rules=r.duration_range("drain timeout"))
    request_read_timeout: Duration = flag(DURATION, 30 * SECOND, S,
        "The longest a request head may take to arrive, and the longest a request body may "
        "go without a byte; past it the answer is 408 and the connection closes",
        rules=(r.at_least(MS, "request read timeout must be at least 1ms"),
               r.hour_cap("request read timeout")))
    enable_sleep_mode: bool = flag(BOOL, False, S,
        "Allow /sleep (also needs VLLM_SERVER_DEV_MODE=1)")
    enable_server_load_tracking: bool = flag(BOOL, False, S,
        "Count the generation requests in flight for GET /load (vLLM's flag); else it says 0")
    mm_encoder_only: bool = flag(BOOL, False, E, "Encoder-only multimodal mode (no gRPC)",
        to=(SERVING,))
    omni: bool = flag(BOOL, False, C, "Omni model: responses may carry generated images")
    skip_tool_validation: bool = flag(BOOL, False, C, "Do not validate tool definitions",
        to=(SERVING,))
    render_url: str = flag(STRING, "", Group.DATASETS,
        "A vLLM render service that gives chat and completions prompts their token ids "
        "(default: the tokenizer in this process)", default_doc="none")
    render_max_response_mb: float = flag(FLOAT, 0.0, Group.DATASETS,
        "Largest render service answer, MiB, read as it arrives (one announced larger is "
        "refused unread: a 503); 0: what --max-model-len token ids need, plus 1 MiB",
        rules=(r.between(0, 1024, "render-max-response-mb must be between 0 and 1024"),))
    render_timeout: Duration = flag(DURATION, 30 * SECOND, Group.DATASETS, "Render call timeout",
        rules=r.duration_range("render timeout"))
    mm_render_timeout: Duration = flag(DURATION, 60 * SECOND, Group.DATASETS,
        "Render call timeout for multimodal input",
        rules=r.duration_range("mm render timeout"))
    force_dummy_tokenizer: bool = flag(BOOL, False, Group.DATASETS,
        "Always use the simulated tokenizer")
    mm_processor_kwargs: str = flag(STRING, "", Group.IGNORED, "Accepted, stored, no effect")
    ec_transfer_config: str = flag(STRING, "", Group.IGNORED, "Accepted, stored, no effect")
    enforce_eager: bool = flag(BOOL, False, Group.IGNORED, "Accepted, stored, no effect")
    tensor_parallel_size: int = flag(INT, 1, P,
        "GPUs the model is split over: the roofline model divides weights and KV per GPU "
        "and adds an all-reduce per layer (stored under the constant model)",
        rules=(r.between(1, 64, "tensor parallel size must be between 1 and 64"),))
    enable_expert_parallel: bool = vllm_flag(P,
        "An MoE model's experts spread whole over tensor x data parallel GPUs (vLLM's "
        "expert parallelism): the roofline model reads each rank's share of the experts, "
        "routes every rank's tokens to them, and sends the tokens to their experts and back "
        "(all-to-all) in each MoE layer", default=False)
    timing_model: TimingModel = flag(STRING, "constant", P,
        "What times tokens: `constant` (the latency flags: llm-d-inference-sim's model), "
        "`roofline` (vLLM V1's step loop, each step timed from the model's config.json and "
        "--gpu) or `table` (the step loop timed by --timing-table)",
        rules=(r.one_of(r.TIMING_MODELS, "unknown timing-model {value}, supported models "
                        "are: constant, roofline and table"),))
    time_scale: float = flag(FLOAT, 1.0, P,
        "Run simulated time this many times faster than real time: every latency and step "
        "is armed that much sooner, while timestamps, metrics and reported latencies stay "
        "in simulated time (fast tests, what-if runs)",
        rules=(r.between(0.01, 1000, "time scale must be between 0.01 and 1000"),))
    gpu: str = flag(STRING, "H100", P,
        "The GPU the roofline model times: " + ", ".join(GPU_NAMES) + ", or one "
        "--gpu-spec-file defines", rules=(r.GPU_NAME,))
    gpu_spec_file: str = flag(STRING, "", P,
        "JSON or YAML file of GPU figures (peaks, bandwidth, efficiencies, overheads) "
        "replacing --gpu's, or a whole GPU of its own with a `name`",
        rules=(r.GPU_SPEC_FILE,))
    timing_table: str = flag(STRING, "", P,
        "Measured step times for --timing-model table: Dynamo's NPZ (prefill_isl, "
        "prefill_ttft_ms, decode_active_kv_tokens, decode_context_length, decode_itl) or a "
        "CSV with the header prefill_tokens,decode_batch,context,ms",
        rules=(r.TIMING_TABLE,))
    timing_profile: str = flag(STRING, "", P,
        "Step-model coefficients fitted to a real vLLM run (`vllm-sim calibrate` writes the "
        "YAML or JSON file), applied on top of --gpu and --gpu-spec-file under --timing-model "
        "roofline", rules=(r.TIMING_PROFILE,))
    gpu_memory_utilization: float = vllm_flag(P,
        "Share of each GPU's memory the engine may use: with the weights it sets the "
        "roofline model's KV blocks; stored under the constant model",
        rules=(r.between(0.01, 1.0, "gpu-memory-utilization must be between 0.01 and "
                         "1"),))
    num_gpu_blocks_override: int | None = vllm_flag(P,
        "KV blocks under the roofline and table models, instead of the computed ones",
        default_doc="computed",
        rules=(r.OPTIONAL_BLOCKS,))
    kv_cache_memory_bytes: int | None = vllm_flag(P,
        "KV cache memory per GPU in bytes (`20G`: 20 GiB, `20g`: 20e9): the roofline "
        "model sizes its KV blocks from it instead of --gpu-memory-utilization and the "
        "weights, as vLLM does; 0 or unset: computed",
        default_doc="computed", rules=(r.OPTIONAL_KV_BYTES,))
    dtype: str = vllm_flag(P, "Weight dtype of the roofline model (auto: bfloat16)")
    kv_cache_dtype: str = vllm_flag(P,
        "KV cache dtype of the roofline model (auto: the weights'; fp8 kinds: 1 byte)")
    quantization: str | None = vllm_flag(P,
        "Weight quantization as vLLM infers it: a checkpoint's quantization_config decides "
        "(fp8, mxfp4, nvfp4/modelopt, awq, gptq, compressed-tensors: the roofline model's "
        "weight bytes, and the GPU's FP8 or FP4 peak where it has one); fp8 quantizes a "
        "16-bit checkpoint at load; a method other than the config's is refused",
        default_doc="none")
    max_num_batched_tokens: int = vllm_flag(E,
        "Tokens one engine step may schedule (vLLM's flag, also `8k`/`8K`); stored",
        default=VLLM_MAX_NUM_BATCHED_TOKENS,
        rules=(r.at_least(1, "max-num-batched-tokens cannot be less than 1"),))
    speculative_config: dict[str, Any] | None = vllm_flag(E,
        "Speculative decoding, vLLM's JSON object: `method` (vLLM 0.32's: ngram, eagle, "
        "eagle3, mtp and its `*_mtp` names, medusa, mlp_speculator, draft_model, suffix, "
        "dflash, dspark, ...; inferred from `model` when absent, as vLLM does) and "
        "`num_speculative_tokens` k; other keys are accepted and ignored. Each decode step "
        "verifies k drafts and makes the accepted ones plus one token (see "
        "--spec-acceptance-rate); the spec_decode metrics count them",
        default_doc="none", rules=(r.SPECULATIVE_CONFIG,))
    spec_acceptance_rate: float = flag(FLOAT, 0.7, E,
        "With --speculative-config: the chance each draft token is accepted, given the ones "
        "before it were", admin=Admin.YES,
        rules=(r.between(0, 1, "spec acceptance rate must be between 0 and 1"),))
    enable_prefix_caching: bool = flag(BOOL, True, K,
        "Prefix caching (on by default, as in vLLM): prompts share and find their "
        "cached blocks", to=(SERVING("prefix_caching"),))
    kv_transfer_config: dict[str, Any] | None = vllm_flag(K,
        "vLLM's KV connector settings, a JSON object: an offloading connector "
        "(OffloadingConnector with `cpu_bytes_to_use`, LMCacheConnectorV1 or "
        "LMCacheMPConnector) sets up CPU offloading as --kv-offloading-size does; others "
        "(P/D) are stored",
        default_doc="none")
    kv_offloading_size: float | None = vllm_flag(K,
        "CPU KV offloading: GiB of host memory for KV blocks copied out of the GPU as they "
        "are computed (over all tensor-parallel ranks, per engine, as in vLLM); a prefix "
        "found there after the GPU's hit is loaded back over the host link instead of "
        "recomputed, and its blocks are reported with medium CPU",
        default_doc="none", rules=(r.KV_OFFLOADING_SIZE,))
    kv_offloading_backend: str = vllm_flag(K,
        "With --kv-offloading-size: vLLM's native CPU offloading, or LMCache (simulated "
        "as the same CPU tier of that size)", rules=(r.KV_OFFLOADING_CONNECTOR,))
    enable_lora: bool = vllm_flag(Group.LORA,
        "vLLM's LoRA switch; stored (adapters are served with or without it, as in "
        "llm-d-inference-sim)", default=False)
    max_lora_rank: int = vllm_flag(Group.LORA, "Largest LoRA rank, stored; vLLM's choices")
    tokenizer: str = vllm_flag(Group.DATASETS, "Tokenizer name or path (vLLM's flag)",
        default="", default_doc="model")
    chat_template: str = vllm_flag(Group.DATASETS,
        "Chat template, a file or the template itself (vLLM's flag)", default="",
        default_doc="the model's")
    tokenizer_revision: str = vllm_flag(Group.DATASETS,
        "Revision (branch, tag or commit) of the tokenizer on the HuggingFace hub",
        default="", default_doc="--revision")
    revision: str = vllm_flag(Group.DATASETS,
        "Revision of the model on the HuggingFace hub", default="", default_doc="main")
    download_dir: str = vllm_flag(Group.DATASETS,
        "Where hub files are downloaded (default: the HuggingFace cache)",
        default="", default_doc="HF cache")
    chat_template_content_format: str = vllm_flag(Group.DATASETS,
        "How message content reaches the template: auto detects it from the template")
    trust_request_chat_template: bool = vllm_flag(Group.DATASETS,
        "Render a chat with a template the request brings (vLLM refuses it by default)",
        default=False)
    default_chat_template_kwargs: dict[str, Any] | None = vllm_flag(Group.DATASETS,
        "Template variables for every chat, a JSON object (requests override them)",
        default_doc="none")
    enable_log_requests: bool = vllm_flag(Group.LOGGING,
        "Log every HTTP request (vLLM's flag; the same as --log-http)", default=False)
    uvicorn_log_level: UvicornLogLevel = vllm_flag(Group.LOGGING,
        "Level of the HTTP server's own log lines")
    verbosity: int = setting(INT, 2, Group.LOGGING,
        "Log verbosity: 1 warnings, 2 info, 4 per request, 5 trace", key="v", json_key=None,
        yaml=False, shorthand="v")
    pod_ip: str = setting(STRING, "", Group.ENVIRONMENT,
        "Pod IP for KV-event topics; required by --enable-kvcache", key="ip", json_key="IP",
        cli=False, env=EnvVar("POD_IP", EnvRule.DEFAULT), to=(SERVING,))
    pod_name: str = env_only(STRING, "", "Adds x-inference-pod/x-inference-port headers",
        "PodName", EnvVar("POD_NAME", EnvRule.ONLY))
    pod_namespace: str = env_only(STRING, "", "Adds the x-inference-namespace header",
        "PodNameSpace", EnvVar("POD_NAMESPACE", EnvRule.ONLY))
    vllm_dev_mode: bool = env_only(BOOL, False, "Exactly `1` enables dev endpoints such as /sleep",
        "VllmDevMode", EnvVar("VLLM_SERVER_DEV_MODE", EnvRule.ONLY, lambda s: s == "1"))
    http_timeout_keep_alive: Duration = env_only(DURATION, 5 * SECOND,
        "Seconds an idle keep-alive connection stays open between requests (vLLM's "
        "variable)", "HttpTimeoutKeepAlive",
        EnvVar("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", EnvRule.ONLY, _keep_alive_seconds))
    responses_api_store: bool = env_only(BOOL, False,
        "A non-zero integer keeps /v1/responses answers for GET /v1/responses/{id} and "
        "previous_response_id (vLLM's switch; off, `store` is ignored)",
        "VllmEnableResponsesApiStore",
        EnvVar("VLLM_ENABLE_RESPONSES_API_STORE", EnvRule.ONLY, _nonzero_integer))
    # fmt: on

    @property
    def speculative(self) -> SpeculativeDecoding | None:
        """--speculative-config as the engine runs it; None without speculation."""
        data = self.speculative_config
        return None if data is None else parse_speculative_config(data)

    @property
    def display_model_name(self) -> str:
        """The model name responses and metrics carry: the first served name."""
        return self.served_model_name[0] if self.served_model_name else self.model


__all__ = ["Config", "LoraModule"]
