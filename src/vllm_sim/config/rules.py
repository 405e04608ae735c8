"""Validation rules and fill-ins that the settings table attaches to its entries.

A rule sees the setting's value and the whole (not yet validated) Config, so cross-field rules
live next to the field the reference checks them at. Messages are the reference's, typos
included, because scripts and tests match on them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .fake_metrics_rules import fake_metrics_error
from .gpu import resolve_gpu
from .offload import offload_size_error, transfer_config_error
from .phase_rules import LATENCY_FACTOR_MESSAGE, latency_factor_error, phases_error
from .speculative import speculative_config_error
from .timing_profile import load_timing_profile

if TYPE_CHECKING:  # the table in model attaches these rules, so model imports this module
    from .model import Config

FAILURE_TYPES = (
    "rate_limit",
    "invalid_api_key",
    "context_length",
    "server_error",
    "invalid_request",
    "model_not_found",
)
MODES = ("random", "echo")
# vLLM 0.32's reasoning parsers, in its registry's order (its launch error lists them so).
REASONING_PARSERS = (
    "deepseek_r1",
    "deepseek_v3",
    "deepseek_v4",
    "deepseek_v41",
    "poolside_v1",
    "cohere_command3",
    "cohere_command4",
    "ernie45",
    "gemma4",
    "glm45",
    "glm47",
    "ling3",
    "openai_gptoss",
    "granite",
    "granite_thinking_parser",
    "hf",
    "holo2",
    "hunyuan_a13b",
    "hy_v3",
    "hy_v4",
    "kimi_k2",
    "kimi_k3",
    "k2_horizon",
    "mimo",
    "minicpmv",
    "minimax_m2",
    "minimax_m2_append_think",
    "minimax_m3",
    "mistral",
    "nemotron_v3",
    "olmo3",
    "plamo3",
    "muse_glimmer",
    "qwen3",
    "seed_oss",
    "step3",
    "step3p5",
    "inkling",
)
LATENCY_CALCULATORS = ("", "constant", "per-token")
TIMING_MODELS = ("constant", "roofline", "table")
BLOCK_SIZES = (8, 16, 32, 64, 128)

Check = Callable[[Any, "Config"], str | None]
Fill = Callable[["Config"], "Config"]


@dataclass(frozen=True, slots=True)
class Rule:
    """`check` returns the error text or None; `doc` and `message` feed help and docs."""

    doc: str
    message: str
    check: Check


def _format(message: str, value: object) -> str:
    return message.format(value=value)


def at_least(low: float, message: str) -> Rule:
    # `not v >= low` rather than `v < low`: a NaN fails too
    return Rule(f"≥ {low}", message, lambda v, _: None if v >= low else _format(message, v))


def at_most(high: float, message: str, shown: str | None = None) -> Rule:
    """An upper bound, so that absurd values cannot overflow the arithmetic they feed."""
    return Rule(
        f"≤ {shown or high}", message, lambda v, _: None if v <= high else _format(message, v)
    )


HOUR = 3_600 * 1_000_000_000  # ns
_HOUR_TEXT = "1h"


def hour_cap(what: str) -> Rule:
    return at_most(HOUR, f"{what} cannot be more than {_HOUR_TEXT}", _HOUR_TEXT)


def duration_range(what: str) -> tuple[Rule, Rule]:
    """A latency-like duration: 0 to 1h, so no sum or load factor of it overflows a clock."""
    return not_negative(f"{what} cannot be negative"), hour_cap(what)


def between(low: float, high: float, message: str) -> Rule:
    def check(value: Any, _: Config) -> str | None:
        return None if low <= value <= high else _format(message, value)

    return Rule(f"{low}–{high}", message, check)


def port_range(message: str) -> Rule:
    return between(1, 65535, message)


def one_of(choices: tuple[object, ...], message: str) -> Rule:
    shown = ", ".join(repr(c) if c == "" else str(c) for c in choices)
    return Rule(
        f"one of {shown}", message, lambda v, _: None if v in choices else _format(message, v)
    )


def not_empty(message: str) -> Rule:
    return Rule("required", message, lambda v, _: None if v else message)


def not_negative(message: str) -> Rule:
    return at_least(0, message)


def std_cap(base_attr: str, message: str) -> Rule:
    """std-dev ≤ 30% of its base; exact integer math, so exactly 30% passes."""
    base_flag = "--" + base_attr.replace("_", "-")

    def check(value: Any, cfg: Config) -> str | None:
        return message if 10 * value > 3 * getattr(cfg, base_attr) else None

    return Rule(f"≤ 30% of {base_flag}", message, check)


def not_below(other_attr: str, message: str) -> Rule:
    """A max that must not be below its min."""
    other_flag = "--" + other_attr.replace("_", "-")
    return Rule(
        f"≥ {other_flag}", message, lambda v, c: message if v < getattr(c, other_attr) else None
    )


def fill_served_names(cfg: Config) -> Config:
    return cfg if cfg.served_model_name else replace(cfg, served_model_name=(cfg.model,))


def fill_cpu_loras(cfg: Config) -> Config:
    return replace(cfg, max_cpu_loras=cfg.max_loras) if cfg.max_cpu_loras == 0 else cfg


def _lora_modules(modules: Any, cfg: Config) -> str | None:
    for module in modules:
        if not module.name:
            return "empty LoRA name"
        if module.base_model_name and module.base_model_name != cfg.model:
            return f"unknown base model '{module.base_model_name}' for LoRA '{module.name}'"
    return None


LORA_MODULES = Rule(
    "names non-empty; base_model_name empty or equal to --model",
    "empty LoRA name / unknown base model '<b>' for LoRA '<n>'",
    _lora_modules,
)

REPLAY_QUEUE = Rule(
    "≥ 1 when --kv-events-replay-endpoint is set",
    "kv-events-replay-queue-size cannot be less than 1",
    lambda v, c: (
        "kv-events-replay-queue-size cannot be less than 1"
        if c.kv_events_replay_endpoint and v < 1
        else None
    ),
)

_FAILURE_TYPES_MESSAGE = "invalid failure type '{value}', valid types are: " + ", ".join(
    FAILURE_TYPES
)
FAILURE_TYPES_RULE = Rule(
    "each one of " + ", ".join(FAILURE_TYPES) + "; empty means all",
    _FAILURE_TYPES_MESSAGE,
    lambda v, _: next(
        (_format(_FAILURE_TYPES_MESSAGE, t) for t in v if t not in FAILURE_TYPES), None
    ),
)

FAKE_METRICS_RULE = Rule(
    "values ≥ 0, KV cache usage in [0, 1], bucket arrays no longer than their buckets, known "
    "generator functions and finish reasons, prefix-cache hits ≤ queries (both or neither)",
    "e.g. fake metrics request counters cannot be negative",
    lambda v, _: None if v is None else fake_metrics_error(v),
)

LATENCY_FACTOR = Rule("> 0 and ≤ 100", LATENCY_FACTOR_MESSAGE, lambda v, _: latency_factor_error(v))

PHASES_RULE = Rule(
    "every phase but a crash lasts 0 < duration ≤ 168h; latency-factor > 0 and ≤ 100; "
    "failure-rate 0–100; known failure-types; sleep 1 or 2; exit-code 0–255; nothing after "
    "a crash, which never repeats",
    "phases[<index>].<key>: <why>",
    lambda v, _: phases_error(v, FAILURE_TYPES),
)

REFRESH_INTERVAL = Rule(
    "> 0 when fake metrics are set",
    "fake metrics refresh interval must be positive",
    lambda v, c: (
        "fake metrics refresh interval must be positive"
        if c.fake_metrics is not None and v <= 0
        else None
    ),
)


def _max_rank(cfg: Config) -> int:
    """The highest data-parallel rank this command serves (ports are offset by it)."""
    rank = cfg.data_parallel_rank
    return rank if rank >= 0 else cfg.data_parallel_size - 1


def _max_offset(cfg: Config) -> int:
    """The most a KV-event port is offset by: the highest data-parallel rank, or the
    highest fleet instance index."""
    return max(_max_rank(cfg), cfg.num_instances - 1, 0)


DATA_PARALLEL_PORTS = Rule(
    "--port + size - 1 ≤ 65535",
    "data parallel ports (port + data-parallel-size - 1) cannot exceed 65535",
    lambda v, c: (
        "data parallel ports (port + data-parallel-size - 1) cannot exceed 65535"
        if c.data_parallel_rank < 0 and c.port + v - 1 > 65535
        else None
    ),
)

FLEET_PORTS = Rule(
    "--port + num-instances - 1 ≤ 65535",
    "fleet ports (port + num-instances - 1) cannot exceed 65535",
    lambda v, c: (
        "fleet ports (port + num-instances - 1) cannot exceed 65535"
        if c.port + v - 1 > 65535
        else None
    ),
)

FLEET_ALONE = Rule(
    "not with --data-parallel-size",
    "a fleet's instances have no data-parallel ranks",
    lambda v, c: (
        "num-instances and data-parallel-size cannot both be above 1: a fleet's instances "
        "have no data-parallel ranks"
        if v > 1 and c.data_parallel_size > 1
        else None
    ),
)

FLEET_CONFIG = Rule(
    "an existing file",
    "fleet-config file not found",
    lambda v, c: f"fleet-config file {v} not found" if v and not os.path.isfile(v) else None,
)

_TCP_ENDPOINT = re.compile(r"tcp://(?P<host>\S+):(?P<port>[^:\]]*)", re.ASCII)
_NAMED_ENDPOINT = re.compile(r"(?:ipc|inproc)://\S+", re.ASCII)


def _zmq_endpoint_error(flag: str, endpoint: str, cfg: Config, bind: bool) -> str | None:
    """Why `endpoint` cannot be used (None if it can, or is empty: no endpoint)."""
    if not endpoint or _NAMED_ENDPOINT.fullmatch(endpoint):
        return None
    expected = "tcp://host:port, ipc://path or inproc://name"
    tcp = _TCP_ENDPOINT.fullmatch(endpoint)
    if tcp is None:
        return f"invalid {flag} '{endpoint}': expected {expected}"
    host, port = tcp.group("host"), tcp.group("port")
    if host.startswith("[") != host.endswith("]"):
        return f"invalid {flag} '{endpoint}': unbalanced brackets around the host"
    if not bind and host == "*":
        return f"invalid {flag} '{endpoint}': KV events are sent to a host, not to *"
    if bind and port == "*":
        return None  # any free port, chosen when bound
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        ports = "1-65535 or *" if bind else "1-65535"
        return f"invalid {flag} '{endpoint}': the port must be {ports}"
    if int(port) + _max_offset(cfg) > 65535:
        return (
            f"invalid {flag} '{endpoint}': its port offset by data-parallel rank or fleet "
            "instance exceeds 65535"
        )
    return None


ZMQ_ENDPOINT = Rule(
    "empty, tcp://host:port, ipc://path or inproc://name",
    "invalid zmq-endpoint '<e>': expected tcp://host:port, ipc://path or inproc://name",
    lambda v, c: _zmq_endpoint_error("zmq-endpoint", v, c, bind=False),
)

REPLAY_ENDPOINT = Rule(
    "empty, tcp://host:port (port may be *), ipc://path or inproc://name",
    "invalid kv-events-replay-endpoint '<e>': expected tcp://host:port, ipc://path or "
    "inproc://name",
    lambda v, c: _zmq_endpoint_error("kv-events-replay-endpoint", v, c, bind=True),
)

_ENDPOINT_PORT = re.compile(r":([+-]?[0-9]+)$")


def _endpoint_port(endpoint: str) -> int | None:
    match = _ENDPOINT_PORT.search(endpoint)
    return int(match.group(1)) if match else None


def _port_clash(zmq: Any, cfg: Config) -> str | None:
    """Rank r offsets both ports by r, so ports closer than the rank count collide."""
    replay = cfg.kv_events_replay_endpoint
    zmq_port, replay_port = _endpoint_port(zmq), _endpoint_port(replay)
    if zmq_port is None or replay_port is None:
        return None
    if abs(zmq_port - replay_port) <= cfg.data_parallel_size - 1:
        return (
            f"zmq-endpoint ({zmq}) and kv-events-replay-endpoint ({replay}) ports collide "
            "once offset by data-parallel rank"
        )
    return None


PORT_CLASH = Rule(
    "its port and the replay port must differ by ≥ --data-parallel-size",
    "zmq-endpoint (<z>) and kv-events-replay-endpoint (<r>) ports collide once offset by "
    "data-parallel rank",
    _port_clash,
)

SSL_PAIR = Rule(
    "set together with --ssl-certfile",
    "both ssl-certfile and ssl-keyfile must be provided together",
    lambda v, c: (
        "both ssl-certfile and ssl-keyfile must be provided together"
        if bool(c.ssl_certfile) != bool(v)
        else None
    ),
)

SELF_SIGNED = Rule(
    "not with --ssl-certfile/--ssl-keyfile",
    "cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile",
    lambda v, c: (
        "cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile"
        if v and (c.ssl_certfile or c.ssl_keyfile)
        else None
    ),
)

DATASET_URL = Rule(
    "needs --dataset-path",
    "dataset-path is required when dataset-url is set",
    lambda v, c: (
        "dataset-path is required when dataset-url is set" if v and not c.dataset_path else None
    ),
)

ECHO_DATASET = Rule(
    "not in echo mode",
    "dataset cannot be defined in echo mode",
    lambda v, c: "dataset cannot be defined in echo mode" if v and c.mode == "echo" else None,
)


def _gpu_error(name: Any, cfg: Config) -> str | None:
    """A GPU of the table, or the one --gpu-spec-file defines; its own error otherwise."""
    try:
        resolve_gpu(name, cfg.gpu_spec_file)
    except ValueError as error:
        return None if cfg.gpu_spec_file and "gpu-spec-file" in str(error) else str(error)
    return None


GPU_NAME = Rule("a known GPU, or the one --gpu-spec-file defines", "unknown gpu", _gpu_error)


def _gpu_spec_file_error(path: Any, cfg: Config) -> str | None:
    if not path:
        return None
    try:
        resolve_gpu(cfg.gpu, path)
    except ValueError as error:
        return str(error)
    return None


GPU_SPEC_FILE = Rule(
    "empty, or a readable JSON or YAML file of GPU figures",
    "invalid gpu-spec-file",
    _gpu_spec_file_error,
)


def _timing_table_error(path: Any, cfg: Config) -> str | None:
    if cfg.timing_model == "table" and not path:
        return "--timing-model table needs --timing-table, a CSV or NPZ file of step times"
    if path and not os.path.isfile(path):
        return f"timing-table {path} is not a file"
    return None


TIMING_TABLE = Rule(
    "required by --timing-model table; an existing file",
    "invalid timing-table",
    _timing_table_error,
)


def _timing_profile_error(path: Any, cfg: Config) -> str | None:
    if not path:
        return None
    if cfg.timing_model != "roofline":
        return (
            "--timing-profile sets the roofline model's coefficients: it needs --timing-model "
            "roofline"
        )
    try:
        load_timing_profile(path)
    except ValueError as error:
        return str(error)
    return None


TIMING_PROFILE = Rule(
    "empty, or a timing profile (YAML or JSON) under --timing-model roofline",
    "invalid timing-profile",
    _timing_profile_error,
)


OPTIONAL_PORT = Rule(
    "none, or 1-65535",
    "invalid grpc-port '{value}'",
    lambda v, _: None if v is None or 1 <= v <= 65535 else f"invalid grpc-port '{v}'",
)
OPTIONAL_KV_BYTES = Rule(
    "none, or a number of bytes (0: none, as in vLLM)",
    "kv-cache-memory-bytes cannot be negative",
    lambda v, _: None if v is None or v >= 0 else "kv-cache-memory-bytes cannot be negative",
)
OPTIONAL_BLOCKS = Rule(
    "none, or 1-100000000",
    "num-gpu-blocks-override must be between 1 and 100000000",
    lambda v, _: (
        None
        if v is None or 1 <= v <= 100_000_000
        else "num-gpu-blocks-override must be between 1 and 100000000"
    ),
)

KV_OFFLOADING_SIZE = Rule(
    "none, or more than 0 GiB",
    "cpu_bytes_to_use must be specified in kv_connector_extra_config",
    lambda v, _: offload_size_error(v),
)

KV_OFFLOADING_CONNECTOR = Rule(
    "an offloading connector in --kv-transfer-config needs kv_role and its CPU size",
    "<vLLM's reason>",
    lambda _, cfg: transfer_config_error(cfg),
)

SPECULATIVE_CONFIG = Rule(
    "none, or a JSON object: a known method (or a model to infer it from) and "
    "num_speculative_tokens from 1 to 128",
    "invalid speculative-config: <reason>",
    lambda v, _: speculative_config_error(v),
)
