"""Validation rules: texts, boundaries, cross-field rules, and the reference's order."""

from __future__ import annotations

import pytest

from tests.support.config import load, load_error

BASE = ("--model", "m")


def error_for(*argv: str) -> str:
    return load_error(*BASE, *argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "-50"], "invalid port '-50'"),
        (["--port", "0"], "invalid port '0'"),
        (["--mode", "hello"], "invalid mode 'hello', valid values are 'random' and 'echo'"),
        (["--max-model-len", "0"], "max model len cannot be less than 1"),
        (["--max-num-seqs", "0"], "max num seqs cannot be less than 1"),
        (["--max-waiting-queue-length", "-1"], "max waiting queue size cannot be less than 0"),
        (["--max-loras", "0"], "max LoRAs cannot be less than 1"),
        (["--block-size", "35"],
         "token block size should be one of the following: 8, 16, 32, 64, 128"),
        (["--kv-cache-size", "-1"], "KV cache size cannot be negative"),
        (["--event-batch-size", "0"], "event batch size cannot less than 1"),
        (["--image-emission-rate", "101"], "image emission rate should be between 0 and 100"),
        (["--image-emission-rate", "-1"], "image emission rate should be between 0 and 100"),
        (["--default-embedding-dimensions", "0"],
         "default embedding dimensions must be at least 1"),
        (["--time-factor-under-load", "0"], "time factor under load cannot be less than 1.0"),
        (["--time-factor-under-load", "0.99"], "time factor under load cannot be less than 1.0"),
        (["--failure-injection-rate", "150"], "failure injection rate should be between 0 and 100"),
        (["--grpc-port", "0"], "invalid grpc-port '0'"),
        (["--grpc-port", "70000"], "invalid grpc-port '70000'"),
        (["--data-parallel-size", "15"], "data parallel size must be between 1 and 8"),
        (["--data-parallel-size", "0"], "data parallel size must be between 1 and 8"),
        (["--data-parallel-rank", "15"], "data parallel rank must be between 0 and 7"),
        (["--latency-calculator", "hello"],
         "unknown latency-calculator hello, supported calculators are: constant and per-token"),
        (["--global-cache-hit-threshold", "-0.1"],
         "global cache hit threshold must be between in range [0, 1]"),
        (["--max-request-body-size-mb", "513"],
         "max-request-body-size-mb must be between 1 MB and 512 MB, got 513"),
        (["--max-request-body-size-mb", "0"],
         "max-request-body-size-mb must be between 1 MB and 512 MB, got 0"),
    ],
)  # fmt: skip
def test_single_field_rules(argv: list[str], message: str) -> None:
    assert error_for(*argv) == message


@pytest.mark.parametrize(
    "argv",
    [
        ["--port", "1"], ["--port", "65535"], ["--mode", "echo"],
        ["--max-waiting-queue-length", "0"],
        ["--kv-cache-size", "0"], ["--block-size", "128"], ["--image-emission-rate", "100"],
        ["--failure-injection-rate", "0"], ["--data-parallel-size", "8"],
        ["--data-parallel-rank", "7"], ["--data-parallel-rank", "-3"],
        ["--latency-calculator", "constant"], ["--latency-calculator", "per-token"],
        ["--latency-calculator", ""], ["--global-cache-hit-threshold", "1"],
        ["--max-request-body-size-mb", "1"], ["--max-request-body-size-mb", "512"],
        ["--time-factor-under-load", "1"],
    ],
)  # fmt: skip
def test_boundaries_accepted(argv: list[str]) -> None:
    load(*BASE, *argv)


def test_cpu_loras() -> None:
    assert error_for("--max-loras", "15", "--max-cpu-loras", "5") == (
        "max CPU LoRAs cannot be less than max LoRAs"
    )
    assert load(*BASE, "--max-loras", "3").max_cpu_loras == 3
    assert load(*BASE, "--max-loras", "3", "--max-cpu-loras", "0").max_cpu_loras == 3
    assert load(*BASE, "--max-loras", "3", "--max-cpu-loras", "4").max_cpu_loras == 4


