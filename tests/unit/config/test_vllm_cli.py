"""`vllm serve` command lines of vLLM 0.32: real-world lines, vLLM's syntax, the flags that act,
the ones without effect, and vLLM's errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.config import load, load_error, write_yaml
from tests.support.vllm_lines import ServeLine, accepted_lines, rejected_lines
from vllm_sim.config import LoadedConfig, LoraModule, config_to_dict, load_startup
from vllm_sim.config.flags import FLAGS
from vllm_sim.config.vllm_cli import OPTIONS, VllmOption


def startup(*argv: str) -> LoadedConfig:
    return load_startup(list(argv), {})


# Real-world lines


@pytest.mark.parametrize("line", accepted_lines(), ids=lambda line: line.id)
def test_every_line_vllm_accepts_loads_unchanged(line: ServeLine) -> None:
    cfg = load(*line.argv)
    assert cfg.model == line.argv[1].removeprefix("--model=")


# vLLM's texts, apart from the memory address it prints in one of them.
_SAME_ERROR = [line for line in rejected_lines() if "KVTransferConfig" not in (line.rejected or "")]


@pytest.mark.parametrize("line", _SAME_ERROR, ids=lambda line: line.id)
def test_lines_vllm_rejects_are_rejected_with_its_message(line: ServeLine) -> None:
    assert line.rejected is not None
    assert load_error(*line.argv) == line.rejected.replace(" at 0x...", "")


def test_keys_inside_vllms_config_objects_are_not_checked() -> None:
    """vLLM refuses unknown keys of --kv-transfer-config (pydantic); the simulator keeps the
    JSON as given, since it has no copy of vLLM's config classes."""
    (line,) = [line for line in rejected_lines() if "KVTransferConfig" in (line.rejected or "")]
    assert load(*line.argv).kv_transfer_config == json.loads(line.argv[-1])


# Mixed lines: the Go simulator's flags and vLLM's together


def test_go_and_vllm_flags_mix() -> None:
    cfg = load(
        "serve", "m", "--time-to-first-token", "100ms", "--dtype", "auto", "-tp", "2",
        "--enable-kvcache", "false", "--max_num_seqs", "8", "--v=5", "--mode", "echo",
    )  # fmt: skip
    assert (cfg.model, cfg.time_to_first_token, cfg.tensor_parallel_size) == ("m", 10**8, 2)
    assert (cfg.enable_kvcache, cfg.max_num_seqs, cfg.verbosity, cfg.mode) == (
        False, 8, 5, "echo",
    )  # fmt: skip


def test_a_reference_list_ends_at_a_vllm_short_flag() -> None:
    cfg = load("m", "--served-model-name", "a", "b", "-tp", "2", "-v=5")
    assert cfg.served_model_name == ("a", "b") and cfg.tensor_parallel_size == 2
    reference = load("m", "--served-model-name", "a", "-v=5")  # the reference collects -v=5
    assert reference.served_model_name == ("a", "-v=5") and reference.verbosity == 5


def test_positional_model_and_the_serve_word() -> None:
    assert load("serve", "org/m").model == "org/m"
    assert load("serve", "--port", "1", "org/m").model == "org/m"
    assert load("serve", "--model=org/m").model == "org/m"


# vLLM's syntax


@pytest.mark.parametrize(
    "argv",
    [["--max_num_seqs", "4"], ["--max-num_seqs=4"], ["--max-num-seq", "4"], ["--max-num-seqs=4"]],
)
def test_underscores_and_prefixes(argv: list[str]) -> None:
    assert load("m", *argv).max_num_seqs == 4


def test_ambiguous_prefix() -> None:
    assert load_error("m", "--device", "cpu") == (
        "ambiguous option: --device could match --device-ids, --device-memory-utilization"
    )


def test_short_aliases_of_settings() -> None:
    cfg = load("m", "-tp=4", "-dp", "2", "-dpn", "1")
    assert (cfg.tensor_parallel_size, cfg.data_parallel_size, cfg.data_parallel_rank) == (4, 2, 1)


@pytest.mark.parametrize("argv", [["-O3"], ["-O=1"], ["-Odecode"], ["-O", "3"]])
def test_optimization_level_shortcut(argv: list[str]) -> None:
    assert startup("m", *argv).no_effect == ("--optimization-level",)


def test_bare_optimization_level_is_unrecognized() -> None:
    assert load_error("m", "-O", "x") == "unrecognized arguments: -O"


