"""The --config YAML file, environment variables and precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.config import load, load_error, write_yaml
from vllm_sim.config import HelpRequested, LoraModule, load_config

MS = 1_000_000

HELM_STYLE = """\
port: 8001
model: Qwen/Qwen2-0.5B
served-model-name:
  - model1
  - model2
max-loras: 2
max-cpu-loras: 5
max-num-seqs: 1000
max-model-len: 32768
lora-modules:
  - '{"name":"lora1","path":"/path/to/lora1"}'
  - '{"name":"lora2","path":"/path/to/lora2","base_model_name":"Qwen/Qwen2-0.5B"}'
mode: echo
time-to-first-token: 500
inter-token-latency: 50
kv-cache-transfer-latency: 50
seed: 100100100
render-url: http://localhost:8082
"""


def test_defaults_match_the_spec() -> None:
    cfg = load("--model", "m")
    expected = {
        "port": 8000, "max_request_body_size_mb": 4, "mode": "random", "max_num_seqs": 256,
        "max_waiting_queue_length": 1000, "max_model_len": 32768, "max_loras": 1,
        "max_cpu_loras": 1, "lora_modules": (), "latency_calculator": "",
        "time_to_first_token": 0, "inter_token_latency": 0, "time_factor_under_load": 1.0,
        "image_emission_rate": 0, "omni": False, "mm_encoder_only": False,
        "startup_duration": 0, "enable_sleep_mode": False, "enable_request_id_headers": False,
        "log_http": False, "skip_tool_validation": False, "max_tool_call_integer_param": 100,
        "min_tool_call_integer_param": 0, "max_tool_call_number_param": 100.0,
        "min_tool_call_number_param": 0.0, "max_tool_call_array_param_length": 5,
        "min_tool_call_array_param_length": 1, "tool_call_not_required_param_probability": 50,
        "object_tool_call_not_required_field_probability": 50,
        "tool_call_extra_call_probability": 45, "enable_kvcache": False, "kv_cache_size": 32768,
        "block_size": 16, "hash_seed": "", "zmq_endpoint": "tcp://127.0.0.1:5557",
        "event_batch_size": 16, "use_vllm_map_event_format": False,
        "kv_events_replay_endpoint": "", "kv_events_replay_queue_size": 1024,
        "global_cache_hit_threshold": 0.0, "failure_injection_rate": 0, "failure_types": (),
        "data_parallel_size": 1, "data_parallel_rank": -1, "dataset_path": "",
        "dataset_url": "", "dataset_in_memory": False, "dataset_table_name": "llmd",
        # In-process tokenization unless a render service is named (the reference: :8082).
        "render_url": "", "render_timeout": 30_000 * MS,
        "mm_render_timeout": 60_000 * MS, "force_dummy_tokenizer": False,
        "default_embedding_dimensions": 384, "ssl_certfile": "", "ssl_keyfile": "",
        "self_signed_certs": False, "fake_metrics": None,
        "fake_metrics_refresh_interval": 100 * MS, "mm_processor_kwargs": "",
        "ec_transfer_config": "", "enforce_eager": False, "enable_prefix_caching": True,
        "tensor_parallel_size": 1, "verbosity": 2, "pod_name": "", "pod_namespace": "",
        "pod_ip": "", "vllm_dev_mode": False, "served_model_name": ("m",),
    }  # fmt: skip
    assert {key: getattr(cfg, key) for key in expected} == expected


def test_defaults_of_the_vllm_settings() -> None:
    cfg = load("--model", "m")
    expected = {
        "max_num_batched_tokens": 2048, "tokenizer": "", "chat_template": "",
        "enable_lora": False, "max_lora_rank": 16, "kv_transfer_config": None,
        "uvicorn_log_level": "info", "enable_log_requests": False, "host": "0.0.0.0",
    }  # fmt: skip
    assert {key: getattr(cfg, key) for key in expected} == expected


def test_seed_defaults_to_the_clock() -> None:
    first, second = load("--model", "m").seed, load("--model", "m").seed
    assert first > 1_600_000_000 * 10**9 and second >= first


def test_helm_chart_values_load(tmp_path: Path) -> None:
    cfg = load("--config", write_yaml(tmp_path, HELM_STYLE))
    assert cfg.port == 8001 and cfg.model == "Qwen/Qwen2-0.5B"
    assert cfg.served_model_name == ("model1", "model2")
    assert (cfg.max_loras, cfg.max_cpu_loras, cfg.max_num_seqs) == (2, 5, 1000)
    assert cfg.lora_modules == (
        LoraModule("lora1", "/path/to/lora1"),
        LoraModule("lora2", "/path/to/lora2", "Qwen/Qwen2-0.5B"),
    )
    # Integer durations are the documented (deprecated) milliseconds.
    assert cfg.time_to_first_token == 500 * MS
    assert cfg.inter_token_latency == 50 * MS
    assert cfg.seed == 100100100 and cfg.mode == "echo"


def test_cli_beats_yaml_beats_default(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "model: y\nport: 9000\nmax-num-seqs: 7\n")
    cfg = load("--config", path, "--port", "9100")
    assert (cfg.model, cfg.port, cfg.max_num_seqs, cfg.max_model_len) == ("y", 9100, 7, 32768)


def test_yaml_durations(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, 'model: m\ntime-to-first-token: "2000ms"\ninter-token-latency: 0\n')
    cfg = load("--config", path)
    assert cfg.time_to_first_token == 2_000 * MS and cfg.inter_token_latency == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time-to-first-token: 1.5\n", "cannot unmarshal !!float `1.5` into time.Duration"),
        ("time-to-first-token: 1d\n",
         'cannot unmarshal !!str `1d` into time.Duration: time: unknown unit "d" in duration "1d"'),
        ("port: abc\n", "cannot unmarshal !!str `abc` into int"),
        ('port: "8000"\n', "cannot unmarshal !!str `8000` into int"),
        ("port: 80.5\n", "cannot unmarshal !!float `80.5` into int"),
        ("served-model-name: a\n", "cannot unmarshal !!str `a` into []string"),
        ("enable-kvcache: maybe\n", "cannot unmarshal !!str `maybe` into bool"),
        ("hash-seed: [a]\n", "cannot unmarshal !!seq into string"),
        ("port: averyveryverylongname\n", "cannot unmarshal !!str `averyve...` into int"),
    ],
)  # fmt: skip
def test_yaml_type_mismatches(tmp_path: Path, text: str, message: str) -> None:
    error = load_error("--config", write_yaml(tmp_path, "model: m\n" + text))
    assert error.startswith("failed to unmarshal configuration: yaml: unmarshal errors: line 2: ")
    assert message in error
    assert "\n" not in error and '(key "' in error


def test_yaml_go_integer_and_float_forms(tmp_path: Path) -> None:
    text = "model: m\nmax-num-seqs: 0x10\nkv-cache-size: 0o17\ntime-factor-under-load: 2e0\n"
    cfg = load("--config", write_yaml(tmp_path, text))
    assert (cfg.max_num_seqs, cfg.kv_cache_size, cfg.time_factor_under_load) == (16, 15, 2.0)


@pytest.mark.parametrize("literal", ["yes", "on", "y", "Y", "TRUE", "True", "On"])
def test_yaml_bool_literals(tmp_path: Path, literal: str) -> None:
    cfg = load("--config", write_yaml(tmp_path, f"model: m\nenable-kvcache: {literal}\n"))
    assert cfg.enable_kvcache is True


def test_yaml_strings_keep_scalar_text(tmp_path: Path) -> None:
    cfg = load("--config", write_yaml(tmp_path, "model: 123\nhash-seed: 42\n"))
    assert (cfg.model, cfg.hash_seed) == ("123", "42")


def test_yaml_null_keeps_default(tmp_path: Path) -> None:
    cfg = load("--config", write_yaml(tmp_path, "model: m\nport:\nserved-model-name: ~\n"))
    assert cfg.port == 8000 and cfg.served_model_name == ("m",)


def test_unknown_yaml_key_ignored(tmp_path: Path) -> None:  # and warned: see test_rules_bounds
    assert load("--config", write_yaml(tmp_path, "model: m\nno-such-key: 1\n")).model == "m"


def test_empty_yaml_file(tmp_path: Path) -> None:
    assert load("--config", write_yaml(tmp_path, ""), "--model", "m").port == 8000


def test_yaml_not_a_mapping(tmp_path: Path) -> None:
    assert "cannot unmarshal !!seq" in load_error("--config", write_yaml(tmp_path, "- a\n"))


def test_yaml_syntax_error(tmp_path: Path) -> None:
    error = load_error("--config", write_yaml(tmp_path, "model: m\n  port: 1\n"))
    assert error.startswith("failed to unmarshal configuration: yaml: line 2: ")
    assert "\n" not in error


def test_yaml_duplicate_key(tmp_path: Path) -> None:
    error = load_error("--config", write_yaml(tmp_path, "model: a\nmodel: b\n"))
    assert 'mapping key "model" already defined at line 1' in error


def test_missing_config_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    assert load_error("--config", path, "--model", "m") == (
        f"failed to read configuration file: open {path}: no such file or directory"
    )


def test_config_equals_form(tmp_path: Path) -> None:
    assert load(f"--config={write_yaml(tmp_path, 'model: y')}").model == "y"


def test_config_followed_by_other_items_still_loads(tmp_path: Path) -> None:
    cfg = load("--config", write_yaml(tmp_path, "model: y\n"), "-v=5")
    assert cfg.model == "y" and cfg.verbosity == 5


def test_bad_yaml_beats_help(tmp_path: Path) -> None:
    assert load_error("--config", write_yaml(tmp_path, "port: x\n"), "--help").startswith(
        "failed to unmarshal configuration"
    )


def test_help_shows_yaml_values(tmp_path: Path) -> None:
    with pytest.raises(HelpRequested) as info:
        load_config(["--config", write_yaml(tmp_path, "max-num-seqs: 77\n"), "--help"], {})
    assert "(default 77)" in info.value.text


def test_yaml_global_cache_hit_threshold_takes_effect(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "model: m\nglobal-cache-hit-threshold: 0.5\n")
    assert load("--config", path).global_cache_hit_threshold == 0.5
    assert (
        load("--model", "m", "--global-cache-hit-threshold", "0.5").global_cache_hit_threshold
        == 0.5
    )
    assert load_error("--model", "m", "--global-cache-hit-threshold", "1.5") == (
        "global cache hit threshold must be between in range [0, 1]"
    )


def test_bare_list_flags_replace_yaml(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        'model: m\nserved-model-name: [a, b]\nlora-modules: [\'{"name":"l"}\']\n'
        "failure-types: [rate_limit]\n",
    )
    cfg = load("--config", path, "--served-model-name", "--lora-modules", "--failure-types")
    assert cfg.served_model_name == ("m",)
    assert cfg.lora_modules == ()
    assert cfg.failure_types == ()
    cfg = load("--config", path)
    assert cfg.served_model_name == ("a", "b") and cfg.failure_types == ("rate_limit",)


def test_yaml_lora_takes_vllm_name_equals_path(tmp_path: Path) -> None:
    cfg = load("--config", write_yaml(tmp_path, "model: m\nlora-modules: [l1=/p]\n"))
    assert cfg.lora_modules == (LoraModule("l1", "/p"),)


def test_yaml_lora_must_be_json_or_name_equals_path(tmp_path: Path) -> None:
    error = load_error("--config", write_yaml(tmp_path, "model: m\nlora-modules: [l1]\n"))
    assert (
        error.startswith("failed to unmarshal configuration: ") and '(key "lora-modules")' in error
    )


# Environment


def test_sim_model() -> None:
    assert load(env={"SIM_MODEL": "env"}).model == "env"
    assert load("--model", "flag", env={"SIM_MODEL": "env"}).model == "flag"
    assert load_error("--model", "", env={"SIM_MODEL": "env"}) == "model parameter is empty"
    assert load_error(env={"SIM_MODEL": ""}) == "model parameter is empty"


def test_sim_model_beats_yaml(tmp_path: Path) -> None:
    assert load("--config", write_yaml(tmp_path, "model: y\n"), env={"SIM_MODEL": "e"}).model == "e"


def test_pythonhashseed(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "model: m\nhash-seed: yaml\n")
    assert load("--config", path).hash_seed == "yaml"
    assert load("--config", path, env={"PYTHONHASHSEED": "7"}).hash_seed == "7"
    assert load("--config", path, "--hash-seed", "f", env={"PYTHONHASHSEED": "7"}).hash_seed == "f"
    assert load("--config", path, env={"PYTHONHASHSEED": ""}).hash_seed == "yaml"


def test_dev_mode_only_for_exactly_one() -> None:
    assert load("--model", "m", env={"VLLM_SERVER_DEV_MODE": "1"}).vllm_dev_mode is True
    assert load("--model", "m", env={"VLLM_SERVER_DEV_MODE": "true"}).vllm_dev_mode is False
    assert load("--model", "m").vllm_dev_mode is False


def test_pod_environment(tmp_path: Path) -> None:
    env = {"POD_NAME": "p", "POD_NAMESPACE": "ns", "POD_IP": "10.0.0.1"}
    cfg = load("--model", "m", env=env)
    assert (cfg.pod_name, cfg.pod_namespace, cfg.pod_ip) == ("p", "ns", "10.0.0.1")
    assert load("--config", write_yaml(tmp_path, "model: m\nip: 1.2.3.4\n"), env=env).pod_ip == (
        "1.2.3.4"
    )


def test_enable_kvcache_without_pod_ip_is_not_a_load_error() -> None:
    cfg = load("--model", "m", "--enable-kvcache", "true")
    assert cfg.enable_kvcache is True and cfg.pod_ip == ""


def test_text_that_is_not_utf8_is_held_as_replacement_characters(tmp_path: Path) -> None:
    # An argv byte that is not UTF-8 arrives as a surrogate escape; a YAML or environment
    # value can spell a lone surrogate. Each becomes U+FFFD, so answers naming it encode.
    assert load("--model", "m\udcff").model == "m\ufffd"
    path = write_yaml(tmp_path, 'model: "a\\ud800"\nserved-model-name: ["\\udc00x"]\n')
    cfg = load("--config", path)
    assert (cfg.model, cfg.served_model_name) == ("a\ufffd", ("\ufffdx",))
    assert load("--model", "m", env={"POD_NAME": "p\udcff"}).pod_name == "p\ufffd"


def test_http_timeouts() -> None:
    """--request-read-timeout and vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE (whole seconds)."""
    name = "VLLM_HTTP_TIMEOUT_KEEP_ALIVE"
    cfg = load("--model", "m", "--request-read-timeout", "2s", env={name: "7"})
    assert (cfg.request_read_timeout, cfg.http_timeout_keep_alive) == (2 * 10**9, 7 * 10**9)
    assert load("--model", "m").http_timeout_keep_alive == 5 * 10**9
    for bad in ("abc", "0", "1.5", "3601"):
        assert name in load_error("--model", "m", env={name: bad})
    assert "request read timeout" in load_error("--model", "m", "--request-read-timeout", "0")