def test_lora_rules() -> None:
    assert error_for("--lora-modules", '{"path":"/p"}') == "empty LoRA name"
    assert error_for("--lora-modules", '{"name":"l","base_model_name":"other"}') == (
        "unknown base model 'other' for LoRA 'l'"
    )
    # The base model must be --model itself, not a served name.
    assert (
        error_for(
            "--served-model-name", "s", "--lora-modules", '{"name":"l","base_model_name":"s"}'
        )
        == "unknown base model 's' for LoRA 'l'"
    )
    load(*BASE, "--lora-modules", '{"name":"l","base_model_name":"m"}')


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--time-to-first-token", "2s", "--time-to-first-token-std-dev", "3s"],
         "time to first token standard deviation cannot be more than 30% of time to first token"),
        (["--inter-token-latency", "1000ms", "--inter-token-latency-std-dev", "301ms"],
         "inter token latency standard deviation cannot be more than 30% of inter token latency"),
        (["--kv-cache-transfer-latency", "70ms", "--kv-cache-transfer-latency-std-dev", "35ms"],
         "kv-cache transfer standard deviation cannot be more than 30% of kv-cache transfer"),
        (["--time-to-generate-image", "500ms", "--time-to-generate-image-std-dev", "200ms"],
         "time to generate image standard deviation cannot be more than 30% of time to "
         "generate image"),
        (["--time-to-first-token-std-dev", "1ns"],
         "time to first token standard deviation cannot be more than 30% of time to first token"),
    ],
)  # fmt: skip
def test_thirty_percent_rules(argv: list[str], message: str) -> None:
    assert error_for(*argv) == message


def test_thirty_percent_exactly_passes() -> None:
    load(*BASE, "--inter-token-latency", "1000ms", "--inter-token-latency-std-dev", "300ms")
    load(*BASE, "--time-to-first-token", "10ns", "--time-to-first-token-std-dev", "3ns")


def test_uncapped_std_devs() -> None:
    load(*BASE, "--prefill-overhead", "10ms", "--prefill-time-std-dev", "50ms")
    load(
        *BASE,
        "--kv-cache-transfer-time-per-token",
        "1ms",
        "--kv-cache-transfer-time-std-dev",
        "9ms",
    )


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--time-to-first-token", "time to first token cannot be negative"),
        ("--time-to-first-token-std-dev",
         "time to first token standard deviation cannot be negative"),
        ("--inter-token-latency", "inter token latency cannot be negative"),
        ("--inter-token-latency-std-dev",
         "inter token latency standard deviation cannot be negative"),
        ("--kv-cache-transfer-latency", "kv-cache transfer time cannot be negative"),
        ("--kv-cache-transfer-latency-std-dev",
         "kv-cache transfer time standard deviation cannot be negative"),
        ("--prefill-overhead", "prefill overhead cannot be negative"),
        ("--prefill-time-per-token", "prefill time per token cannot be negative"),
        ("--prefill-time-std-dev", "prefill time standard deviation cannot be negative"),
        ("--kv-cache-transfer-time-per-token",
         "kv-cache transfer time per token cannot be negative"),
        ("--kv-cache-transfer-time-std-dev",
         "kv-cache transfer time standard deviation cannot be negative"),
        ("--time-to-generate-image", "time to generate image cannot be negative"),
        ("--time-to-generate-image-std-dev",
         "time to generate image standard deviation cannot be negative"),
    ],
)  # fmt: skip
def test_negative_durations(flag: str, message: str) -> None:
    assert error_for(flag, "-1ms") == message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--min-tool-call-integer-param", "10", "--max-tool-call-integer-param", "5"],
         "MaxToolCallIntegerParam cannot be less than MinToolCallIntegerParam"),
        (["--min-tool-call-number-param", "10.5", "--max-tool-call-number-param", "10.25"],
         "MaxToolCallNumberParam cannot be less than MinToolCallNumberParam"),
        (["--min-tool-call-array-param-length", "6"],
         "MaxToolCallArrayParamLength cannot be less than MinToolCallArrayParamLength"),
        (["--min-tool-call-array-param-length", "-1"],
         "MinToolCallArrayParamLength cannot be negative"),
        (["--tool-call-not-required-param-probability", "101"],
         "ToolCallNotRequiredParamProbability should be between 0 and 100"),
        (["--object-tool-call-not-required-field-probability", "-1"],
         "ObjectToolCallNotRequiredParamProbability should be between 0 and 100"),
        (["--tool-call-extra-call-probability", "200"],
         "ToolCallExtraCallProbability should be between 0 and 100"),
    ],
)  # fmt: skip
def test_tool_rules(argv: list[str], message: str) -> None:
    assert error_for(*argv) == message