def test_dotted_json_keys() -> None:
    cfg = load(
        "m", "--kv-transfer-config.kv_connector", "NixlConnector",
        "--kv_transfer_config.kv_role=kv_both", "--kv-transfer-config.extra.size", "80g",
    )  # fmt: skip
    assert cfg.kv_transfer_config == {
        "kv_connector": "NixlConnector", "kv_role": "kv_both", "extra": {"size": 80 * 10**9},
    }  # fmt: skip


def test_dotted_keys_replace_an_earlier_whole_json_and_lists_append() -> None:
    cfg = load("m", "--kv-transfer-config", '{"kv_connector":"X"}', "--kv-transfer-config.a+", "1",
               "--kv-transfer-config.a+=2,3")  # fmt: skip
    assert cfg.kv_transfer_config == {"a": ["1", "2", "3"]}


def test_vllm_lists_and_optional_values() -> None:
    info = startup("m", "--ignore-patterns", "a", "b", "--hf-token", "--middleware", "x")
    assert info.no_effect == ("--ignore-patterns", "--hf-token", "--middleware")
    assert load("m", "--allowed-media-domains", "a", "b", "--port", "7").port == 7


def test_a_vllm_value_never_starts_with_a_dash() -> None:
    assert load_error("m", "--tool-call-parser", "--enable-auto-tool-choice") == (
        "argument --tool-call-parser: expected one argument"
    )
    assert load_error("m", "--tokenizer") == "argument --tokenizer: expected one argument"
    assert load("m", "--seed", "-1").seed == -1  # a negative number is a value


def test_vllm_bools() -> None:
    assert startup("m", "--trust-remote-code", "--no-trust-remote-code", "-dph").no_effect == (
        "--trust-remote-code", "--no-trust-remote-code", "--data-parallel-hybrid-lb",
    )  # fmt: skip
    # -ep acts (the roofline model's expert parallelism): vLLM's short name sets it.
    assert load("m", "-ep").enable_expert_parallel is True
    assert load_error("m", "--trust-remote-code=yes") == (
        "argument --trust-remote-code/--no-trust-remote-code: ignored explicit argument 'yes'"
    )
    assert load_error("m", "--enable-lora=yes") == (
        "argument --enable-lora/--no-enable-lora: ignored explicit argument 'yes'"
    )
    assert load("m", "--enable-lora", "false", "--enable-prefix-caching=false").enable_lora is False


# Flags that act


def test_max_model_len_takes_vllms_forms() -> None:
    assert load("m", "--max-model-len", "32k").max_model_len == 32000
    assert load("m", "--max-model-len", "32K").max_model_len == 32768
    assert load("m", "--max-model-len", "0x100").max_model_len == 256  # Go syntax still
    assert load("m", "--max-model-len", "auto").max_model_len == 32768
    assert load("m", "--max-model-len", "-1").max_model_len == 32768
    assert load_error("m", "--max-model-len", "0") == "max model len cannot be less than 1"


def test_max_model_len_bad_value_keeps_the_references_error() -> None:
    assert load_error("m", "--max-model-len", "abc") == (
        'invalid argument "abc" for "--max-model-len" flag: '
        'strconv.ParseInt: parsing "abc": invalid syntax'
    )


def test_vllm_settings_reach_the_config() -> None:
    cfg = load(
        "m", "--max-num-batched-tokens", "8K", "--no-enable-prefix-caching",
        "--tokenizer", "org/tok", "--chat-template", "{{ x }}", "--enable-lora",
        "--max-lora-rank", "64", "--uvicorn-log-level", "warning", "--enable-log-requests",
    )  # fmt: skip
    assert (cfg.max_num_batched_tokens, cfg.enable_prefix_caching) == (8192, False)
    assert (cfg.tokenizer, cfg.chat_template) == ("org/tok", "{{ x }}")
    assert (cfg.enable_lora, cfg.max_lora_rank) == (True, 64)
    assert (cfg.uvicorn_log_level, cfg.enable_log_requests) == ("warning", True)


def test_shared_flags_act() -> None:
    cfg = load(
        "m", "--host", "127.0.0.1", "--port", "9", "--served-model-name", "a", "--api-key", "k",
        "--enable-prompt-tokens-details", "--allowed-origins", '["*"]', "--disable-log-stats",
        "--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem", "--max-loras", "3",
        "--data-parallel-size", "2", "--lora-modules", "sql=org/sql",
    )  # fmt: skip
    assert (cfg.host, cfg.port, cfg.served_model_name, cfg.api_key) == (
        "127.0.0.1", 9, ("a",), ("k",),
    )  # fmt: skip
    assert cfg.enable_prompt_tokens_details and cfg.disable_log_stats
    assert (cfg.allowed_origins, cfg.ssl_certfile, cfg.ssl_keyfile) == (("*",), "c.pem", "k.pem")
    assert (cfg.max_loras, cfg.data_parallel_size) == (3, 2)
    assert cfg.lora_modules == (LoraModule("sql", "org/sql"),)


