"""Command-line syntax: values, booleans, lists, positionals, help and unknown flags."""

from __future__ import annotations

import pytest

from tests.support.config import load, load_error
from vllm_sim.config import HelpRequested, LoraModule, load_config

MS = 1_000_000


def test_no_arguments_is_an_error() -> None:
    assert load_error() == "model parameter is empty"


def test_value_forms() -> None:
    assert load("--model", "m", "--port", "9000").port == 9000
    assert load("--model=m", "--port=9001").port == 9001
    assert load("--model", "m", "--port", "1", "--port", "2").port == 2  # last one wins


@pytest.mark.parametrize(
    ("text", "value"), [("0x10", 16), ("1_000", 1000), ("0o17", 15), ("0b11", 3)]
)
def test_go_integer_syntax(text: str, value: int) -> None:
    assert load("--model", "m", "--max-num-seqs", text).max_num_seqs == value


def test_bad_integer() -> None:
    assert load_error("--model", "m", "--port", "abc") == (
        'invalid argument "abc" for "--port" flag: strconv.ParseInt: parsing "abc": invalid syntax'
    )


def test_bad_float() -> None:
    assert load_error("--model", "m", "--time-factor-under-load", "x") == (
        'invalid argument "x" for "--time-factor-under-load" flag: '
        'strconv.ParseFloat: parsing "x": invalid syntax'
    )


@pytest.mark.parametrize("text", ["NaN", "inf", "-Infinity"])
def test_non_finite_floats_rejected(text: str) -> None:
    error = load_error("--model", "m", "--time-factor-under-load", text)
    assert error.startswith(f'invalid argument "{text}" for "--time-factor-under-load" flag: ')


def test_float_forms() -> None:
    assert load("--model", "m", "--time-factor-under-load", "2.5e0").time_factor_under_load == 2.5
    assert (
        load("--model", "m", "--global-cache-hit-threshold", ".5").global_cache_hit_threshold == 0.5
    )


def test_missing_value() -> None:
    assert load_error("--model", "m", "--port") == "flag needs an argument: --port"


def test_scalar_takes_next_item_even_with_a_dash() -> None:
    assert load_error("--model", "m", "--port", "-50") == "invalid port '-50'"


def test_unknown_flags() -> None:
    assert load_error("--model", "m", "--foo") == "unknown flag: --foo"
    assert load_error("--model", "m", "--foo=1") == "unknown flag: --foo"
    assert load_error("--model", "m", "-x") == "unknown shorthand flag: 'x' in -x"


def test_no_prefix_only_for_bools() -> None:
    assert load_error("--model", "m", "--no-port") == "unknown flag: --no-port"


def test_errors_come_in_argv_order() -> None:
    assert load_error("--model", "m", "--port", "abc", "--foo").startswith("invalid argument")
    assert load_error("--model", "m", "--foo", "--port", "abc") == "unknown flag: --foo"


# Durations on the command line


def test_cli_durations() -> None:
    cfg = load("--model", "m", "--time-to-first-token", "1.5s", "--inter-token-latency", "0")
    assert cfg.time_to_first_token == 1_500 * MS
    assert cfg.inter_token_latency == 0
    assert load("--model", "m", "--prefill-overhead=45m30s").prefill_overhead == 2_730_000 * MS


def test_cli_bare_integer_duration_is_an_error() -> None:
    assert load_error("--model", "m", "--time-to-first-token", "100") == (
        'invalid argument "100" for "--time-to-first-token" flag: '
        'time: missing unit in duration "100"'
    )


def test_cli_bad_durations() -> None:
    assert load_error("--model", "m", "--startup-duration", "x").endswith(
        'time: invalid duration "x"'
    )
    assert load_error("--model", "m", "--startup-duration", "1d").endswith(
        'time: unknown unit "d" in duration "1d"'
    )


# Booleans (with the reference's bool bugs fixed)


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["--enable-kvcache"], True),
        (["--enable-kvcache=false"], False),
        (["--enable-kvcache=true"], True),
        (["--enable-kvcache=0"], False),
        (["--enable-kvcache", "false"], False),
        (["--enable-kvcache", "true"], True),
        (["--enable-kvcache", "F"], False),
        (["--no-enable-kvcache"], False),
        (["--enable-kvcache", "--no-enable-kvcache"], False),
        (["--no-enable-kvcache", "--enable-kvcache"], True),
    ],
)
def test_plain_bool_forms(argv: list[str], value: bool) -> None:
    assert load("--model", "m", *argv).enable_kvcache is value


