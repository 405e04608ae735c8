"""Fake metrics: decoding (JSON and YAML), validation, startup fill-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.config import load, load_error, write_yaml
from vllm_sim.config import FakeGenerator, FakeLora, FakeMetrics

MS = 1_000_000


def fake(obj: object) -> FakeMetrics:
    metrics = load("--model", "m", "--fake-metrics", json.dumps(obj)).fake_metrics
    assert metrics is not None
    return metrics


def fake_error(obj: object) -> str:
    return load_error("--model", "m", "--fake-metrics", json.dumps(obj))


def test_empty_object_is_fake_mode_with_nothing_set() -> None:
    assert fake({}) == FakeMetrics()


def test_full_object() -> None:
    metrics = fake({
        "running-requests": 10, "waiting-requests": 30, "kv-cache-usage": 0.4,
        "loras": [{"running": "a,b", "waiting": "c", "timestamp": 1257894567}],
        "ttft-buckets-values": [1, 2, 3], "tpot-buckets-values": [0, 0, 1, 2, 3],
        "e2erl-buckets-values": [0, 1, 2], "request-prompt-tokens": [10, 20, 30],
        "total-prompt-tokens": 12345, "request-success-total": {"stop": 20},
        "prefix-cache-hits": 750, "prefix-cache-queries": 2000, "unknown-key": True,
    })  # fmt: skip
    assert (metrics.running_requests, metrics.waiting_requests, metrics.kv_cache_usage) == (
        10.0, 30.0, 0.4,
    )  # fmt: skip
    assert metrics.loras == (FakeLora("a,b", "c", 1257894567.0),)
    assert metrics.ttft_buckets_values == (1, 2, 3)
    assert metrics.request_prompt_tokens == (10, 20, 30)
    assert metrics.total_prompt_tokens == 12345
    assert (metrics.prefix_cache_hits, metrics.prefix_cache_queries) == (750, 2000)


def test_success_total_lists_all_five_reasons_at_startup() -> None:
    assert dict(fake({"request-success-total": {"stop": 20}}).request_success_total or ()) == {
        "stop": 20, "length": 0, "tool_calls": 0, "remote_decode": 0, "cache_threshold": 0,
    }  # fmt: skip
    assert fake({}).request_success_total is None


def test_generators() -> None:
    metrics = fake({"running-requests": "oscillate:1:5:1s", "kv-cache-usage": "ramp:0:1:700ms"})
    assert metrics.running_requests == FakeGenerator("oscillate", 1.0, 5.0, 1_000 * MS)
    assert str(metrics.kv_cache_usage) == "ramp:0:1:700ms"


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"running-requests": -1}, "fake metrics request counters cannot be negative"),
        ({"waiting-requests": -0.5}, "fake metrics request counters cannot be negative"),
        ({"kv-cache-usage": 40}, "fake metrics KV cache usage must be between 0 and 1"),
        ({"running-requests": "foo:0:8:10s"},
         "invalid fake metrics generation function foo, must be one of the following: "
         "oscillate, ramp, rampreset, squarewave"),
        ({"waiting-requests": "ramp:-1:8:10s"},
         "invalid fake metrics generation parameter: start and end must not be negative"),
        ({"waiting-requests": "ramp:1:8:-10s"},
         "invalid fake metrics generation parameter: start and end must not be negative"),
        ({"running-requests": "squarewave:0:8:0s"},
         "invalid fake metrics generation parameter: period must be positive"),
        ({"kv-cache-usage": "oscillate:0:2:1s"},
         "fake metrics KV cache usage start and end must be between 0 and 1"),
        ({"ttft-buckets-values": [0] * 24}, "fake time-to-first-token array is too long"),
        ({"ttft-buckets-values": [1, -1]},
         "time-to-first-token fake metrics should contain only non-negative values"),
        ({"tpot-buckets-values": [0] * 21}, "fake time-per-output-token array is too long"),
        ({"tpot-buckets-values": [-1]},
         "time-per-output-token fake metrics should contain only non-negative values"),
        ({"request-success-total": {"stop": -2}},
         "fake metrics request-success-total.stop cannot be negative, got -2"),
        ({"request-success-total": {"abort": 1}},
         "invalid finish reason in request-success-total: abort (valid reasons: "
         "[stop length tool_calls remote_decode cache_threshold])"),
        ({"request-max-generation-tokens": [1, -1]},
         "fake metrics request-max-generation-tokens cannot contain negative values"),
        ({"e2erl-buckets-values": [-1]},
         "fake metrics e2erl-buckets-values cannot contain negative values"),
        ({"total-prompt-tokens": -1}, "fake metrics total-prompt-tokens cannot be negative"),
        ({"prefix-cache-hits": -1, "prefix-cache-queries": 1},
         "fake metrics prefix-cache-hits cannot be negative"),
        ({"prefix-cache-hits": 1, "prefix-cache-queries": -1},
         "fake metrics prefix-cache-queries cannot be negative"),
        ({"prefix-cache-hits": 1},
         "fake metrics prefix-cache-hits and prefix-cache-queries must be specified together"),
        ({"prefix-cache-hits": 3, "prefix-cache-queries": 2},
         "fake metrics prefix-cache-hits cannot exceed prefix-cache-queries"),
        # the first failure wins: checks run in a fixed order, the reference's
        ({"kv-cache-usage": 2, "running-requests": -1},
         "fake metrics request counters cannot be negative"),
        ({"tpot-buckets-values": [-1], "ttft-buckets-values": [-1]},
         "time-to-first-token fake metrics should contain only non-negative values"),
    ],
)  # fmt: skip
def test_validation_messages(obj: object, message: str) -> None:
    assert fake_error(obj) == message


def test_array_length_limits_accept_maximum() -> None:
    fake({"ttft-buckets-values": [0] * 23, "tpot-buckets-values": [0] * 20})


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("squarewave:0:8:170", 'time: missing unit in duration "170"'),
        ("ramp:0:8", "need func:start:end:period in fake metric generation function"),
        ("5", "need func:start:end:period in fake metric generation function"),
        ("ramp:x:8:1s", 'strconv.ParseFloat: parsing "x": invalid syntax'),
    ],
)
def test_generator_format_errors(value: str, detail: str) -> None:
    error = fake_error({"running-requests": value})
    assert error.endswith(f"unknown format in fake metric generation function: {detail}")
    assert error.startswith('invalid argument "')


@pytest.mark.parametrize(
    "obj",
    [{"ttft-buckets-values": "x"}, {"ttft-buckets-values": [1.5]}, {"running-requests": True},
     {"request-success-total": {"stop": "1"}}, {"loras": [1]}, {"prefix-cache-hits": 1.5}, []],
)  # fmt: skip
def test_type_mismatches(obj: object) -> None:
    assert fake_error(obj).startswith('invalid argument "')


def test_cli_replaces_yaml_fake_metrics(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        "model: m\nfake-metrics:\n  running-requests: 5\n  waiting-requests: 6\n",
    )
    from_file = load("--config", path).fake_metrics
    assert from_file is not None and from_file.waiting_requests == 6.0
    replaced = load("--config", path, "--fake-metrics", '{"running-requests": 1}').fake_metrics
    assert replaced == FakeMetrics(running_requests=1.0)


def test_yaml_form(tmp_path: Path) -> None:
    text = """\