def test_replay_queue_size() -> None:
    assert (
        error_for(
            "--kv-events-replay-endpoint", "tcp://*:5600", "--kv-events-replay-queue-size", "0"
        )
        == "kv-events-replay-queue-size cannot be less than 1"
    )
    load(*BASE, "--kv-events-replay-queue-size", "0")


def test_port_clash() -> None:
    clash = (
        "zmq-endpoint (tcp://127.0.0.1:5557) and kv-events-replay-endpoint ({r}) ports collide "
        "once offset by data-parallel rank"
    )
    assert error_for("--kv-events-replay-endpoint", "tcp://*:5557") == clash.format(
        r="tcp://*:5557"
    )
    assert error_for(
        "--kv-events-replay-endpoint", "tcp://*:5558", "--data-parallel-size", "3"
    ) == clash.format(r="tcp://*:5558")
    assert error_for(
        "--kv-events-replay-endpoint", "tcp://*:5559", "--data-parallel-size", "3",
        "--data-parallel-rank", "1",
    ) == clash.format(r="tcp://*:5559")  # fmt: skip
    load(*BASE, "--kv-events-replay-endpoint", "tcp://*:5600", "--data-parallel-size", "3")
    load(*BASE, "--kv-events-replay-endpoint", "tcp://*:5558")
    load(*BASE, "--kv-events-replay-endpoint", "ipc:///tmp/x", "--zmq-endpoint", "ipc:///tmp/x")


def test_failure_types() -> None:
    assert error_for("--failure-types", "rate_limit", "invalid_type") == (
        "invalid failure type 'invalid_type', valid types are: rate_limit, invalid_api_key, "
        "context_length, server_error, invalid_request, model_not_found"
    )
    all_types = ("rate_limit", "invalid_api_key", "context_length", "server_error",
                 "invalid_request", "model_not_found")  # fmt: skip
    assert load(*BASE, "--failure-types", *all_types).failure_types == all_types


def test_tls_rules() -> None:
    pair = "both ssl-certfile and ssl-keyfile must be provided together"
    assert error_for("--ssl-certfile", "c.pem") == pair
    assert error_for("--ssl-keyfile", "k.pem") == pair
    assert error_for("--self-signed-certs", "--ssl-certfile", "c", "--ssl-keyfile", "k") == (
        "cannot use both self-signed-certs and explicit ssl-certfile/ssl-keyfile"
    )
    assert error_for("--self-signed-certs", "--ssl-certfile", "c") == pair
    load(*BASE, "--ssl-certfile", "c", "--ssl-keyfile", "k")
    load(*BASE, "--self-signed-certs")


def test_dataset_rules() -> None:
    assert error_for("--dataset-url", "https://x/d.sqlite3") == (
        "dataset-path is required when dataset-url is set"
    )
    assert error_for("--mode", "echo", "--dataset-path", "d.sqlite3") == (
        "dataset cannot be defined in echo mode"
    )
    load(*BASE, "--dataset-url", "https://x/d", "--dataset-path", "d.sqlite3")


def test_refresh_interval_needs_fake_metrics() -> None:
    assert error_for("--fake-metrics", "{}", "--fake-metrics-refresh-interval", "-20s") == (
        "fake metrics refresh interval must be positive"
    )
    assert error_for("--fake-metrics", "{}", "--fake-metrics-refresh-interval", "0") == (
        "fake metrics refresh interval must be positive"
    )
    load(*BASE, "--fake-metrics-refresh-interval", "-20s")