def test_new_settings_show_in_admin_config() -> None:
    shown = config_to_dict(load("m", "--kv-transfer-config", '{"kv_role":"kv_both"}'))
    assert shown["max-num-seqs"] == 256 and shown["max-model-len"] == 32768
    assert shown["enable-prefix-caching"] is True and shown["max-num-batched-tokens"] == 2048
    assert shown["kv-transfer-config"] == {"kv_role": "kv_both"}
    assert shown["uvicorn-log-level"] == "info"


# The default --max-model-len


def _model_folder(tmp_path: Path, config: object) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(tmp_path)


def test_max_model_len_from_a_local_models_config(tmp_path: Path) -> None:
    folder = _model_folder(tmp_path, {"max_position_embeddings": 40960, "seq_length": 8192})
    info = startup("serve", folder)
    assert info.config.max_model_len == 8192  # the smallest, as vLLM takes it
    assert info.startup_notes()[-1][1] == (
        f"--max-model-len 8192, the seq_length of {folder}/config.json"
    )


def test_max_model_len_from_the_text_part_of_a_multimodal_config(tmp_path: Path) -> None:
    folder = _model_folder(tmp_path, {"text_config": {"max_position_embeddings": 131072}})
    assert load(folder).max_model_len == 131072


def test_max_model_len_fallback_says_why(tmp_path: Path) -> None:
    info = startup("org/m")
    assert info.config.max_model_len == 32768
    assert "no config.json of the model 'org/m' is on this machine" in info.startup_notes()[-1][1]
    folder = _model_folder(tmp_path, {"hidden_size": 8})
    assert load(folder).max_model_len == 32768


def test_a_given_max_model_len_wins(tmp_path: Path) -> None:
    folder = _model_folder(tmp_path, {"max_position_embeddings": 4096})
    info = startup(folder, "--max-model-len", "100000")
    assert info.config.max_model_len == 100000 and info.context_length is None
    assert load(folder, "--max-model-len", "auto").max_model_len == 4096


# Flags without effect: listed once


def test_no_effect_flags_are_listed_once_in_argv_order() -> None:
    info = startup(
        "m", "--load-format", "auto", "--enforce-eager", "--trust-remote-code",
        "--load-format", "safetensors", "--api-server-count", "2", "-asc", "3",
    )  # fmt: skip
    assert info.no_effect == (
        "--load-format", "--enforce-eager", "--trust-remote-code", "--api-server-count",
    )  # fmt: skip
    warnings = [text for level, text in info.startup_notes() if "without effect" in text]
    assert warnings == [
        "Accepted without effect in a simulator: --load-format, --enforce-eager, "
        "--trust-remote-code, --api-server-count"
    ]


_SAMPLES = {
    "int": "1", "float": "0.5", "str": "x", "json": "{}", "json_or_str": "x",
    "human_int": "1k", "human_int_or_auto": "auto", "csv_list": "0,1",
}  # fmt: skip


@pytest.mark.parametrize(
    "option", [o for o in OPTIONS if o.key not in FLAGS], ids=lambda option: option.name
)
def test_every_other_vllm_flag_is_accepted_in_each_spelling(option: VllmOption) -> None:
    value = [] if option.is_bool else [_SAMPLES[option.type]]
    if option.choices is not None:
        value = [str(next(choice for choice in option.choices if choice is not None))]
    for name in option.names:
        shown = name if name.startswith("--") else option.name
        assert startup("m", name, *value).no_effect == (shown,), name


# The flags vllm-wire.md section 9 names: all parse but the two vLLM 0.32 removed.
SECTION_9 = [
    ["--host", "0.0.0.0"], ["--gpu-memory-utilization", "0.9"], ["--dtype", "auto"],
    ["--trust-remote-code"], ["--api-key", "k"], ["--enable-auto-tool-choice"],
    ["--tool-call-parser", "hermes"], ["--max-num-batched-tokens", "8192"],
    ["--chat-template", "t.jinja"], ["--tokenizer", "org/t"], ["--uvicorn-log-level", "debug"],
    ["--kv-cache-dtype", "fp8"], ["--enable-chunked-prefill"], ["--pipeline-parallel-size", "2"],
    ["--generation-config", "vllm"], ["--max-log-len", "100"],
]  # fmt: skip


