"""A fleet: --num-instances independent simulated vLLM instances from one command.

Instance i serves the whole API on port + i with an engine, KV cache, metrics and LoRA
state of its own, its pod name suffixed `-i`, and its KV events on its ZMQ endpoint's
port + i (their topic names port + i; the endpoint is the command's, or its entry's).
The instances share one event loop per process; --fleet-processes spreads them over that
many processes, in contiguous groups.

A --fleet-config YAML file makes the fleet heterogeneous: its `instances` list gives each
instance's own server settings, in order (`count: N` repeats an entry N times); instances
past the list run the command's settings. Each instance's settings are read exactly as the
command line is (its entry's keys become flags after the command's own), so they are
checked by the same rules and fail the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import yaml

from vllm_sim.config import Config, ConfigError, load_config
from vllm_sim.engine.kvcache.events import offset_endpoint

log = logging.getLogger("vllm_sim")

# Settings the fleet itself sets per instance: an entry may not.
_FLEET_OWN = frozenset({"port", "num-instances", "fleet-processes", "fleet-config"})


def instance_configs(cfg: Config, argv: Sequence[str], environ: Mapping[str, str]) -> list[Config]:
    """Each instance's configuration; ConfigError (one line) for a bad fleet file."""
    entries = _entries(cfg.fleet_config) if cfg.fleet_config else []
    if len(entries) > cfg.num_instances:
        raise ConfigError(
            f"fleet-config describes {len(entries)} instances, more than --num-instances "
            f"{cfg.num_instances}"
        )
    if cfg.fleet_processes > cfg.num_instances:
        raise ConfigError(
            f"fleet-processes ({cfg.fleet_processes}) cannot exceed num-instances "
            f"({cfg.num_instances})"
        )
    configs = []
    for index in range(cfg.num_instances):
        base = cfg
        if index < len(entries):
            base = _with_entry(argv, environ, index, entries[index])
        configs.append(_own(base, cfg, index))
    return configs


def groups(configs: Sequence[Config], processes: int) -> list[list[Config]]:
    """The instances split into `processes` contiguous groups of (nearly) equal size."""
    size, extra = divmod(len(configs), processes)
    out, start = [], 0
    for p in range(processes):
        end = start + size + (1 if p < extra else 0)
        out.append(list(configs[start:end]))
        start = end
    return out


def _own(cfg: Config, fleet: Config, index: int) -> Config:
    """Instance `index`'s port, pod name and KV-event endpoints (its own settings' ports,
    the command's or its entry's, offset by its index)."""
    return replace(
        cfg,
        port=fleet.port + index,
        pod_name=f"{fleet.pod_name}-{index}" if fleet.pod_name else "",
        zmq_endpoint=offset_endpoint(cfg.zmq_endpoint, index),
        kv_events_replay_endpoint=offset_endpoint(cfg.kv_events_replay_endpoint, index)
        if cfg.kv_events_replay_endpoint
        else "",
        num_instances=1,
        fleet_processes=1,
        fleet_config="",
    )


def _entries(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as error:
        raise ConfigError(f"fleet-config {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"fleet-config {path}: not valid YAML{where}") from None
    instances = data.get("instances") if isinstance(data, dict) else None
    if not isinstance(instances, list):
        raise ConfigError(f"fleet-config {path}: needs an `instances:` list")
    entries: list[dict[str, Any]] = []
    for number, entry in enumerate(instances):
        if not isinstance(entry, dict):
            raise ConfigError(f"fleet-config {path}: instances[{number}] is not a mapping")
        settings = dict(entry)
        count = settings.pop("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError(
                f"fleet-config {path}: instances[{number}].count must be a positive integer"
            )
        entries.extend([settings] * count)
    return entries


def _with_entry(
    argv: Sequence[str], environ: Mapping[str, str], index: int, entry: Mapping[str, Any]
) -> Config:
    flags = []
    for key, value in entry.items():
        name = str(key).replace("_", "-")
        if name in _FLEET_OWN:
            raise ConfigError(f"fleet-config instance {index}: {name} is set by the fleet")
        flags.append(f"--{name}={_flag_text(value)}")
    try:
        return load_config([*argv, *flags], environ)
    except ConfigError as error:
        raise ConfigError(f"fleet-config instance {index}: {error}") from None


def _flag_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)
