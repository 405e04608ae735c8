"""load_config: defaults < YAML < environment < command line, then validation.

Env vars sit at three levels, as in the reference: POD_IP replaces a default (the YAML `ip`
key still wins), SIM_MODEL and PYTHONHASHSEED beat YAML but not their flag, and POD_NAME,
POD_NAMESPACE and VLLM_SERVER_DEV_MODE exist only in the environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .argv import convert_occurrences, find_config_path, walk
from .errors import HelpRequested
from .fake_metrics_rules import with_all_finish_reasons
from .flags import FLAGS, SETTINGS, EnvRule
from .help import render_help
from .kinds import valid_text
from .model import Config
from .validate import validate
from .yaml_source import load_yaml_file


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


def load_config(argv: Sequence[str], environ: Mapping[str, str]) -> Config:
    """The validated configuration for `argv` (without the program name) and `environ`.

    Raises ConfigError (one-line reason) or HelpRequested (usage text).
    """
    # Text that is not UTF-8 (an argv byte, a surrogate escape) is held as Go holds it.
    args = [valid_text(item) for item in argv]
    environ = {name: valid_text(value) for name, value in environ.items()}
    path = find_config_path(args)
    # Read first, so a bad file is reported even with --help, and help shows its values.
    from_file = load_yaml_file(path) if path is not None else {}
    values = _defaults(environ) | from_file
    parsed = walk(args)
    given = convert_occurrences(parsed)
    if parsed.help:
        raise HelpRequested(render_help(from_file))
    if parsed.error is not None:
        raise parsed.error
    _positional_model(given, parsed.positionals)
    _apply_environment(values, given, environ)
    for key, value in given.items():
        attr = FLAGS[key].attr
        if attr is not None:
            values[attr] = value
    cfg = validate(Config(**values))
    if cfg.fake_metrics is not None:
        cfg = replace(cfg, fake_metrics=with_all_finish_reasons(cfg.fake_metrics))
    return cfg