def test_the_flags_the_wire_spec_names_parse() -> None:
    load("m", *(item for flag in SECTION_9 for item in flag))
    for removed in ("--disable-log-requests", "--swap-space"):
        assert load_error("m", removed, "4").startswith("unrecognized arguments: " + removed)


def test_acting_flags_are_not_listed() -> None:
    info = startup("m", "--host", "::", "--max-num-seqs", "4", "--no-enable-prefix-caching")
    assert info.no_effect == ()


# Bad values: vLLM's words for vLLM's flags


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--api-server-count", "x"], "argument --api-server-count/-asc: invalid int value: 'x'"),
        (["--dtype", "bf16"], "argument --dtype: invalid choice: 'bf16' (choose from 'auto', "
         "'bfloat16', 'float', 'float16', 'float32', 'half')"),
        (["--max-lora-rank", "24"], "argument --max-lora-rank: invalid choice: 24 (choose from "
         "1, 8, 16, 32, 64, 128, 256, 320, 512)"),
        (["--uvicorn-log-level", "DEBUG"], "argument --uvicorn-log-level: invalid choice: "
         "'DEBUG' (choose from 'critical', 'debug', 'error', 'info', 'trace', 'warning')"),
        (["--speculative-config", "ngram"],
         "argument --speculative-config/-sc: Value ngram cannot be converted to <function loads>."),
        (["--kv-transfer-config", "[1]"], "argument --kv-transfer-config: Input should be a JSON "
         "object"),
        (["--max-num-batched-tokens", "1.5K"], "argument --max-num-batched-tokens: Decimals are "
         "not allowed with binary suffixes like K. Did you mean to use 1.5k instead?"),
        (["--max-num-batched-tokens", "x"],
         "argument --max-num-batched-tokens: invalid human_readable_int value: 'x'"),
        (["--gpu-memory-utilization", "high"],
         "argument --gpu-memory-utilization/--device-memory-utilization: invalid float value: "
         "'high'"),
        (["--api-key", "--port", "1"], "flag needs an argument: --api-key"),
        (["--port", "x"],
         'invalid argument "x" for "--port" flag: strconv.ParseInt: parsing "x": invalid syntax'),
    ],
)  # fmt: skip
def test_bad_values(argv: list[str], error: str) -> None:
    assert load_error("m", *argv) == error


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--disable-log-requests"], "unrecognized arguments: --disable-log-requests"),
        (["--swap-space", "4", "--enable-reasoning"],
         "unrecognized arguments: --swap-space 4 --enable-reasoning"),
        (["--task", "embed"], "unrecognized arguments: --task embed Hint: --task is not a vllm "
         "serve option. For embedding, reranking, or reward models, use --runner pooling. To "
         "adapt a generative model for pooling, also use --convert embed, --convert classify, "
         "or --convert reward."),
        (["--Port", "1"], "unknown flag: --Port"),  # the reference's words for other names
    ],
)  # fmt: skip
def test_flags_vllm_removed_are_refused_in_its_words(argv: list[str], error: str) -> None:
    assert load_error("m", *argv) == error


def test_a_bad_value_beats_an_unrecognized_flag() -> None:
    assert load_error("m", "--disable-log-requests", "--dtype", "x").startswith(
        "argument --dtype: invalid choice: 'x'"
    )


# A `vllm serve --config` file


def test_vllm_config_file(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        "model: org/m\nmax_num_seqs: 4\nload_format: auto\ntrust-remote-code: true\n"
        "tensor_parallel_size: 2\nkv-transfer-config: {kv_role: kv_both}\ndtype: half\n",
    )
    info = startup("--config", path)
    assert (info.config.model, info.config.max_num_seqs, info.config.tensor_parallel_size) == (
        "org/m", 4, 2,
    )  # fmt: skip
    assert info.config.kv_transfer_config == {"kv_role": "kv_both"}
    assert info.config.dtype == "half"
    assert info.no_effect == ("--load-format", "--trust-remote-code")


def test_vllm_config_file_bad_value(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "model: m\nfingerprint-mode: nope\n")
    assert load_error("--config", path).startswith(
        "argument --fingerprint-mode: invalid choice: 'nope' (choose from "
    )
