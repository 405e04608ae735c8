"""GET /admin/config (config_to_dict) and POST /admin/config (apply_admin_update)."""

from __future__ import annotations

import json

import pytest

from tests.support.config import load
from vllm_sim.config import (
    Config,
    ConfigError,
    FakeGenerator,
    apply_admin_update,
    config_to_dict,
)

MS = 1_000_000


def update(cfg: Config, body: object) -> Config:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return apply_admin_update(cfg, payload)


def update_error(cfg: Config, body: object) -> str:
    with pytest.raises(ConfigError) as info:
        update(cfg, body)
    return str(info.value)


@pytest.fixture
def cfg() -> Config:
    return load(
        "--model", "m", "--served-model-name", "s1", "s2", "--lora-modules",
        '{"name":"l1","path":"/p"}', "--time-to-first-token", "1.5s",
        env={"POD_NAME": "pod", "POD_NAMESPACE": "ns", "POD_IP": "1.2.3.4",
             "VLLM_SERVER_DEV_MODE": "1"},
    )  # fmt: skip


# GET


def test_get_shape(cfg: Config) -> None:
    out = config_to_dict(cfg)
    assert list(out) == sorted(out)
    assert out["time-to-first-token"] == "1.5s"
    assert out["inter-token-latency"] == "0s"
    assert out["render-timeout"] == "30s" and out["mm-render-timeout"] == "1m0s"
    assert out["fake-metrics-refresh-interval"] == "100ms"
    assert out["lora-modules"] == [{"base_model_name": "", "name": "l1", "path": "/p"}]
    assert out["served-model-name"] == ["s1", "s2"]
    assert out["failure-types"] is None and out["fake-metrics"] is None
    assert (out["IP"], out["DisplayModelName"], out["PodName"], out["PodNameSpace"]) == (
        "1.2.3.4", "s1", "pod", "ns",
    )  # fmt: skip
    assert out["VllmDevMode"] is True
    assert out["port"] == 8000 and out["seed"] == cfg.seed
    assert out["time-factor-under-load"] == 1.0
    for absent in ("config", "v", "verbosity", "vmodule", "logtostderr", "ip"):
        assert absent not in out
    json.dumps(out)  # serialisable as is


def test_get_has_every_yaml_key(cfg: Config) -> None:
    from vllm_sim.config.flags import YAML_KEYS

    out = config_to_dict(cfg)
    assert {key for key in YAML_KEYS if key != "ip"} <= set(out)


def test_get_omits_port_with_data_parallel() -> None:
    assert "port" not in config_to_dict(load("--model", "m", "--data-parallel-size", "2"))


def test_get_fake_metrics() -> None:
    cfg = load("--model", "m", "--fake-metrics",
               '{"running-requests":"squarewave:10:15:400ms","kv-cache-usage":0.5,'
               '"loras":[{"running":"a","waiting":"","timestamp":1.5}],'
               '"request-success-total":{"stop":2}}')  # fmt: skip
    out = config_to_dict(cfg)["fake-metrics"]
    assert out["running-requests"] == "squarewave:10:15:400ms"
    assert out["kv-cache-usage"] == 0.5
    assert out["waiting-requests"] is None
    assert out["loras"] == [{"running": "a", "timestamp": 1.5, "waiting": ""}]
    assert out["request-success-total"]["stop"] == 2 and len(out["request-success-total"]) == 5
    assert "total-prompt-tokens" not in out and "prefix-cache-hits" not in out


# POST


def test_post_changes_only_the_given_field(cfg: Config) -> None:
    new = update(cfg, {"failure-injection-rate": 42})
    before, after = config_to_dict(cfg), config_to_dict(new)
    assert after.pop("failure-injection-rate") == 42
    before.pop("failure-injection-rate")
    assert before == after


def test_post_durations(cfg: Config) -> None:
    assert update(cfg, {"time-to-first-token": "250ms"}).time_to_first_token == 250 * MS
    assert update(cfg, {"time-to-first-token": 100}).time_to_first_token == 100
    assert update(cfg, {"inter-token-latency": "0"}).inter_token_latency == 0


def test_post_latency_fields(cfg: Config) -> None:
    new = update(cfg, {"time-factor-under-load": 1.5, "latency-calculator": "per-token",
                       "prefill-overhead": "45m30s", "image-emission-rate": 10,
                       "failure-types": ["rate_limit"]})  # fmt: skip
    assert new.time_factor_under_load == 1.5 and new.latency_calculator == "per-token"
    assert new.prefill_overhead == 2_730_000 * MS
    assert new.image_emission_rate == 10 and new.failure_types == ("rate_limit",)
    assert config_to_dict(new)["time-factor-under-load"] == 1.5


