"""--speculative-config and --spec-acceptance-rate: what is read from the flag, the YAML file
and /admin/config, the methods vLLM 0.32 infers, and the refusals (one line each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.config import load, load_error, write_yaml
from vllm_sim.config import Config, ConfigError, apply_admin_update, config_to_dict
from vllm_sim.config.speculative import parse_speculative_config
from vllm_sim.config.vllm_cli import BY_KEY
from vllm_sim.perf import SpecMethod, SpeculativeDecoding

NGRAM = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'


def spec(data: object) -> SpeculativeDecoding:
    return parse_speculative_config(data)


def test_the_flag_sets_the_method_and_the_drafts() -> None:
    cfg = load("m", "--speculative-config", NGRAM)
    assert cfg.speculative_config == json.loads(NGRAM)
    assert cfg.speculative == SpeculativeDecoding(SpecMethod.NGRAM, 3)
    assert cfg.spec_acceptance_rate == 0.7


def test_without_the_flag_there_is_no_speculation() -> None:
    cfg = load("m")
    assert cfg.speculative_config is None and cfg.speculative is None
    assert load("m", "--speculative-config", "null").speculative is None


def test_vllms_short_name_and_the_dotted_keys() -> None:
    cfg = load("m", "-sc", '{"method":"ngram","num_speculative_tokens":5}')
    assert cfg.speculative == SpeculativeDecoding(SpecMethod.NGRAM, 5)
    cfg = load(
        "m", "--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens",
        "2",
    )  # fmt: skip
    assert cfg.speculative == SpeculativeDecoding(SpecMethod.NGRAM, 2)


def test_other_keys_are_accepted_and_ignored() -> None:
    data = {
        "method": "eagle",
        "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 4,
        "draft_tensor_parallel_size": 1,
        "disable_by_batch_size": 30,
        "max_model_len": 2048,
        "quantization": "fp8",
    }
    assert spec(data) == SpeculativeDecoding(
        SpecMethod.EAGLE, 4, "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"
    )


@pytest.mark.parametrize(
    ("data", "method"),
    [
        ({"model": "ngram"}, SpecMethod.NGRAM),
        ({"model": "[ngram]"}, SpecMethod.NGRAM),
        ({"method": "[ngram]"}, SpecMethod.NGRAM),
        ({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}, SpecMethod.EAGLE),
        ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}, SpecMethod.EAGLE3),
        ({"model": "z-lab/Qwen3-8B-DFlash-b16"}, SpecMethod.DFLASH),
        ({"model": "FasterDecoding/medusa-vicuna-7b-v1.3"}, SpecMethod.MEDUSA),
        ({"model": "meta-llama/Llama-3.2-1B-Instruct"}, SpecMethod.DRAFT_MODEL),
        ({"model": "my_pkg.proposers.Lookup"}, SpecMethod.CUSTOM_CLASS),
        ({"method": "deepseek_mtp"}, SpecMethod.MTP),
        ({"method": "mtp"}, SpecMethod.MTP),
        ({"method": "suffix"}, SpecMethod.SUFFIX),
    ],
)
def test_the_method_as_vllm_infers_it(data: dict[str, object], method: SpecMethod) -> None:
    assert spec({"num_speculative_tokens": 2, **data}).method is method


def test_every_method_vllm_0_32_knows_is_accepted() -> None:
    """The choices of vLLM 0.32's --spec-method are its SpeculativeConfig methods."""
    choices = [c for c in BY_KEY["spec-method"].choices or () if c is not None]
    assert len(choices) > 30
    for choice in choices:
        parsed = spec({"method": choice, "model": "org/draft", "num_speculative_tokens": 2})
        assert parsed.num_speculative_tokens == 2
        assert parsed.method.value == choice or choice.endswith("_mtp")


def test_the_draft_model_is_kept_for_the_methods_that_run_one() -> None:
    assert spec({"model": "org/small", "num_speculative_tokens": 3}).draft_model == "org/small"
    assert spec({"method": "mtp", "num_speculative_tokens": 1}).draft_model is None
    assert spec({"model": "a.b.Proposer", "num_speculative_tokens": 1}).draft_model is None


def test_suffix_decoding_drafts_up_to_its_tree_depth() -> None:
    assert spec({"method": "suffix"}).num_speculative_tokens == 24
    assert (
        spec({"method": "suffix", "suffix_decoding_max_tree_depth": 8}).num_speculative_tokens == 8
    )


def test_the_ngram_window_defaults_from_either_bound() -> None:
    for data in ({"prompt_lookup_min": 2}, {"prompt_lookup_max": 9}, {}):
        assert (
            spec({"method": "ngram", "num_speculative_tokens": 3, **data}).method
            is SpecMethod.NGRAM
        )


