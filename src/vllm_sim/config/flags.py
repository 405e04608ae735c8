"""THE settings table: every flag, YAML key and env var, with default, help and rules.

Parsing (argv, YAML, env), validation, `--help`, `docs/flags.md` and `/admin/config` are all
driven by `SETTINGS`; nothing else lists settings.

Entries are in the order the reference validates them: validation walks the table and the
first failing rule wins, so a rule sits on the entry the reference checks it at, and a config
with several errors reports the same one the reference does.
Help and docs regroup entries by `group`, keeping this order within a group.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_sim.perf import GPUS

from . import rules as r
from .errors import ConfigError
from .kinds import (
    BOOL,
    DURATION,
    FAKE_METRICS,
    FLOAT,
    INT,
    JSON_STRINGS,
    LORAS,
    STRING,
    STRINGS,
    Kind,
)
from .rules import Fill, Rule
from .vllm_cli import AUTO, BY_KEY, VllmOption
from .vllm_kinds import MaxModelLenKind, VllmValueKind

MS = 1_000_000
SECOND = 1_000 * MS
MAX_TIME_FACTOR = 100.0  # a load factor beyond it is no latency model, only a stalled server
MAX_TOOL_NUMBER = 1e15  # generated numbers stay exact integers and their range finite


class Group(enum.Enum):
    """Help sections, in display order."""

    SERVER = "Server"
    MODEL = "Model"
    ENGINE = "Engine & queue"
    LATENCY = "Latency"
    PERFORMANCE = "Performance model (step engine)"
    CONTENT = "Content & tools"
    KV = "KV cache & events"
    LORA = "LoRA"
    FAILURES = "Failure injection & fake metrics"
    DATA_PARALLEL = "Data parallel"
    TLS = "TLS"
    DATASETS = "Tokenizer & datasets"
    IGNORED = "Ignored vLLM flags"
    LOGGING = "Logging"
    ENVIRONMENT = "Environment"


class Admin(enum.Enum):
    """Whether POST /admin/config may change a setting."""

    NO = "no"
    YES = "yes"
    LATENCY = "yes (rebuilds the latency model)"


class EnvRule(enum.Enum):
    """Where an environment variable sits in the precedence order."""

    DEFAULT = "replaces the default; the YAML file still wins"
    OVER_YAML = "used when the flag is absent and the variable is non-empty; beats YAML"
    ONLY = "environment only"


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    rule: EnvRule
    parse: Callable[[str], Any] = str


@dataclass(frozen=True, slots=True)
class Setting:
    """One configurable value. `attr` None = accepted and ignored (klog, `--config`)."""

    key: str  # flag name without dashes; also the YAML key when `yaml`
    kind: Kind
    default: Any
    group: Group
    help: str
    attr: str | None
    json_key: str | None  # key in GET /admin/config, None = not shown
    cli: bool = True
    yaml: bool = True
    admin: Admin = Admin.NO
    env: EnvVar | None = None
    rules: tuple[Rule, ...] = ()
    fill: Fill | None = None
    shorthand: str | None = None
    default_factory: Callable[[], Any] | None = None
    default_doc: str | None = None  # shown instead of a computed default
    repeatable: bool = False  # a list flag whose later occurrences add to the first
    # A vLLM flag the reference lacks: vLLM's value syntax (a value never starts with '-')
    # and vLLM's wording in errors.
    vllm_syntax: bool = False

    def initial(self) -> Any:
        return self.default_factory() if self.default_factory else self.default


def flag(key: str, kind: Kind, default: Any, group: Group, help: str, **extra: Any) -> Setting:
    """A flag that is also a YAML key, a Config attribute and a GET /admin/config key."""
    return Setting(key, kind, default, group, help, key.replace("-", "_"), key, **extra)


def cli_only(key: str, kind: Kind, default: Any, help: str) -> Setting:
    """Accepted and ignored (`--config` is read by the loader, klog flags have no effect)."""
    group = Group.SERVER if key == "config" else Group.LOGGING
    return Setting(key, kind, default, group, help, None, None, yaml=False)


def vllm_flag(key: str, group: Group, help: str, **extra: Any) -> Setting:
    """A setting named after a vLLM flag the reference lacks; its kind, and its default
    unless given, come from the vLLM facts table."""
    option: VllmOption = BY_KEY[key]
    kind = BOOL if option.is_bool else VllmValueKind(option)
    default = extra.pop("default", option.default)
    if option.choices is not None:
        help += ": " + ", ".join(str(choice) for choice in option.choices)
    return flag(key, kind, default, group, help, vllm_syntax=True, **extra)


def env_only(key: str, kind: Kind, default: Any, help: str, json_key: str, env: EnvVar) -> Setting:
    """Neither flag nor YAML key: the environment sets it; GET /admin/config shows it."""
    attr = key.replace("-", "_")
    return Setting(
        key, kind, default, Group.ENVIRONMENT, help, attr, json_key, cli=False, yaml=False, env=env
    )


def secret(key: str, kind: Kind, default: Any, help: str, **extra: Any) -> Setting:
    """A flag never shown: not in GET /admin/config, not in YAML, not in `--help` defaults."""
    attr = key.replace("-", "_")
    return Setting(
        key, kind, default, Group.SERVER, help, attr, None, yaml=False, default_doc="", **extra
    )


def _latency(key: str, help: str, *rules: Rule, admin: Admin = Admin.LATENCY) -> Setting:
    return flag(key, DURATION, 0, Group.LATENCY, help, admin=admin, rules=rules)


def _keep_alive_seconds(value: str) -> int:
    """VLLM_HTTP_TIMEOUT_KEEP_ALIVE: whole seconds, as vLLM reads it; nanoseconds here."""
    try:
        seconds = int(value)
    except ValueError:
        seconds = -1
    if not 0 < seconds <= 3600:
        raise ConfigError(
            f"VLLM_HTTP_TIMEOUT_KEEP_ALIVE must be whole seconds from 1 to 3600, got {value!r}"
        )
    return seconds * SECOND


def _nonzero_integer(value: str) -> bool:
    """vLLM reads its boolean switches as integers: any but 0 is on (anything else: off)."""
    try:
        return int(value) != 0
    except ValueError:
        return False


# vLLM's value on a GPU below 70 GiB, the row --max-num-seqs 256 comes from.
VLLM_MAX_NUM_BATCHED_TOKENS = 2048

S, M, E, L, C, K = Group.SERVER, Group.MODEL, Group.ENGINE, Group.LATENCY, Group.CONTENT, Group.KV
P = Group.PERFORMANCE
GPU_NAMES = tuple(GPUS)
NN = r.not_negative

# fmt: off
SETTINGS: tuple[Setting, ...] = (
    cli_only("config", STRING, "", "YAML file of settings (keys = flag names); flags beat it"),
    flag("model", STRING, "", M, "Base model name (also positional: `vllm-sim [serve] MODEL`)",
         rules=(r.not_empty("model parameter is empty"),),
         env=EnvVar("SIM_MODEL", EnvRule.OVER_YAML)),
    flag("served-model-name", STRINGS, (), M,
         "Names the API serves; the first is used in responses and metrics",
         fill=r.fill_served_names, default_doc="[model]"),
    flag("mode", STRING, "random", M, "Response text: `random` sentences or `echo` the prompt",
         rules=(r.one_of(r.MODES,
                         "invalid mode '{value}', valid values are 'random' and 'echo'"),)),
    flag("seed", INT, 0, M, "Random seed for content, lengths and jitter",
         default_factory=time.time_ns, default_doc="current time (Unix ns)"),
    flag("port", INT, 8000, S, "HTTP (and gRPC) port; rank r of data parallel uses port+r",
         rules=(r.port_range("invalid port '{value}'"),)),
    vllm_flag("grpc-port", S,
              "A port of its own for gRPC too (it is always served on --port as well); rank "
              "r of data parallel uses grpc-port+r", default_doc="none",
              rules=(r.OPTIONAL_PORT,)),
    _latency("inter-token-latency", "Mean delay between output tokens",
             *r.duration_range("inter token latency")),
    _latency("inter-token-latency-std-dev", "Std-dev of the inter-token latency",
             *r.duration_range("inter token latency standard deviation"),
             r.std_cap("inter_token_latency", "inter token latency standard deviation cannot "
                       "be more than 30% of inter token latency")),
    _latency("time-to-first-token", "Mean time to first token (constant calculator)",
             *r.duration_range("time to first token")),
    _latency("time-to-first-token-std-dev", "Std-dev of the time to first token",
             *r.duration_range("time to first token standard deviation"),
             r.std_cap("time_to_first_token", "time to first token standard deviation cannot "
                       "be more than 30% of time to first token")),
    _latency("time-to-generate-image", "Extra delay for a generated image (omni)",
             *r.duration_range("time to generate image"), admin=Admin.YES),
    _latency("time-to-generate-image-std-dev", "Std-dev of the image generation time",
             *r.duration_range("time to generate image standard deviation"),
             r.std_cap("time_to_generate_image", "time to generate image standard deviation "
                       "cannot be more than 30% of time to generate image"), admin=Admin.YES),
    _latency("prefill-overhead", "Fixed prefill time (per-token calculator)",
             *r.duration_range("prefill overhead")),
    _latency("prefill-time-per-token", "Prefill time per uncached prompt token",
             *r.duration_range("prefill time per token")),
    _latency("prefill-time-std-dev", "Std-dev of the prefill time (no 30% cap)",
             *r.duration_range("prefill time standard deviation")),
    _latency("kv-cache-transfer-time-per-token", "P/D: KV transfer time per prompt token",
             *r.duration_range("kv-cache transfer time per token")),
    _latency("kv-cache-transfer-time-std-dev", "P/D: std-dev of the per-token transfer time",
             *r.duration_range("kv-cache transfer time standard deviation")),
    _latency("kv-cache-transfer-latency", "P/D: fixed KV transfer time (constant calculator)",
             *r.duration_range("kv-cache transfer time")),
    _latency("kv-cache-transfer-latency-std-dev", "P/D: std-dev of the KV transfer time",
             *r.duration_range("kv-cache transfer time standard deviation"),
             r.std_cap("kv_cache_transfer_latency", "kv-cache transfer standard deviation "
                       "cannot be more than 30% of kv-cache transfer")),
    flag("time-factor-under-load", FLOAT, 1.0, L,
         "Latency multiplier reached when all max-num-seqs slots run", admin=Admin.LATENCY,
         rules=(r.at_least(1.0, "time factor under load cannot be less than 1.0"),
                r.at_most(MAX_TIME_FACTOR, "time factor under load cannot be more than 100"))),
    flag("max-loras", INT, 1, Group.LORA, "LoRAs that can run at the same time",
         rules=(r.at_least(1, "max LoRAs cannot be less than 1"),
                r.at_most(1024, "max LoRAs cannot be more than 1024"))),
    flag("max-cpu-loras", INT, 0, Group.LORA, "LoRAs kept loaded; 0 means --max-loras",
         fill=r.fill_cpu_loras, default_doc="max-loras",
         rules=(r.not_below("max_loras", "max CPU LoRAs cannot be less than max LoRAs"),
                r.at_most(65536, "max CPU LoRAs cannot be more than 65536"))),
    flag("max-model-len", MaxModelLenKind(), AUTO, M,
         "Context window: prompt plus output tokens; also vLLM's `32k` (x1000), `32K` "
         "(x1024), and `auto`/-1 for the default",
         default_doc="the model's config.json (local folder), else 32768",
         rules=(r.at_least(1, "max model len cannot be less than 1"),
                r.at_most(10_000_000, "max model len cannot be more than 10000000"))),
    flag("max-num-seqs", INT, 256, E, "Requests running at once; the rest wait",
         rules=(r.at_least(1, "max num seqs cannot be less than 1"),
                r.at_most(100_000, "max num seqs cannot be more than 100000"))),
    flag("max-waiting-queue-length", INT, 1000, E, "Waiting requests before new ones are refused",
         rules=(NN("max waiting queue size cannot be less than 0"),
                r.at_most(10_000_000, "max waiting queue size cannot be more than 10000000"))),
    flag("lora-modules", LORAS, (), Group.LORA,
         'LoRAs as JSON, one per value: {"name":..,"path":..,"base_model_name":..}',
         rules=(r.LORA_MODULES,)),
    flag("min-tool-call-integer-param", INT, 0, C, "Smallest generated integer argument"),
    flag("max-tool-call-integer-param", INT, 100, C, "Largest generated integer argument",
         rules=(r.not_below("min_tool_call_integer_param", "MaxToolCallIntegerParam cannot be "
                            "less than MinToolCallIntegerParam"),)),
    flag("min-tool-call-number-param", FLOAT, 0.0, C, "Smallest generated number argument",
         rules=(r.between(-MAX_TOOL_NUMBER, MAX_TOOL_NUMBER, "MinToolCallNumberParam must be "
                          "between -1e15 and 1e15"),)),
    flag("max-tool-call-number-param", FLOAT, 100.0, C, "Largest generated number argument",
         rules=(r.between(-MAX_TOOL_NUMBER, MAX_TOOL_NUMBER, "MaxToolCallNumberParam must be "
                          "between -1e15 and 1e15"),
                r.not_below("min_tool_call_number_param", "MaxToolCallNumberParam cannot be "
                            "less than MinToolCallNumberParam"))),
    flag("max-tool-call-array-param-length", INT, 5, C, "Longest generated array argument",
         rules=(r.not_below("min_tool_call_array_param_length", "MaxToolCallArrayParamLength "
                            "cannot be less than MinToolCallArrayParamLength"),
                r.at_most(1024, "MaxToolCallArrayParamLength cannot be more than 1024"))),
    flag("min-tool-call-array-param-length", INT, 1, C, "Shortest generated array argument",
         rules=(NN("MinToolCallArrayParamLength cannot be negative"),)),
    flag("tool-call-not-required-param-probability", INT, 50, C,
         "Chance (%) to include an optional tool argument",
         rules=(r.between(0, 100, "ToolCallNotRequiredParamProbability should be between 0 "
                          "and 100"),)),
    flag("object-tool-call-not-required-field-probability", INT, 50, C,
         "Chance (%) to include an optional object field",
         rules=(r.between(0, 100, "ObjectToolCallNotRequiredParamProbability should be "
                          "between 0 and 100"),)),
    flag("tool-call-extra-call-probability", INT, 45, C, "Chance (%) of one more tool call",
         rules=(r.between(0, 100, "ToolCallExtraCallProbability should be between 0 and 100"),)),
    flag("enable-kvcache", BOOL, False, K,
         "Publish KV events and apply cache-hit thresholds (needs POD_IP); blocks are "
         "accounted and prefix-cached without it"),
    flag("block-size", INT, 16, K, "Tokens per KV block",
         rules=(r.one_of(r.BLOCK_SIZES, "token block size should be one of the following: "
                         "8, 16, 32, 64, 128"),)),
    flag("kv-cache-size", INT, 32768, K,
         "KV cache capacity in blocks (32768 x 16 = 524,288 tokens: a mid-size model on "
         "one datacenter GPU)",
         rules=(NN("KV cache size cannot be negative"),
                r.at_most(100_000_000, "KV cache size cannot be more than 100000000"))),
    flag("event-batch-size", INT, 16, K, "KV events per published batch",
         rules=(r.at_least(1, "event batch size cannot less than 1"),
                r.at_most(100_000, "event batch size cannot be more than 100000"))),
    flag("use-vllm-map-event-format", BOOL, False, K, "Encode KV events as maps, like vLLM"),
    flag("hash-seed", STRING, "", K, "Seed of the block hashes (vLLM: PYTHONHASHSEED)",
         env=EnvVar("PYTHONHASHSEED", EnvRule.OVER_YAML)),
    flag("kv-events-replay-endpoint", STRING, "", K, "ZMQ endpoint serving event replay",
         rules=(r.REPLAY_ENDPOINT,)),
    flag("kv-events-replay-queue-size", INT, 1024, K, "Events kept for replay",
         rules=(r.REPLAY_QUEUE,
                r.at_most(1_000_000, "kv-events-replay-queue-size cannot be more than 1000000"))),
    flag("failure-injection-rate", INT, 0, Group.FAILURES, "Chance (%) a request fails",
         admin=Admin.YES,
         rules=(r.between(0, 100, "failure injection rate should be between 0 and 100"),)),
    flag("image-emission-rate", INT, 0, C, "Chance (%) an omni response carries an image",
         admin=Admin.YES,
         rules=(r.between(0, 100, "image emission rate should be between 0 and 100"),)),
    flag("failure-types", STRINGS, (), Group.FAILURES,
         "Failure types to inject; none given means all", admin=Admin.YES,
         rules=(r.FAILURE_TYPES_RULE,), default_doc="all types"),
    flag("fake-metrics", FAKE_METRICS, None, Group.FAILURES,
         "Expose these metrics instead of real ones (JSON object)", admin=Admin.YES,
         rules=(r.FAKE_METRICS_RULE,), default_doc="real metrics"),
    flag("fake-metrics-refresh-interval", DURATION, 100 * MS, Group.FAILURES,
         "How often fake-metric generators are re-evaluated",
         rules=(r.REFRESH_INTERVAL, r.hour_cap("fake metrics refresh interval"))),
    flag("data-parallel-size", INT, 1, Group.DATA_PARALLEL,
         "Ranks to run in this process, on port..port+N-1",
         rules=(r.between(1, 8, "data parallel size must be between 1 and 8"),
                r.DATA_PARALLEL_PORTS)),
    flag("data-parallel-rank", INT, -1, Group.DATA_PARALLEL,
         "Run only this rank (on --port); negative means unset",
         rules=(r.Rule("≤ 7", "data parallel rank must be between 0 and 7",
                       lambda v, _: "data parallel rank must be between 0 and 7"
                       if v > 7 else None),)),
    flag("zmq-endpoint", STRING, "tcp://127.0.0.1:5557", K, "ZMQ endpoint KV events go to",
         rules=(r.ZMQ_ENDPOINT, r.PORT_CLASH)),
    flag("ssl-certfile", STRING, "", Group.TLS, "TLS certificate file (serve HTTPS)"),
    flag("ssl-keyfile", STRING, "", Group.TLS, "TLS private key file", rules=(r.SSL_PAIR,)),
    flag("self-signed-certs", BOOL, False, Group.TLS, "Serve HTTPS with a generated certificate",
         rules=(r.SELF_SIGNED,)),
    flag("dataset-url", STRING, "", Group.DATASETS, "Download the dataset from here if missing",
         rules=(r.DATASET_URL,)),
    flag("dataset-path", STRING, "", Group.DATASETS, "SQLite dataset of responses",
         rules=(r.ECHO_DATASET,)),
    flag("dataset-in-memory", BOOL, False, Group.DATASETS, "Load the whole dataset into memory"),
    flag("dataset-table-name", STRING, "llmd", Group.DATASETS, "Table of the dataset"),
    flag("latency-calculator", STRING, "", L,
         "`constant`, `per-token`, or empty (legacy: per-token when TTFT is unset)",
         admin=Admin.LATENCY,
         rules=(r.one_of(r.LATENCY_CALCULATORS, "unknown latency-calculator {value}, "
                         "supported calculators are: constant and per-token"),)),
    flag("global-cache-hit-threshold", FLOAT, 0.0, K,
         "Prefix-hit ratio at which requests finish with cache_threshold",
         rules=(r.between(0, 1, "global cache hit threshold must be between in range [0, 1]"),)),
    flag("default-embedding-dimensions", INT, 384, C, "Embedding size when none is requested",
         rules=(r.at_least(1, "default embedding dimensions must be at least 1"),
                r.at_most(1_048_576, "default embedding dimensions cannot be more than "
                          "1048576"))),
    flag("max-request-body-size-mb", INT, 4, S, "Largest accepted request body",
         rules=(r.between(1, 512, "max-request-body-size-mb must be between 1 MB and 512 MB, "
                          "got {value}"),)),
    flag("max-request-output-tokens", INT, 500_000, S,
         "Most output one request may make: n x prompts x max_tokens (counted as 1000 "
         "when unset) x (1 + logprob alternatives per token). A request asking more is a 400 "
         "naming this limit; one making more (a long echo or tool call) fails once past it. "
         "Also caps /detokenize. 0: no limit",
         rules=(NN("max request output tokens cannot be less than 0"),
                r.at_most(10**12, "max request output tokens cannot be more than 10^12"))),
    flag("enable-request-id-headers", BOOL, False, S, "Echo X-Request-Id in responses"),
    flag("enable-prompt-tokens-details", BOOL, False, S,
         "Report cached prompt tokens in usage.prompt_tokens_details (vLLM's flag)"),
    flag("log-http", BOOL, False, S, "Log every HTTP request"),
    flag("host", STRING, "0.0.0.0", S, "Address to bind (e.g. 127.0.0.1 for this machine only)"),
    secret("api-key", STRINGS, (),
           "Keys accepted as `Authorization: Bearer KEY` on the API routes (several: repeat "
           "the flag or list them); /health, /health/ready and /metrics stay open",
           env=EnvVar("VLLM_API_KEY", EnvRule.OVER_YAML, lambda s: (s,)), repeatable=True),
    secret("admin-api-key", STRING, "",
           "Key the control endpoints (/admin/config, /fake_metrics, LoRA loading, sleep) "
           "require instead of --api-key"),
    flag("disable-admin", BOOL, False, S, "Remove /admin/config and /fake_metrics (404)"),
    flag("allowed-origins", JSON_STRINGS, (), S,
         'CORS: origins whose pages may call the API, a JSON array such as '
         '`["https://a.example"]` (`["*"]`: any); none by default, as in vLLM'),
    flag("allowed-methods", JSON_STRINGS, ("*",), S,
         "CORS: methods a preflight may ask for, as a JSON array"),
    flag("allowed-headers", JSON_STRINGS, ("*",), S,
         "CORS: request headers a preflight may ask for, as a JSON array"),
    flag("allow-credentials", BOOL, False, S,
         "CORS: let pages send cookies and credentials (answers then name the origin)"),
    flag("disable-log-stats", BOOL, False, S,
         "Record no request metrics (vLLM's flag); /metrics keeps the scheduler gauges"),
    flag("startup-duration", DURATION, 0, S, "/health/ready answers 503 for this long",
         rules=(r.hour_cap("startup duration"),)),
    flag("drain-timeout", DURATION, 30 * SECOND, S,
         "On SIGTERM, how long in-flight requests may finish; then they are stopped with an "
         "error and the exit status is 3",
         rules=r.duration_range("drain timeout")),
    flag("request-read-timeout", DURATION, 30 * SECOND, S,
         "The longest a request head may take to arrive, and the longest a request body may "
         "go without a byte; past it the answer is 408 and the connection closes",
         rules=(r.at_least(MS, "request read timeout must be at least 1ms"),
                r.hour_cap("request read timeout"))),
    flag("enable-sleep-mode", BOOL, False, S, "Allow /sleep (also needs VLLM_SERVER_DEV_MODE=1)"),
    flag("enable-server-load-tracking", BOOL, False, S,
         "Count the generation requests in flight for GET /load (vLLM's flag); else it says 0"),
    flag("mm-encoder-only", BOOL, False, E, "Encoder-only multimodal mode (no gRPC)"),
    flag("omni", BOOL, False, C, "Omni model: responses may carry generated images"),
    flag("skip-tool-validation", BOOL, False, C, "Do not validate tool definitions"),
    flag("render-url", STRING, "", Group.DATASETS,
         "A vLLM render service that gives chat and completions prompts their token ids "
         "(default: the tokenizer in this process)", default_doc="none"),
    flag("render-timeout", DURATION, 30 * SECOND, Group.DATASETS, "Render call timeout",
         rules=r.duration_range("render timeout")),
    flag("mm-render-timeout", DURATION, 60 * SECOND, Group.DATASETS,
         "Render call timeout for multimodal input",
         rules=r.duration_range("mm render timeout")),
    flag("force-dummy-tokenizer", BOOL, False, Group.DATASETS,
         "Always use the simulated tokenizer"),
    flag("mm-processor-kwargs", STRING, "", Group.IGNORED, "Accepted, stored, no effect"),
    flag("ec-transfer-config", STRING, "", Group.IGNORED, "Accepted, stored, no effect"),
    flag("enforce-eager", BOOL, False, Group.IGNORED, "Accepted, stored, no effect"),
    flag("tensor-parallel-size", INT, 1, P,
         "GPUs the model is split over: the roofline model divides weights and KV per GPU "
         "and adds an all-reduce per layer (stored under the constant model)",
         rules=(r.between(1, 64, "tensor parallel size must be between 1 and 64"),)),
    flag("timing-model", STRING, "constant", P,
         "What times tokens: `constant` (the latency flags: llm-d-inference-sim's model), "
         "`roofline` (vLLM V1's step loop, each step timed from the model's config.json and "
         "--gpu) or `table` (the step loop timed by --timing-table)",
         rules=(r.one_of(r.TIMING_MODELS, "unknown timing-model {value}, supported models "
                         "are: constant, roofline and table"),)),
    flag("time-scale", FLOAT, 1.0, P,
         "Run simulated time this many times faster than real time: every latency and step "
         "is armed that much sooner, while timestamps, metrics and reported latencies stay "
         "in simulated time (fast tests, what-if runs)",
         rules=(r.between(0.01, 1000, "time scale must be between 0.01 and 1000"),)),
    flag("gpu", STRING, "H100", P,
         "The GPU the roofline model times: " + ", ".join(GPU_NAMES) + ", or one "
         "--gpu-spec-file defines", rules=(r.GPU_NAME,)),
    flag("gpu-spec-file", STRING, "", P,
         "JSON or YAML file of GPU figures (peaks, bandwidth, efficiencies, overheads) "
         "replacing --gpu's, or a whole GPU of its own with a `name`",
         rules=(r.GPU_SPEC_FILE,)),
    flag("timing-table", STRING, "", P,
         "Measured step times for --timing-model table: Dynamo's NPZ (prefill_isl, "
         "prefill_ttft_ms, decode_active_kv_tokens, decode_context_length, decode_itl) or a "
         "CSV with the header prefill_tokens,decode_batch,context,ms",
         rules=(r.TIMING_TABLE,)),
    vllm_flag("gpu-memory-utilization", P,
              "Share of each GPU's memory the engine may use: with the weights it sets the "
              "roofline model's KV blocks; stored under the constant model",
              rules=(r.between(0.01, 1.0, "gpu-memory-utilization must be between 0.01 and "
                               "1"),)),
    vllm_flag("num-gpu-blocks-override", P,
              "KV blocks under the roofline and table models, instead of the computed ones",
              default_doc="computed",
              rules=(r.OPTIONAL_BLOCKS,)),
    vllm_flag("dtype", P, "Weight dtype of the roofline model (auto: bfloat16)"),
    vllm_flag("kv-cache-dtype", P,
              "KV cache dtype of the roofline model (auto: the weights'; fp8 kinds: 1 byte)"),
    vllm_flag("quantization", P,
              "Weight quantization; fp8 gives the roofline model 1-byte weights and the "
              "GPU's FP8 peak (others are stored)", default_doc="none"),
    vllm_flag("max-num-batched-tokens", E,
              "Tokens one engine step may schedule (vLLM's flag, also `8k`/`8K`); stored",
              default=VLLM_MAX_NUM_BATCHED_TOKENS,
              rules=(r.at_least(1, "max-num-batched-tokens cannot be less than 1"),)),
    flag("enable-prefix-caching", BOOL, True, K,
         "Prefix caching (on by default, as in vLLM): prompts share and find their "
         "cached blocks"),
    vllm_flag("kv-transfer-config", K,
              "P/D: vLLM's KV connector settings, a JSON object; stored",
              default_doc="none"),
    vllm_flag("enable-lora", Group.LORA,
              "vLLM's LoRA switch; stored (adapters are served with or without it, as in "
              "llm-d-inference-sim)", default=False),
    vllm_flag("max-lora-rank", Group.LORA, "Largest LoRA rank, stored; vLLM's choices"),
    vllm_flag("tokenizer", Group.DATASETS, "Tokenizer name or path (vLLM's flag)",
              default="", default_doc="model"),
    vllm_flag("chat-template", Group.DATASETS,
              "Chat template, a file or the template itself (vLLM's flag)", default="",
              default_doc="the model's"),
    vllm_flag("tokenizer-revision", Group.DATASETS,
              "Revision (branch, tag or commit) of the tokenizer on the HuggingFace hub",
              default="", default_doc="--revision"),
    vllm_flag("revision", Group.DATASETS,
              "Revision of the model on the HuggingFace hub", default="", default_doc="main"),
    vllm_flag("download-dir", Group.DATASETS,
              "Where hub files are downloaded (default: the HuggingFace cache)",
              default="", default_doc="HF cache"),
    vllm_flag("chat-template-content-format", Group.DATASETS,
              "How message content reaches the template: auto detects it from the template"),
    vllm_flag("trust-request-chat-template", Group.DATASETS,
              "Render a chat with a template the request brings (vLLM refuses it by default)",
              default=False),
    vllm_flag("default-chat-template-kwargs", Group.DATASETS,
              "Template variables for every chat, a JSON object (requests override them)",
              default_doc="none"),
    vllm_flag("enable-log-requests", Group.LOGGING,
              "Log every HTTP request (vLLM's flag; the same as --log-http)", default=False),
    vllm_flag("uvicorn-log-level", Group.LOGGING, "Level of the HTTP server's own log lines"),
    Setting("v", INT, 2, Group.LOGGING,
            "Log verbosity: 1 warnings, 2 info, 4 per request, 5 trace", "verbosity", None,
            yaml=False, shorthand="v"),
    cli_only("vmodule", STRING, "", "klog per-file verbosity (pattern=N,...); ignored"),
    cli_only("logtostderr", BOOL, True, "klog; ignored (logs always go to stderr)"),
    cli_only("alsologtostderr", BOOL, False, "klog; ignored"),
    cli_only("stderrthreshold", STRING, "2", "klog; ignored"),
    cli_only("log_dir", STRING, "", "klog; ignored"),
    cli_only("log_file", STRING, "", "klog; ignored"),
    cli_only("log_file_max_size", INT, 1800, "klog (MB); ignored"),
    cli_only("one_output", BOOL, False, "klog; ignored"),
    cli_only("skip_headers", BOOL, False, "klog; ignored"),
    cli_only("skip_log_headers", BOOL, False, "klog; ignored"),
    cli_only("add_dir_header", BOOL, False, "klog; ignored"),
    cli_only("log_backtrace_at", STRING, "", "klog; ignored"),
    cli_only("alsologtostderrthreshold", STRING, "", "klog; ignored"),
    cli_only("legacy_stderr_threshold_behavior", BOOL, True, "klog; ignored"),
    Setting("ip", STRING, "", Group.ENVIRONMENT,
            "Pod IP for KV-event topics; required by --enable-kvcache", "pod_ip", "IP",
            cli=False, env=EnvVar("POD_IP", EnvRule.DEFAULT)),
    env_only("pod-name", STRING, "", "Adds x-inference-pod/x-inference-port headers",
             "PodName", EnvVar("POD_NAME", EnvRule.ONLY)),
    env_only("pod-namespace", STRING, "", "Adds the x-inference-namespace header",
             "PodNameSpace", EnvVar("POD_NAMESPACE", EnvRule.ONLY)),
    env_only("vllm-dev-mode", BOOL, False, "Exactly `1` enables dev endpoints such as /sleep",
             "VllmDevMode", EnvVar("VLLM_SERVER_DEV_MODE", EnvRule.ONLY, lambda s: s == "1")),
    env_only("http-timeout-keep-alive", DURATION, 5 * SECOND,
             "Seconds an idle keep-alive connection stays open between requests (vLLM's "
             "variable)", "HttpTimeoutKeepAlive",
             EnvVar("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", EnvRule.ONLY, _keep_alive_seconds)),
    env_only("responses-api-store", BOOL, False,
             "A non-zero integer keeps /v1/responses answers for GET /v1/responses/{id} and "
             "previous_response_id (vLLM's switch; off, `store` is ignored)",
             "VllmEnableResponsesApiStore",
             EnvVar("VLLM_ENABLE_RESPONSES_API_STORE", EnvRule.ONLY, _nonzero_integer)),
)
# fmt: on

FLAGS: dict[str, Setting] = {s.key: s for s in SETTINGS if s.cli}
YAML_KEYS: dict[str, Setting] = {s.key: s for s in SETTINGS if s.yaml}
SHORTHANDS: dict[str, Setting] = {s.shorthand: s for s in SETTINGS if s.shorthand}
ADMIN_KEYS: dict[str, Setting] = {s.key: s for s in SETTINGS if s.admin is not Admin.NO}