def test_bool_literal_is_not_a_positional_model() -> None:
    cfg = load("--enable-kvcache", "false", "--model", "m")
    assert cfg.model == "m" and cfg.enable_kvcache is False


def test_bool_flag_does_not_eat_a_non_bool() -> None:
    cfg = load("--enable-kvcache", "my-model")
    assert cfg.enable_kvcache is True and cfg.model == "my-model"


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["--enable-sleep-mode"], True),
        (["--enable-sleep-mode", "--no-enable-sleep-mode"], False),
        (["--no-enable-sleep-mode", "--enable-sleep-mode"], True),
        (["--enable-sleep-mode=false"], False),
        (["--enable-sleep-mode", "false"], False),
    ],
)
def test_toggles(argv: list[str], value: bool) -> None:
    assert load("--model", "m", *argv).enable_sleep_mode is value


def test_bad_bool_value() -> None:
    assert load_error("--model", "m", "--log-http=yes") == (
        'invalid argument "yes" for "--log-http" flag: '
        'strconv.ParseBool: parsing "yes": invalid syntax'
    )


def test_no_form_takes_no_value() -> None:
    assert "takes no value" in load_error("--model", "m", "--no-log-http=true")


# List flags: values run until the next `--` item (as the reference's pre-scan reads them),
# and later occurrences are ignored


def test_served_model_names() -> None:
    cfg = load("--model", "m", "--served-model-name", "a", "b", "--port", "1")
    assert cfg.served_model_name == ("a", "b")
    assert cfg.display_model_name == "a"
    assert cfg.port == 1


def test_served_model_name_defaults_to_model() -> None:
    cfg = load("--model", "m")
    assert cfg.served_model_name == ("m",) and cfg.display_model_name == "m"


def test_list_flag_equals_form_gives_one_value() -> None:
    assert load("--model", "m", "--served-model-name=a").served_model_name == ("a",)
    assert load("--model", "m", "--served-model-name=").served_model_name == ("",)


def test_list_skips_empty_items_and_collects_single_dash_items() -> None:
    cfg = load("--model", "m", "--served-model-name", "m1", "", "-v=5")
    assert cfg.served_model_name == ("m1", "-v=5")
    assert cfg.verbosity == 5  # klog still applies -v=5, as in the reference


def test_list_later_occurrences_are_ignored() -> None:
    cfg = load("--model", "m", "--served-model-name", "a", "--served-model-name", "b")
    assert cfg.served_model_name == ("a",)


def test_list_items_are_not_positional_models() -> None:
    assert load_error("--served-model-name", "a", "b") == "model parameter is empty"


def test_lora_modules() -> None:
    cfg = load(
        "--model", "m", "--lora-modules",
        '{"name":"l1","path":"/p","extra":1}', '{"name":"l2","base_model_name":"m"}',
    )  # fmt: skip
    assert cfg.lora_modules == (LoraModule("l1", "/p", ""), LoraModule("l2", "", "m"))


def test_lora_modules_take_vllm_name_equals_path() -> None:
    cfg = load("--model", "m", "--lora-modules", "l1=/path", '{"name":"l2"}')
    assert cfg.lora_modules == (LoraModule("l1", "/path"), LoraModule("l2"))


def test_lora_modules_must_be_json_or_name_equals_path() -> None:
    error = load_error("--model", "m", "--lora-modules", "l1")
    assert error.startswith('invalid argument "l1" for "--lora-modules" flag: ')


def test_lora_module_field_types() -> None:
    error = load_error("--model", "m", "--lora-modules", '{"name":1}')
    assert "name" in error and error.startswith("invalid argument")


def test_failure_types_list() -> None:
    cfg = load("--model", "m", "--failure-types", "rate_limit", "server_error")
    assert cfg.failure_types == ("rate_limit", "server_error")
    assert load("--model", "m", "--failure-types").failure_types == ()


