"""--allowed-origins, --allowed-methods, --allowed-headers (JSON arrays, as vLLM reads them)
and --allow-credentials, on the command line and in YAML."""

from __future__ import annotations

from pathlib import Path

from tests.support.config import load, load_error, write_yaml
from vllm_sim.config import config_to_dict


def test_defaults_are_vllms() -> None:
    cfg = load("--model", "m")
    assert cfg.allowed_origins == ()  # no other site's page may call the API
    assert cfg.allowed_methods == ("*",) and cfg.allowed_headers == ("*",)
    assert cfg.allow_credentials is False


def test_each_flag_takes_one_json_array() -> None:
    cfg = load(
        "--model", "m",
        "--allowed-origins", '["https://a.example", "http://localhost:3000"]',
        "--allowed-methods=[\"GET\", \"POST\"]",
        "--allowed-headers", "[]",
        "--allow-credentials",
    )  # fmt: skip
    assert cfg.allowed_origins == ("https://a.example", "http://localhost:3000")
    assert cfg.allowed_methods == ("GET", "POST")
    assert cfg.allowed_headers == ()
    assert cfg.allow_credentials is True
    again = load("--model", "m", "--allowed-origins", '["a"]', "--allowed-origins", '["*"]')
    assert again.allowed_origins == ("*",)  # the last one, as argparse keeps it


def test_anything_but_an_array_of_strings_is_refused() -> None:
    message = load_error("--model", "m", "--allowed-origins", "https://a.example")
    assert message.startswith(
        'invalid argument "https://a.example" for "--allowed-origins" flag: '
        "expected a JSON array of strings: Expecting value"
    )
    assert load_error("--model", "m", "--allowed-methods", '"*"').endswith(
        "expected a JSON array of strings, got string"
    )
    assert load_error("--model", "m", "--allowed-headers", '["a", 1]').endswith(
        "expected a JSON array of strings, got an array holding a number"
    )
    assert "flag needs an argument" in load_error("--model", "m", "--allowed-origins")


def test_yaml_takes_a_sequence_or_the_json_text(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        "model: m\nallowed-origins: [https://a.example]\n"
        "allowed-methods: '[\"POST\"]'\nallow-credentials: true\n",
    )
    cfg = load("--config", path)
    assert cfg.allowed_origins == ("https://a.example",)
    assert cfg.allowed_methods == ("POST",) and cfg.allow_credentials
    bad = write_yaml(tmp_path, "model: m\nallowed-headers: 5\n")
    assert "cannot unmarshal !!int `5` into []string" in load_error("--config", bad)


def test_shown_by_get_admin_config() -> None:
    shown = config_to_dict(load("--model", "m", "--allowed-origins", '["https://a.example"]'))
    assert shown["allowed-origins"] == ["https://a.example"]
    assert shown["allowed-methods"] == ["*"] and shown["allow-credentials"] is False