PREFIX = "invalid speculative-config: "


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("[1]", "it must be a JSON object, such as {\"method\": \"ngram\", ...}"),
        ("3", "it must be a JSON object, such as {\"method\": \"ngram\", ...}"),
        ("{}", "it needs a method or a model"),
        ('{"method":"ngram"}', "num_speculative_tokens is required with method ngram"),
        ('{"method":"lookahead","num_speculative_tokens":3}',
         "unknown method 'lookahead'; known: ngram, ngram_gpu, suffix, eagle, eagle3, mtp, "
         "medusa, mlp_speculator, draft_model, dflash, dspark, custom_class, "
         "extract_hidden_states"),
        ('{"method":7,"num_speculative_tokens":3}', "method must be a string, not 7"),
        ('{"method":"ngram","num_speculative_tokens":0}',
         "num_speculative_tokens must be a positive integer, not 0"),
        ('{"method":"ngram","num_speculative_tokens":-2}',
         "num_speculative_tokens must be a positive integer, not -2"),
        ('{"method":"ngram","num_speculative_tokens":true}',
         "num_speculative_tokens must be a positive integer, not True"),
        ('{"method":"ngram","num_speculative_tokens":"3"}',
         "num_speculative_tokens must be a positive integer, not '3'"),
        ('{"method":"ngram","num_speculative_tokens":2.5}',
         "num_speculative_tokens must be a positive integer, not 2.5"),
        ('{"method":"ngram","num_speculative_tokens":129}',
         "num_speculative_tokens cannot be more than 128, got 129"),
        ('{"method":"eagle","num_speculative_tokens":3}',
         "num_speculative_tokens was provided but without speculative model."),
        ('{"model":"org/draft"}',
         "A speculative model was provided, but `num_speculative_tokens` was not provided "
         "(the simulator reads no draft model config)"),
        ('{"model":5,"num_speculative_tokens":3}', "model must be a string, not 5"),
        ('{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":5,'
         '"prompt_lookup_max":2}', "prompt_lookup_min=5 must be <= prompt_lookup_max=2"),
        ('{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":0}',
         "prompt_lookup_max must be at least 1, got 0"),
        ('{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":"2"}',
         "prompt_lookup_min must be an integer, not '2'"),
        ('{"method":"suffix","suffix_decoding_max_tree_depth":0}',
         "suffix_decoding_max_tree_depth must be a positive integer, not 0"),
    ],
)  # fmt: skip
def test_refusals_name_the_reason(value: str, reason: str) -> None:
    assert load_error("m", "--speculative-config", value) == PREFIX + reason


def test_text_that_is_not_json_is_refused_as_vllm_refuses_it() -> None:
    assert load_error("m", "--speculative-config", "ngram") == (
        "argument --speculative-config/-sc: Value ngram cannot be converted to <function loads>."
    )


@pytest.mark.parametrize("rate", ["1.5", "-0.1"])
def test_the_acceptance_rate_is_a_probability(rate: str) -> None:
    assert load_error("m", "--spec-acceptance-rate", rate) == (
        "spec acceptance rate must be between 0 and 1"
    )


def test_both_are_read_from_the_yaml_file(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        "model: m\n"
        "speculative-config: {method: ngram, num_speculative_tokens: 2}\n"
        "spec-acceptance-rate: 0.25\n",
    )
    cfg = load("--config", path)
    assert cfg.speculative == SpeculativeDecoding(SpecMethod.NGRAM, 2)
    assert cfg.spec_acceptance_rate == 0.25
    json_text = write_yaml(tmp_path, "model: m\nspeculative-config: '" + NGRAM + "'\n")
    assert load("--config", json_text).speculative == SpeculativeDecoding(SpecMethod.NGRAM, 3)


def test_a_bad_yaml_value_is_refused(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "model: m\nspeculative-config: {method: ngram}\n")
    assert (
        load_error("--config", path)
        == PREFIX + "num_speculative_tokens is required with method ngram"
    )


def _admin(cfg: Config, body: dict[str, object]) -> Config:
    return apply_admin_update(cfg, json.dumps(body).encode())


def test_admin_config_shows_both_and_changes_the_rate_only() -> None:
    cfg = load("m", "--speculative-config", NGRAM)
    shown = config_to_dict(cfg)
    assert shown["speculative-config"] == json.loads(NGRAM)
    assert shown["spec-acceptance-rate"] == 0.7
    assert _admin(cfg, {"spec-acceptance-rate": 0.9}).spec_acceptance_rate == 0.9
    with pytest.raises(ConfigError):
        _admin(cfg, {"spec-acceptance-rate": 2})
    with pytest.raises(ConfigError):
        _admin(cfg, {"speculative-config": {"method": "ngram", "num_speculative_tokens": 1}})
