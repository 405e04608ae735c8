"""Range checks that keep the arithmetic finite: every source (flags, YAML, POST
/admin/config) meets the same rule, from the one settings table."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.support.config import load, load_error, write_yaml
from vllm_sim.config import Config, ConfigError, apply_admin_update
from vllm_sim.config.yaml_source import MAX_CONFIG_BYTES

BASE = ("--model", "m")
FACTOR_CAP = "time factor under load cannot be more than 100"


def error_for(*argv: str) -> str:
    return load_error(*BASE, *argv)


def yaml_error(tmp_path: Path, text: str) -> str:
    return load_error("--config", write_yaml(tmp_path, "model: m\n" + text))


def admin_error(payload: bytes) -> str:
    cfg = load(*BASE)
    with pytest.raises(ConfigError) as info:
        apply_admin_update(cfg, payload)
    return str(info.value)


# ----------------------------------------------------------------- time factor under load


@pytest.mark.parametrize("value", ["1e308", "100.5", "1e20"])
def test_time_factor_has_a_ceiling_on_the_command_line(value: str) -> None:
    assert error_for("--time-factor-under-load", value) == FACTOR_CAP


@pytest.mark.parametrize("value", ["1e400", "NaN", "+Inf", "-inf"])
def test_time_factor_must_be_a_finite_number_on_the_command_line(value: str) -> None:
    error = error_for("--time-factor-under-load", value)
    assert error.startswith(f'invalid argument "{value}" for "--time-factor-under-load" flag')


def test_time_factor_ceiling_is_accepted() -> None:
    assert load(*BASE, "--time-factor-under-load", "100").time_factor_under_load == 100.0


@pytest.mark.parametrize("value", ["1e308", "100.01"])
def test_time_factor_has_a_ceiling_in_yaml(tmp_path: Path, value: str) -> None:
    assert yaml_error(tmp_path, f"time-factor-under-load: {value}\n") == FACTOR_CAP


@pytest.mark.parametrize("value", ["1e400", ".nan", ".inf", "-.inf"])
def test_time_factor_must_be_finite_in_yaml(tmp_path: Path, value: str) -> None:
    error = yaml_error(tmp_path, f"time-factor-under-load: {value}\n")
    assert "cannot unmarshal" in error and "into float64" in error
    assert '(key "time-factor-under-load")' in error


def test_admin_update_with_an_infinite_factor_is_refused() -> None:
    """The probe's wedge: JSON 1e400 decodes to infinity, which was accepted."""
    assert admin_error(b'{"time-factor-under-load": 1e400}') == (
        "failed to unmarshal payload: json: cannot unmarshal number into Go struct field "
        "Configuration.time-factor-under-load of type float64"
    )
    assert admin_error(b'{"time-factor-under-load": -1e400}').startswith(
        "failed to unmarshal payload: json: cannot unmarshal number"
    )


@pytest.mark.parametrize("value", ["1e308", "101", str(10**400)])
def test_admin_update_over_the_factor_ceiling_is_refused(value: str) -> None:
    error = admin_error(f'{{"time-factor-under-load": {value}}}'.encode())
    assert error == FACTOR_CAP or "cannot unmarshal number" in error


def test_refused_admin_update_changes_nothing() -> None:
    cfg = load(*BASE)
    payload = b'{"time-to-first-token": "5ms", "time-factor-under-load": 1e308}'
    with pytest.raises(ConfigError):
        apply_admin_update(cfg, payload)
    assert cfg.time_to_first_token == 0 and cfg.time_factor_under_load == 1.0


# ----------------------------------------------------------------- durations

LATENCIES = [
    ("--inter-token-latency", "inter token latency"),
    ("--time-to-first-token", "time to first token"),
    ("--time-to-generate-image", "time to generate image"),
    ("--prefill-overhead", "prefill overhead"),
    ("--prefill-time-per-token", "prefill time per token"),
    ("--prefill-time-std-dev", "prefill time standard deviation"),
    ("--kv-cache-transfer-time-per-token", "kv-cache transfer time per token"),
    ("--kv-cache-transfer-time-std-dev", "kv-cache transfer time standard deviation"),
    ("--kv-cache-transfer-latency", "kv-cache transfer time"),
]


@pytest.mark.parametrize(("flag", "what"), LATENCIES)
def test_a_million_hours_is_refused(flag: str, what: str) -> None:
    assert error_for(flag, "1000000h") == f"{what} cannot be more than 1h"
    assert error_for(flag, "1h0m0.000000001s") == f"{what} cannot be more than 1h"
    load(*BASE, flag, "1h")


@pytest.mark.parametrize(("flag", "what"), LATENCIES)
def test_a_million_hours_is_refused_in_yaml(tmp_path: Path, flag: str, what: str) -> None:
    assert yaml_error(tmp_path, f"{flag[2:]}: 1000000h\n") == f"{what} cannot be more than 1h"


