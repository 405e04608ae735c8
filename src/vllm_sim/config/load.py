"""load_config: defaults < YAML < environment < command line, then validation.

Env vars sit at three levels, as in the reference: POD_IP replaces a default (the YAML `ip`
key still wins), SIM_MODEL and PYTHONHASHSEED beat YAML but not their flag, and POD_NAME,
POD_NAMESPACE and VLLM_SERVER_DEV_MODE exist only in the environment.

`load_startup` also returns what start-up should log: the vLLM flags given that have no
effect in a simulator (one line), and where a derived --max-model-len comes from.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vllm_sim.model_files import find_model_folder

from .argv import convert_occurrences, find_config_path, walk
from .errors import ConfigError, HelpRequested
from .fake_metrics_rules import with_all_finish_reasons
from .flags import FLAGS, SETTINGS, VLLM_MAX_NUM_BATCHED_TOKENS, EnvRule
from .gpu import is_large_gpu, resolve_gpu
from .help import render_help
from .kinds import valid_text
from .model import Config
from .model_context import ContextLength, model_context_length
from .validate import validate
from .vllm_cli import AUTO, unrecognized_message
from .yaml_source import YamlSettings, load_yaml_file


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    config: Config
    no_effect: tuple[str, ...]  # vLLM flags given that change nothing here, in argv order
    context_length: ContextLength | None  # set when --max-model-len was derived

    def startup_notes(self) -> list[tuple[int, str]]:
        """(logging level, message) pairs for start-up to log, each once."""
        notes = []
        if self.no_effect:
            flags = ", ".join(self.no_effect)
            notes.append((logging.WARNING, f"Accepted without effect in a simulator: {flags}"))
        if self.context_length is not None:
            notes.append((logging.INFO, f"--max-model-len {self.context_length.source}"))
        return notes


def _defaults(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.attr is None:
            continue
        values[setting.attr] = setting.initial()
        env = setting.env
        if env is not None and env.rule is EnvRule.DEFAULT and env.name in environ:
            values[setting.attr] = env.parse(environ[env.name])
    return values


def _positional_model(given: dict[str, Any], positionals: list[str]) -> None:
    """`vllm-sim MODEL` and `vllm-sim serve MODEL`, as `vllm serve MODEL`; --model wins."""
    names = positionals[1:] if positionals[:1] == ["serve"] else positionals
    if names and "model" not in given:
        given["model"] = names[0]


def _apply_environment(
    values: dict[str, Any], given: Mapping[str, Any], environ: Mapping[str, str]
) -> None:
    for setting in SETTINGS:
        env = setting.env
        if env is None or setting.attr is None or env.name not in environ:
            continue
        raw = environ[env.name]
        if env.rule is EnvRule.ONLY or (
            env.rule is EnvRule.OVER_YAML and raw and setting.key not in given
        ):
            values[setting.attr] = env.parse(raw)


def _step_engine_defaults(values: dict[str, Any], explicit: set[str | None]) -> None:
    """Under a step engine, the batch limits not set default as `vllm serve` sets them for
    the GPU: 8192 batched tokens and 1024 sequences on a large one, else 2048 and 256."""
    if values["timing_model"] == "constant":
        return
    try:
        large = is_large_gpu(resolve_gpu(values["gpu"], values["gpu_spec_file"]))
    except ValueError:
        return  # validation reports the GPU
    if "max_num_batched_tokens" not in explicit:
        values["max_num_batched_tokens"] = 8192 if large else VLLM_MAX_NUM_BATCHED_TOKENS
    if "max_num_seqs" not in explicit:
        values["max_num_seqs"] = 1024 if large else 256


def load_startup(argv: Sequence[str], environ: Mapping[str, str]) -> LoadedConfig:
    """The validated configuration for `argv` (without the program name) and `environ`, and
    what start-up should say about it.

    Raises ConfigError (one-line reason) or HelpRequested (usage text).
    """
    # Text that is not UTF-8 (an argv byte, a surrogate escape) is held as Go holds it.
    args = [valid_text(item) for item in argv]
    environ = {name: valid_text(value) for name, value in environ.items()}
    path = find_config_path(args)
    # Read first, so a bad file is reported even with --help, and help shows its values.
    from_file = load_yaml_file(path) if path is not None else YamlSettings()
    values = _defaults(environ) | from_file.values
    parsed = walk(args)
    converted = convert_occurrences(parsed)
    if parsed.help:
        raise HelpRequested(render_help(from_file.values))
    if parsed.error is not None:
        raise parsed.error
    if parsed.unrecognized:
        raise ConfigError(unrecognized_message(parsed.unrecognized, parsed.hints))
    given = converted.given
    _positional_model(given, parsed.positionals)
    _apply_environment(values, given, environ)
    for key, value in given.items():
        attr = FLAGS[key].attr
        if attr is not None:
            values[attr] = value
    explicit = set(from_file.values) | {FLAGS[key].attr for key in given}
    _step_engine_defaults(values, explicit)
    context = None
    if values["max_model_len"] == AUTO:  # not given, or vLLM's `auto`: the model's own
        folder = find_model_folder(
            values["model"], values["revision"], environ, values["download_dir"]
        )
        context = model_context_length(values["model"], folder)
        values["max_model_len"] = context.value
    cfg = validate(Config(**values))
    if cfg.fake_metrics is not None:
        cfg = replace(cfg, fake_metrics=with_all_finish_reasons(cfg.fake_metrics))
    no_effect = tuple(dict.fromkeys([*from_file.no_effect, *converted.no_effect]))
    return LoadedConfig(cfg, no_effect, context)


def load_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """The validated configuration for `argv` and `environ` (see `load_startup`)."""
    return load_startup(argv, environ).config
