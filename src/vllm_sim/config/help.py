"""`--help` text, generated from the settings table; defaults shown include the YAML file's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .flags import FLAGS, SETTINGS, Admin, Group, Setting
from .vllm_cli import OPTIONS, VLLM_CLI_VERSION

USAGE = """\
Usage: vllm-sim [serve] [MODEL] [flags]

Simulates a vLLM server without running a model. Flags follow llm-d-inference-sim:
`--name value` or `--name=value`; bools also take `--name true|false` and `--no-name`.
`vllm serve` command lines work too: vLLM's flags take vLLM's syntax (`--max_num_seqs`,
unique prefixes, `-tp 2`, `-O3`, `--kv-transfer-config.kv_role kv_both`).
Every flag except --config and the logging flags is also a key of the --config YAML file.
Precedence: flags > environment (SIM_MODEL, PYTHONHASHSEED) > YAML > defaults.
[admin] marks settings POST /admin/config can change at runtime.
`vllm-sim dataset --help`: the tool that turns conversations into a --dataset-path file.
`vllm-sim replay --help`, `compare --help`, `plan --help`: what-if runs in simulated time.
`vllm-sim calibrate --help`: fit the step model to your vLLM run's measurements, for
--timing-profile."""
_WIDTH = 36


def flag_syntax(setting: Setting, with_type: bool = True) -> str:
    """The left column: `--port int`, `--[no-]enable-kvcache`, `-v, --v int`."""
    if setting.kind.is_bool:
        return f"--[no-]{setting.key}"
    prefix = f"-{setting.shorthand}, " if setting.shorthand else ""
    suffix = f" {setting.kind.label}" if with_type else ""
    return f"{prefix}--{setting.key}{suffix}"


def default_text(setting: Setting, overrides: Mapping[str, Any]) -> str:
    """The default as shown (a YAML value if the file set one); empty for zero values."""
    if setting.attr is not None and setting.attr in overrides:
        return setting.kind.show(overrides[setting.attr])
    if setting.default_doc is not None:
        return setting.default_doc
    return setting.kind.show(setting.default)


def _describe(setting: Setting, overrides: Mapping[str, Any]) -> str:
    text = setting.help
    default = default_text(setting, overrides)
    if default:
        text += f" (default {default})"
    if setting.admin is not Admin.NO:
        text += " [admin]"
    if setting.env is not None:
        text += f" [env {setting.env.name}]"
    return text


def _group_lines(group: Group, overrides: Mapping[str, Any]) -> list[str]:
    lines = []
    for setting in SETTINGS:
        if setting.group is group and setting.cli:
            syntax, text = flag_syntax(setting), _describe(setting, overrides)
            if len(syntax) > _WIDTH:  # long names get their description on the next line
                lines.append(f"  {syntax}")
                syntax = ""
            lines.append(f"  {syntax:<{_WIDTH}}  {text}")
    return lines


def _environment_lines() -> list[str]:
    lines = ["Environment:"]
    for setting in SETTINGS:
        if setting.env is not None:
            yaml_note = " (YAML key `ip` overrides)" if setting.yaml and not setting.cli else ""
            lines.append(f"  {setting.env.name:<22}  {setting.help}{yaml_note}")
    return lines


def no_effect_options() -> list[str]:
    """vLLM's flags that no setting takes: accepted, checked, and without effect."""
    return [option.name for option in OPTIONS if option.key not in FLAGS]


def _vllm_lines() -> list[str]:
    count = len(no_effect_options())
    return [
        f"Other vLLM {VLLM_CLI_VERSION} flags:",
        f"  The other {count} `vllm serve` flags (--dtype, --trust-remote-code, "
        "--gpu-memory-utilization, ...)",
        "  are accepted, their values checked as vLLM checks them, and listed once at start-up",
        "  as having no effect; docs/flags.md names them all.",
    ]


def render_help(overrides: Mapping[str, Any]) -> str:
    """Usage grouped by area; `overrides` (attr -> value, from YAML) replace shown defaults."""
    sections = [USAGE]
    for group in Group:
        lines = _group_lines(group, overrides)
        if lines:
            sections.append("\n".join([f"{group.value}:", *lines]))
    sections.append("\n".join(_vllm_lines()))
    sections.append("\n".join(_environment_lines()))
    return "\n\n".join(sections) + "\n"