@pytest.mark.parametrize(
    ("key", "value", "what"),
    [
        ("time-to-first-token", '"1000000h"', "time to first token"),
        ("inter-token-latency", str(10**18), "inter token latency"),
        ("time-to-generate-image", '"61m"', "time to generate image"),
        ("prefill-time-per-token", str(3_600_000_000_001), "prefill time per token"),
    ],
)
def test_a_million_hours_is_refused_by_admin(key: str, value: str, what: str) -> None:
    assert admin_error(f'{{"{key}": {value}}}'.encode()) == f"{what} cannot be more than 1h"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--startup-duration", "2h"], "startup duration cannot be more than 1h"),
        (["--render-timeout", "-1s"], "render timeout cannot be negative"),
        (["--mm-render-timeout", "1000h"], "mm render timeout cannot be more than 1h"),
        (["--render-max-response-mb", "2000"],
         "render-max-response-mb must be between 0 and 1024"),
        (["--fake-metrics", "{}", "--fake-metrics-refresh-interval", "2h"],
         "fake metrics refresh interval cannot be more than 1h"),
    ],
)  # fmt: skip
def test_other_durations_are_bounded(argv: list[str], message: str) -> None:
    assert error_for(*argv) == message


# ----------------------------------------------------------------- counts and ports


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "70000"], "invalid port '70000'"),
        (["--port", "65536"], "invalid port '65536'"),
        (["--port", "65530", "--data-parallel-size", "8"],
         "data parallel ports (port + data-parallel-size - 1) cannot exceed 65535"),
        (["--max-num-seqs", "100001"], "max num seqs cannot be more than 100000"),
        (["--max-model-len", "10000001"], "max model len cannot be more than 10000000"),
        (["--max-waiting-queue-length", "10000001"],
         "max waiting queue size cannot be more than 10000000"),
        (["--max-loras", "1025"], "max LoRAs cannot be more than 1024"),
        (["--max-loras", "2", "--max-cpu-loras", "65537"],
         "max CPU LoRAs cannot be more than 65536"),
        (["--kv-cache-size", "100000001"], "KV cache size cannot be more than 100000000"),
        (["--event-batch-size", "100001"], "event batch size cannot be more than 100000"),
        (["--kv-events-replay-queue-size", "1000001"],
         "kv-events-replay-queue-size cannot be more than 1000000"),
        (["--default-embedding-dimensions", "1048577"],
         "default embedding dimensions cannot be more than 1048576"),
        (["--max-tool-call-array-param-length", "1025"],
         "MaxToolCallArrayParamLength cannot be more than 1024"),
        (["--max-tool-call-number-param", "1e300"],
         "MaxToolCallNumberParam must be between -1e15 and 1e15"),
        (["--min-tool-call-number-param", "-1e300"],
         "MinToolCallNumberParam must be between -1e15 and 1e15"),
    ],
)  # fmt: skip
def test_upper_bounds(argv: list[str], message: str) -> None:
    assert error_for(*argv) == message


@pytest.mark.parametrize(
    "argv",
    [
        ["--port", "65535"],
        ["--port", "65528", "--data-parallel-size", "8"],
        ["--port", "65535", "--data-parallel-size", "8", "--data-parallel-rank", "7"],
        ["--max-num-seqs", "100000"], ["--max-model-len", "10000000"],
        ["--max-loras", "1024"], ["--default-embedding-dimensions", "1048576"],
        ["--max-tool-call-array-param-length", "1024"],
        ["--min-tool-call-number-param", "-1e15", "--max-tool-call-number-param", "1e15"],
    ],
)  # fmt: skip
def test_upper_bounds_are_inclusive(argv: list[str]) -> None:
    load(*BASE, *argv)


def test_yaml_port_is_checked(tmp_path: Path) -> None:
    assert yaml_error(tmp_path, "port: 70000\n") == "invalid port '70000'"


# ----------------------------------------------------------------- ZMQ endpoints

ZMQ = "expected tcp://host:port, ipc://path or inproc://name"


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("nonsense", ZMQ),
        ("localhost:5557", ZMQ),
        ("http://127.0.0.1:5557", ZMQ),
        ("tcp://127.0.0.1", ZMQ),
        ("tcp://:5557", ZMQ),
        ("ipc://", ZMQ),
        ("tcp://127.0.0.1:", "the port must be 1-65535"),
        ("tcp://127.0.0.1:0", "the port must be 1-65535"),
        ("tcp://127.0.0.1:70000", "the port must be 1-65535"),
        ("tcp://127.0.0.1:*", "the port must be 1-65535"),
        ("tcp://*:5557", "KV events are sent to a host, not to *"),
        ("tcp://[::1:5557", "unbalanced brackets around the host"),
    ],
)
def test_invalid_zmq_endpoint_fails(endpoint: str, reason: str) -> None:
    assert error_for("--zmq-endpoint", endpoint) == f"invalid zmq-endpoint '{endpoint}': {reason}"


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("nonsense", ZMQ),
        ("tcp://*", ZMQ),
        ("tcp://*:99999", "the port must be 1-65535 or *"),
        ("tcp://*:x", "the port must be 1-65535 or *"),
    ],
)
def test_invalid_replay_endpoint_fails(endpoint: str, reason: str) -> None:
    assert error_for("--kv-events-replay-endpoint", endpoint) == (
        f"invalid kv-events-replay-endpoint '{endpoint}': {reason}"
    )


