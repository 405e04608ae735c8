"""Shared helpers for the configuration tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from vllm_sim.config import Config, ConfigError, load_config


def load(*argv: str, env: Mapping[str, str] | None = None) -> Config:
    return load_config(list(argv), env or {})


def load_error(*argv: str, env: Mapping[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(list(argv), env or {})
    return str(info.value)


def write_yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)