def test_startup_duration_not_validated() -> None:
    assert load(*BASE, "--startup-duration", "-5s").startup_duration == -5_000_000_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # model before mode before port before latencies
        (["--model", "", "--mode", "x"], "model parameter is empty"),
        (["--mode", "x", "--port", "0"], "invalid mode 'x', valid values are 'random' and 'echo'"),
        (["--port", "0", "--inter-token-latency", "-1s"], "invalid port '0'"),
        # ITL before TTFT before image before prefill before kv per-token before kv latency
        (["--time-to-first-token", "-1s", "--inter-token-latency", "-1s"],
         "inter token latency cannot be negative"),
        (["--time-to-generate-image", "-1s", "--time-to-first-token", "-1s"],
         "time to first token cannot be negative"),
        (["--prefill-overhead", "-1s", "--time-to-generate-image", "-1s"],
         "time to generate image cannot be negative"),
        (["--kv-cache-transfer-time-per-token", "-1s", "--prefill-time-std-dev", "-1s"],
         "prefill time standard deviation cannot be negative"),
        (["--kv-cache-transfer-latency", "-1s", "--kv-cache-transfer-time-std-dev", "-1s"],
         "kv-cache transfer time standard deviation cannot be negative"),
        (["--time-factor-under-load", "0", "--kv-cache-transfer-latency", "-1s"],
         "kv-cache transfer time cannot be negative"),
        (["--max-loras", "0", "--time-factor-under-load", "0"],
         "time factor under load cannot be less than 1.0"),
        (["--max-model-len", "0", "--max-loras", "0"], "max LoRAs cannot be less than 1"),
        (["--max-num-seqs", "0", "--max-model-len", "0"], "max model len cannot be less than 1"),
        (["--max-waiting-queue-length", "-1", "--max-num-seqs", "0"],
         "max num seqs cannot be less than 1"),
        (["--lora-modules", "{}", "--max-waiting-queue-length", "-1"],
         "max waiting queue size cannot be less than 0"),
        (["--tool-call-extra-call-probability", "101", "--lora-modules", "{}"], "empty LoRA name"),
        (["--block-size", "3", "--tool-call-extra-call-probability", "101"],
         "ToolCallExtraCallProbability should be between 0 and 100"),
        (["--kv-cache-size", "-1", "--block-size", "3"],
         "token block size should be one of the following: 8, 16, 32, 64, 128"),
        (["--failure-injection-rate", "101", "--image-emission-rate", "101"],
         "failure injection rate should be between 0 and 100"),
        (["--failure-types", "x", "--image-emission-rate", "101"],
         "image emission rate should be between 0 and 100"),
        (["--fake-metrics", '{"running-requests":-1}', "--failure-types", "x"],
         "invalid failure type 'x', valid types are: rate_limit, invalid_api_key, "
         "context_length, server_error, invalid_request, model_not_found"),
        (["--data-parallel-size", "9", "--fake-metrics", '{"running-requests":-1}'],
         "fake metrics request counters cannot be negative"),
        (["--data-parallel-rank", "9", "--data-parallel-size", "9"],
         "data parallel size must be between 1 and 8"),
        (["--ssl-certfile", "c", "--data-parallel-rank", "9"],
         "data parallel rank must be between 0 and 7"),
        (["--dataset-url", "u", "--ssl-certfile", "c"],
         "both ssl-certfile and ssl-keyfile must be provided together"),
        (["--latency-calculator", "x", "--dataset-url", "u"],
         "dataset-path is required when dataset-url is set"),
        (["--global-cache-hit-threshold", "2", "--latency-calculator", "x"],
         "unknown latency-calculator x, supported calculators are: constant and per-token"),
        (["--default-embedding-dimensions", "0", "--global-cache-hit-threshold", "2"],
         "global cache hit threshold must be between in range [0, 1]"),
        (["--max-request-body-size-mb", "0", "--default-embedding-dimensions", "0"],
         "default embedding dimensions must be at least 1"),
    ],
)  # fmt: skip
def test_validation_order(argv: list[str], message: str) -> None:
    assert error_for(*argv) == message