def test_zmq_ports_offset_by_rank_must_stay_ports() -> None:
    assert error_for("--zmq-endpoint", "tcp://h:65535", "--data-parallel-size", "2") == (
        "invalid zmq-endpoint 'tcp://h:65535': its port offset by data-parallel rank or fleet "
        "instance exceeds 65535"
    )
    load(*BASE, "--zmq-endpoint", "tcp://h:65535")


@pytest.mark.parametrize(
    "argv",
    [
        ["--zmq-endpoint", ""],
        ["--zmq-endpoint", "tcp://localhost:5557"],
        ["--zmq-endpoint", "tcp://[::1]:5557"],
        ["--zmq-endpoint", "ipc:///tmp/kv.sock"],
        ["--zmq-endpoint", "inproc://kv"],
        ["--kv-events-replay-endpoint", "tcp://*:5600"],
        ["--kv-events-replay-endpoint", "tcp://127.0.0.1:*"],
        ["--kv-events-replay-endpoint", "ipc:///tmp/replay"],
    ],
)
def test_valid_zmq_endpoints(argv: list[str]) -> None:
    load(*BASE, *argv)


def test_yaml_zmq_endpoint_is_checked(tmp_path: Path) -> None:
    assert yaml_error(tmp_path, "zmq-endpoint: bogus\n") == f"invalid zmq-endpoint 'bogus': {ZMQ}"


# ----------------------------------------------------------------- the --config file


def test_unknown_yaml_keys_warn_once_each_and_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_yaml(tmp_path, "model: m\nno-such-key: 1\nport: 9000\nalso-unknown: x\n")
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        cfg = load("--config", path)
    assert cfg.model == "m" and cfg.port == 9000
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "WARN unknown configuration key 'no-such-key' at line 2 ignored",
        "WARN unknown configuration key 'also-unknown' at line 4 ignored",
    ]


def test_known_yaml_keys_do_not_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="vllm_sim"):
        load("--config", write_yaml(tmp_path, "model: m\nport: 9000\nseed: 3\n"))
    assert not caplog.records


def test_config_larger_than_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"model: m\n" + b"#" * MAX_CONFIG_BYTES)
    assert load_error("--config", str(path)) == (
        f"failed to read configuration file: {path} is larger than 1 MiB"
    )


def test_config_at_the_cap_loads(tmp_path: Path) -> None:
    path = tmp_path / "full.yaml"
    head = b"model: m\n"
    path.write_bytes(head + b"#" * (MAX_CONFIG_BYTES - len(head)))
    assert load("--config", str(path)).model == "m"


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_config_from_a_device_is_refused(path: str) -> None:
    assert load_error("--config", path) == (
        f"failed to read configuration file: {path} is not a regular file"
    )


def test_config_directory_is_refused(tmp_path: Path) -> None:
    assert load_error("--config", str(tmp_path)) == (
        f"failed to read configuration file: {tmp_path} is not a regular file"
    )


def _round_trip(cfg: Config) -> Config:
    """Every value GET /admin/config shows passes validation when posted back."""
    from vllm_sim.config import config_to_dict
    from vllm_sim.config.flags import ADMIN_KEYS

    shown = config_to_dict(cfg)
    body = {key: shown[key] for key in ADMIN_KEYS if key in shown}
    return apply_admin_update(cfg, json.dumps(body).encode())


def test_the_largest_accepted_values_round_trip_through_admin() -> None:
    cfg = load(*BASE, "--time-to-first-token", "1h", "--time-factor-under-load", "100")
    assert _round_trip(cfg) == cfg


@pytest.mark.parametrize(
    "fake",
    [
        {"running-requests": 10**400},
        {"waiting-requests": -(10**400)},
        {"loras": [{"running": "a", "waiting": "", "timestamp": 10**400}]},
    ],
    ids=["gauge", "negative-gauge", "lora-timestamp"],
)
def test_fake_metrics_beyond_float_range_are_refused(fake: dict[str, object]) -> None:
    """An integer past float range was an OverflowError, answered 500."""
    error = admin_error(json.dumps({"fake-metrics": fake}).encode())
    assert "fake-metrics" in error or "cannot unmarshal" in error