def test_post_noops(cfg: Config) -> None:
    assert update(cfg, {}) is cfg
    assert update(cfg, b"null") is cfg
    assert update(cfg, {"failure-injection-rate": None}) == cfg


def test_post_null_failure_types_clears() -> None:
    cfg = load("--model", "m", "--failure-types", "rate_limit")
    assert update(cfg, {"failure-types": None}).failure_types == ()


@pytest.mark.parametrize("key", ["port", "model", "max-num-seqs", "fake-metrics-refresh-interval"])
def test_post_non_admin_keys(cfg: Config, key: str) -> None:
    assert update_error(cfg, {key: 1}) == f"field '{key}' is not admin-configurable"


def test_post_bad_duration_names_the_key(cfg: Config) -> None:
    assert update_error(cfg, {"time-to-first-token": "x"}) == (
        'field "time-to-first-token": time: invalid duration "x"'
    )
    # duration strings are checked before key permissions, as in the reference
    assert update_error(cfg, {"startup-duration": "1d"}) == (
        'field "startup-duration": time: unknown unit "d" in duration "1d"'
    )


@pytest.mark.parametrize(
    "payload",
    [
        b"{",
        b"",
        b"[1]",
        b'"x"',
        b"\xff",
        b'{"failure-injection-rate": NaN}',
        b'{"failure-types":' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_post_malformed(cfg: Config, payload: bytes) -> None:
    assert update_error(cfg, payload).startswith("failed to unmarshal payload: ")


@pytest.mark.parametrize(
    "body",
    [{"failure-injection-rate": "42"}, {"failure-injection-rate": 4.5},
     {"failure-injection-rate": True}, {"time-factor-under-load": "2"},
     {"time-to-first-token": 1.5}, {"failure-types": "rate_limit"},
     {"latency-calculator": 1}, {"fake-metrics": {"ttft-buckets-values": "x"}}],
)  # fmt: skip
def test_post_type_mismatch(body: object) -> None:
    cfg = load("--model", "m", "--fake-metrics", "{}")
    error = update_error(cfg, body)
    assert error.startswith("failed to unmarshal payload: ")
    assert next(iter(body)) in error  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"failure-injection-rate": 101}, "failure injection rate should be between 0 and 100"),
        ({"failure-types": ["nope"]}, "invalid failure type 'nope', valid types are: rate_limit, "
         "invalid_api_key, context_length, server_error, invalid_request, model_not_found"),
        ({"image-emission-rate": -1}, "image emission rate should be between 0 and 100"),
        ({"time-to-first-token": "-1s"}, "time to first token cannot be negative"),
        ({"time-to-first-token-std-dev": "1s"}, "time to first token standard deviation cannot be "
         "more than 30% of time to first token"),
        ({"time-factor-under-load": 0.5}, "time factor under load cannot be less than 1.0"),
        ({"latency-calculator": "x"},
         "unknown latency-calculator x, supported calculators are: constant and per-token"),
        ({"failure-injection-rate": 50, "inter-token-latency-std-dev": "1ms"},
         "inter token latency standard deviation cannot be more than 30% of inter token latency"),
    ],
)  # fmt: skip
def test_post_validation(cfg: Config, body: object, message: str) -> None:
    assert update_error(cfg, body) == message
    assert cfg.failure_injection_rate == 0  # the input config is untouched (immutable)


def test_post_fake_metrics_without_startup_fake_metrics(cfg: Config) -> None:
    assert update_error(cfg, {"fake-metrics": {"running-requests": 1}}) == (
        "the simulator is reporting real metrics; fake metrics cannot be updated"
    )
    assert update_error(cfg, {"fake-metrics": {}, "failure-injection-rate": 5}) == (
        "the simulator is reporting real metrics; fake metrics cannot be updated"
    )
    assert update(cfg, {"fake-metrics": None}) == cfg


# Fake-metrics partial updates through /admin/config


@pytest.fixture
def fake_cfg() -> Config:
    return load("--model", "m", "--fake-metrics", json.dumps({
        "running-requests": 10, "waiting-requests": "ramp:0:5:1s", "ttft-buckets-values": [1, 2],
        "request-prompt-tokens": [1, 2, 3], "total-prompt-tokens": 12345,
        "request-success-total": {"stop": 1}, "prefix-cache-hits": 1, "prefix-cache-queries": 2,
    }))  # fmt: skip