model: m
fake-metrics:
  running-requests: "7"
  waiting-requests: oscillate:0:10:5s
  kv-cache-usage: 0.25
  loras:
    - '{"running":"l1","waiting":"","timestamp":1257894567}'
  ttft-buckets-values: [1, 2]
  request-success-total:
    stop: 3
  total-generation-tokens: 99
"""
    metrics = load("--config", write_yaml(tmp_path, text)).fake_metrics
    assert metrics is not None
    assert metrics.running_requests == 7.0  # a numeric YAML scalar is a fixed value
    assert metrics.waiting_requests == FakeGenerator("oscillate", 0.0, 10.0, 5_000 * MS)
    assert metrics.loras == (FakeLora("l1", "", 1257894567.0),)
    assert metrics.total_generation_tokens == 99
    assert dict(metrics.request_success_total or ())["length"] == 0


def test_yaml_fake_metrics_errors(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "model: m\nfake-metrics:\n  loras: [{running: a}]\n")
    assert '(key "fake-metrics")' in load_error("--config", path)
    path = write_yaml(tmp_path, "model: m\nfake-metrics: 5\n")
    assert "cannot unmarshal !!int `5`" in load_error("--config", path)
    path = write_yaml(tmp_path, "model: m\nfake-metrics:\n  kv-cache-usage: 3\n")
    assert load_error("--config", path) == "fake metrics KV cache usage must be between 0 and 1"
