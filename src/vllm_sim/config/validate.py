"""Validation: the table's fill-ins and rules, in table order; the first failure wins."""

from __future__ import annotations

from .errors import ConfigError
from .flags import SETTINGS
from .model import Config


def validate(cfg: Config) -> Config:
    """Return `cfg` with its fill-ins applied (e.g. max-cpu-loras 0 -> max-loras), or raise."""
    for setting in SETTINGS:
        if setting.attr is None:
            continue
        if setting.fill is not None:
            cfg = setting.fill(cfg)
        value = getattr(cfg, setting.attr)
        for rule in setting.rules:
            error = rule.check(value, cfg)
            if error is not None:
                raise ConfigError(error)
    return cfg