def test_bare_fake_metrics_is_a_clear_error() -> None:
    assert load_error("--model", "m", "--fake-metrics") == "flag needs an argument: --fake-metrics"
    assert load_error("--model", "m", "--fake-metrics", "", "--port", "1") == (
        "flag needs an argument: --fake-metrics"
    )
    assert load_error("--model", "m", "--fake-metrics=").startswith(
        'invalid argument "" for "--fake-metrics" flag: '
    )


def test_fake_metrics_uses_first_value() -> None:
    cfg = load("--model", "m", "--fake-metrics", '{"running-requests":3}', '{"x":1}')
    assert cfg.fake_metrics is not None and cfg.fake_metrics.running_requests == 3.0


def test_fake_metrics_null_means_real_metrics() -> None:
    assert load("--model", "m", "--fake-metrics", "null").fake_metrics is None


# Positional model (vLLM compatibility)


def test_positional_model() -> None:
    assert load("my-model").model == "my-model"
    assert load("serve", "my-model", "--port", "1").model == "my-model"
    assert load("--port", "1", "serve", "my-model").model == "my-model"


def test_model_flag_beats_positional() -> None:
    assert load("positional", "--model", "flag").model == "flag"


def test_positional_model_beats_sim_model() -> None:
    assert load("pos", env={"SIM_MODEL": "env"}).model == "pos"


def test_double_dash_ends_flags() -> None:
    assert load("--", "--model").model == "--model"


# Accepted-and-ignored flags


def test_ignored_vllm_flags() -> None:
    cfg = load(
        "--model", "m", "--tensor-parallel-size", "2", "--enforce-eager",
        "--no-enable-prefix-caching", "--mm-processor-kwargs", "x", "--ec-transfer-config", "y",
    )  # fmt: skip
    assert cfg.tensor_parallel_size == 2
    assert cfg.enforce_eager is True and cfg.enable_prefix_caching is False
    assert (cfg.mm_processor_kwargs, cfg.ec_transfer_config) == ("x", "y")


def test_tensor_parallel_size_must_be_an_int() -> None:
    assert load_error("--model", "m", "--tensor-parallel-size", "two").startswith(
        'invalid argument "two" for "--tensor-parallel-size" flag:'
    )


@pytest.mark.parametrize(
    ("argv", "verbosity"),
    [([], 2), (["--v=5"], 5), (["-v", "4"], 4), (["-v=3"], 3), (["-v6"], 6), (["--v", "1"], 1)],
)
def test_klog_verbosity(argv: list[str], verbosity: int) -> None:
    assert load("--model", "m", *argv).verbosity == verbosity


def test_klog_flags_accepted() -> None:
    load(
        "--model", "m", "--logtostderr", "--alsologtostderr=false", "--log_dir", "/tmp",
        "--vmodule", "x=2", "--stderrthreshold", "INFO", "--log_file_max_size", "10",
        "--skip_headers", "--add_dir_header", "--one_output", "--log_backtrace_at", "f.go:1",
        "--legacy_stderr_threshold_behavior=false", "--no-logtostderr",
    )  # fmt: skip


def test_klog_bad_verbosity() -> None:
    assert load_error("--model", "m", "-v", "x").startswith(
        'invalid argument "x" for "-v, --v" flag'
    )
    assert load_error("--model", "m", "-v") == "flag needs an argument: 'v' in -v"


# Help


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help(flag: str) -> None:
    with pytest.raises(HelpRequested) as info:
        load_config(["--model", "m", flag, "--foo"], {})
    text = info.value.text
    assert text.startswith("Usage: vllm-sim")
    for title in (
        "Server:", "Model:", "Engine & queue:", "Latency:", "Content & tools:",
        "KV cache & events:", "LoRA:", "Failure injection & fake metrics:", "Data parallel:",
        "TLS:", "Tokenizer & datasets:", "Ignored vLLM flags:", "Logging:",
    ):  # fmt: skip
        assert f"\n{title}\n" in text
    assert "--max-num-seqs int" in text and "(default 256)" in text
    assert "--[no-]enable-kvcache" in text


def test_error_before_help_wins() -> None:
    assert load_error("--foo", "--help") == "unknown flag: --foo"
