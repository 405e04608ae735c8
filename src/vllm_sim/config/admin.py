"""GET and POST /admin/config: the config as JSON, and validated updates.

An update is all-or-nothing: the merged config is fully re-validated and returned as a new
immutable Config, so the caller can swap it in atomically.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .errors import ConfigError
from .fake_metrics import FakeMetrics, decode_fake_metrics
from .fake_metrics_rules import merge_fake_metrics
from .flags import ADMIN_KEYS, SETTINGS, YAML_KEYS
from .kinds import DURATION, FAKE_METRICS, JsonMismatch, loads_json
from .model import Config
from .validate import validate

REAL_METRICS_ERROR = "the simulator is reporting real metrics; fake metrics cannot be updated"
_UNMARSHAL = "failed to unmarshal payload: "


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """The effective config as GET /admin/config shows it: YAML keys, Go durations, sorted."""
    out: dict[str, Any] = {"DisplayModelName": cfg.display_model_name}
    for setting in SETTINGS:
        if setting.attr is None or setting.json_key is None:
            continue
        if setting.key == "port" and cfg.data_parallel_size > 1:
            continue  # each rank has its own port, so the reference omits it
        out[setting.json_key] = setting.kind.to_json(getattr(cfg, setting.attr))
    return dict(sorted(out.items()))


def _decode(payload: bytes) -> dict[str, Any] | None:
    try:
        text = payload.decode("utf-8")
        if not text.strip():
            raise ValueError("unexpected end of JSON input")
        data = loads_json(text)
    except ValueError as error:  # includes UnicodeDecodeError and JSONDecodeError
        raise ConfigError(_UNMARSHAL + str(error)) from None
    except RecursionError:
        raise ConfigError(_UNMARSHAL + "JSON is nested too deeply") from None
    if data is not None and not isinstance(data, dict):
        kind = "array" if isinstance(data, list) else type(data).__name__
        raise ConfigError(
            f"{_UNMARSHAL}json: cannot unmarshal {kind} into Go value of type map[string]any"
        )
    return data


def _check_keys(data: dict[str, Any]) -> None:
    """Duration strings are checked before key permissions, as in the reference."""
    for key, value in data.items():
        setting = YAML_KEYS.get(key)
        if setting is not None and setting.kind is DURATION and isinstance(value, str):
            try:
                DURATION.from_json(value)
            except ValueError as error:
                raise ConfigError(f'field "{key}": {error}') from None
    for key in data:
        if key not in ADMIN_KEYS:
            raise ConfigError(f"field '{key}' is not admin-configurable")


def _fake_update(current: FakeMetrics | None, value: object) -> FakeMetrics | None:
    try:
        update = decode_fake_metrics(value)
    except ValueError as error:
        raise ConfigError(_UNMARSHAL + str(error)) from None
    return None if current is None else merge_fake_metrics(current, update)


def _changes(cfg: Config, data: dict[str, Any]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for key, value in data.items():
        setting = ADMIN_KEYS[key]
        assert setting.attr is not None
        if value is None and not setting.kind.null_clears:
            continue  # like Go's encoding/json: null leaves a scalar (and fake-metrics) unchanged
        if setting.kind is FAKE_METRICS:
            merged = _fake_update(cfg.fake_metrics, value)
            if merged is not None:
                changes[setting.attr] = merged
            continue
        try:
            changes[setting.attr] = setting.kind.from_json(value)
        except JsonMismatch as error:
            raise ConfigError(
                f"{_UNMARSHAL}json: cannot unmarshal {error.got} into Go struct field "
                f"Configuration.{key} of type {setting.kind.go_type}"
            ) from None
        except ValueError as error:  # a value of the right type but the wrong shape
            raise ConfigError(f'field "{key}": {error}') from None
    return changes


def apply_admin_update(cfg: Config, payload: bytes) -> Config:
    """The config after POST /admin/config with `payload`; raises ConfigError, changing nothing.

    Fake-metrics updates merge field by field, so an update names only what it changes; null
    fields and a null `fake-metrics` leave things unchanged.
    """
    data = _decode(payload)
    if not data:
        return cfg
    _check_keys(data)
    updated = validate(replace(cfg, **_changes(cfg, data)))
    if data.get("fake-metrics") is not None and cfg.fake_metrics is None:
        raise ConfigError(REAL_METRICS_ERROR)
    return updated
