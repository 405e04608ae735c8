"""The settings table drives everything: it must match Config, docs/flags.md and the key
lists the reference accepts (its admin keys, its CLI-only and YAML-only keys)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from vllm_sim.config import Config
from vllm_sim.config.flags import ADMIN_KEYS, FLAGS, SETTINGS, YAML_KEYS, Admin
from vllm_sim.config.reference import render_reference

DOCS = Path(__file__).resolve().parents[3] / "docs" / "flags.md"


def test_table_attrs_are_exactly_the_config_fields() -> None:
    attrs = [s.attr for s in SETTINGS if s.attr is not None]
    assert len(attrs) == len(set(attrs))
    assert set(attrs) == {f.name for f in fields(Config)}


def test_keys_are_unique_and_named_like_attrs() -> None:
    assert len({s.key for s in SETTINGS}) == len(SETTINGS)
    for setting in SETTINGS:
        if setting.cli and setting.yaml:
            assert setting.attr == setting.key.replace("-", "_")
            assert setting.json_key == setting.key


def test_the_admin_keys_are_the_references_and_the_simulators_own() -> None:
    """The reference's nineteen; the acceptance rate; the schedule and the latency factor
    its phases set."""
    assert set(ADMIN_KEYS) == {
        "spec-acceptance-rate", "latency-factor", "phases",
        "failure-injection-rate", "failure-types", "image-emission-rate", "fake-metrics",
        "time-to-first-token", "time-to-first-token-std-dev", "inter-token-latency",
        "inter-token-latency-std-dev", "kv-cache-transfer-latency",
        "kv-cache-transfer-latency-std-dev", "prefill-overhead", "prefill-time-per-token",
        "prefill-time-std-dev", "kv-cache-transfer-time-per-token",
        "kv-cache-transfer-time-std-dev", "time-to-generate-image",
        "time-to-generate-image-std-dev", "time-factor-under-load", "latency-calculator",
    }  # fmt: skip
    latency = {k for k, s in ADMIN_KEYS.items() if s.admin is Admin.LATENCY}
    assert "time-to-generate-image" not in latency and "latency-calculator" in latency


def test_cli_only_and_yaml_only_keys() -> None:
    assert "config" in FLAGS and "config" not in YAML_KEYS
    assert "v" in FLAGS and "v" not in YAML_KEYS
    assert "ip" in YAML_KEYS and "ip" not in FLAGS


def test_every_setting_has_help() -> None:
    assert all(setting.help for setting in SETTINGS)


def test_docs_are_generated_from_the_table() -> None:
    text = render_reference()
    assert DOCS.read_text(encoding="utf-8") == text, "run `make docs` to refresh docs/flags.md"
    for key in FLAGS:
        assert f"{key}`" in text


def test_reference_module_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "vllm_sim.config.reference"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert result.stdout == render_reference()
    assert result.stderr == ""
