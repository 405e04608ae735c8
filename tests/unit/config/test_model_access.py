"""--api-key (repeatable, VLLM_API_KEY), --admin-api-key, --disable-admin, --host."""

from __future__ import annotations

from pathlib import Path

from tests.support.config import load, load_error, write_yaml
from vllm_sim.config import config_to_dict
from vllm_sim.config.help import render_help


def test_defaults_change_nothing() -> None:
    cfg = load("--model", "m")
    assert cfg.host == "0.0.0.0"
    assert cfg.api_key == () and cfg.admin_api_key == "" and not cfg.disable_admin


def test_api_key_repeats_and_lists() -> None:
    assert load("--model", "m", "--api-key", "a").api_key == ("a",)
    assert load("--model", "m", "--api-key", "a", "--api-key", "b").api_key == ("a", "b")
    assert load("--model", "m", "--api-key", "a", "b", "--port", "9").api_key == ("a", "b")
    assert load("--model", "m", "--api-key=a", "--api-key=b").api_key == ("a", "b")
    # other list flags keep the reference's rule: a later occurrence is ignored
    names = load("--model", "m", "--served-model-name", "x", "--served-model-name", "y")
    assert names.served_model_name == ("x",)


def test_api_key_needs_a_value() -> None:
    assert "flag needs an argument: --api-key" in load_error("--model", "m", "--api-key")
    assert "flag needs an argument: --api-key" in load_error("--api-key", "", "--model", "m")


def test_vllm_api_key_environment() -> None:
    assert load("--model", "m", env={"VLLM_API_KEY": "e"}).api_key == ("e",)
    assert load("--model", "m", env={"VLLM_API_KEY": ""}).api_key == ()
    flagged = load("--model", "m", "--api-key", "f", env={"VLLM_API_KEY": "e"})
    assert flagged.api_key == ("f",)


def test_keys_are_never_shown() -> None:
    cfg = load("--model", "m", "--api-key", "sk-1", "--admin-api-key", "sk-2")
    shown = config_to_dict(cfg)
    assert "sk-1" not in str(shown) and "sk-2" not in str(shown)
    assert shown["host"] == "0.0.0.0" and shown["disable-admin"] is False


def test_keys_are_not_yaml_keys(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "model: m\napi-key: [sk-1]\n")
    assert load("--config", path).api_key == ()  # unknown YAML keys are ignored


def test_help_lists_the_flags_without_values() -> None:
    text = render_help({})
    for flag in ("--api-key", "--admin-api-key", "disable-admin", "--host"):
        assert flag in text
    assert "VLLM_API_KEY" in text


def test_host_and_disable_admin() -> None:
    cfg = load("--model", "m", "--host", "127.0.0.1", "--disable-admin")
    assert cfg.host == "127.0.0.1" and cfg.disable_admin