def fake_of(cfg: Config) -> dict[str, object]:
    out = config_to_dict(cfg)["fake-metrics"]
    assert isinstance(out, dict)
    return out


def test_fake_absent_and_null_fields_unchanged(fake_cfg: Config) -> None:
    new = update(fake_cfg, {"fake-metrics": {"kv-cache-usage": 0.3, "running-requests": None}})
    assert fake_of(new)["running-requests"] == 10.0
    assert fake_of(new)["kv-cache-usage"] == 0.3
    assert fake_of(new)["waiting-requests"] == "ramp:0:5:1s"


def test_fake_gauges_switch_between_fixed_and_generator(fake_cfg: Config) -> None:
    new = update(fake_cfg, {"fake-metrics": {"running-requests": "oscillate:1:5:1s",
                                             "waiting-requests": 3}})  # fmt: skip
    assert new.fake_metrics is not None
    assert new.fake_metrics.running_requests == FakeGenerator("oscillate", 1.0, 5.0, 1_000 * MS)
    assert new.fake_metrics.waiting_requests == 3.0


def test_fake_arrays_replace_and_clear(fake_cfg: Config) -> None:
    new = update(fake_cfg, {"fake-metrics": {"ttft-buckets-values": [1, 2, 3],
                                             "tpot-buckets-values": []}})  # fmt: skip
    assert fake_of(new)["ttft-buckets-values"] == [1, 2, 3]
    assert fake_of(new)["tpot-buckets-values"] == []


def test_fake_token_totals(fake_cfg: Config) -> None:
    only_array = update(fake_cfg, {"fake-metrics": {"request-prompt-tokens": [10, 20]}})
    assert only_array.fake_metrics is not None
    assert only_array.fake_metrics.total_prompt_tokens is None  # derived from the array again
    only_total = update(fake_cfg, {"fake-metrics": {"total-prompt-tokens": 58}})
    assert only_total.fake_metrics is not None
    assert only_total.fake_metrics.total_prompt_tokens == 58
    assert only_total.fake_metrics.request_prompt_tokens == (1, 2, 3)
    cleared = update(fake_cfg, {"fake-metrics": {"request-prompt-tokens": []}})
    assert cleared.fake_metrics is not None
    assert cleared.fake_metrics.request_prompt_tokens == ()
    assert cleared.fake_metrics.total_prompt_tokens is None


def test_fake_success_total_replaced_without_zero_fill(fake_cfg: Config) -> None:
    new = update(fake_cfg, {"fake-metrics": {"request-success-total": {"stop": 100, "length": 50}}})
    assert fake_of(new)["request-success-total"] == {"length": 50, "stop": 100}
    removed = update(fake_cfg, {"fake-metrics": {"request-success-total": {}}})
    assert fake_of(removed)["request-success-total"] == {}


def test_fake_prefix_and_loras(fake_cfg: Config) -> None:
    new = update(fake_cfg, {"fake-metrics": {"prefix-cache-hits": 750, "prefix-cache-queries": 2000,
                                             "loras": []}})  # fmt: skip
    assert (fake_of(new)["prefix-cache-hits"], fake_of(new)["prefix-cache-queries"]) == (750, 2000)
    assert fake_of(new)["loras"] == []


def test_fake_merged_object_is_validated(fake_cfg: Config) -> None:
    assert update_error(fake_cfg, {"fake-metrics": {"prefix-cache-hits": 5}}) == (
        "fake metrics prefix-cache-hits cannot exceed prefix-cache-queries"
    )
    assert update_error(fake_cfg, {"fake-metrics": {"kv-cache-usage": 3}}) == (
        "fake metrics KV cache usage must be between 0 and 1"
    )


def test_fake_null_object_is_unchanged(fake_cfg: Config) -> None:
    assert update(fake_cfg, {"fake-metrics": None}) == fake_cfg
    assert update(fake_cfg, {"fake-metrics": {}}) == fake_cfg


def test_lone_surrogate_escape_reads_as_replacement_character(cfg: Config) -> None:
    # Go decodes `\ud800` to U+FFFD; the refusal that repeats it must encode as UTF-8.
    error = update_error(cfg, b'{"latency-calculator": "\\ud800"}')
    assert "unknown latency-calculator \ufffd," in error
    error.encode("utf-8")
