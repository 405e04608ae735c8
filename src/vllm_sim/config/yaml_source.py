"""The `--config` YAML file: keys are flag names, decoded with yaml.v3's rules.

Unknown keys are ignored with a one-line warning on stderr (the reference warns and goes on,
so files written for it keep loading), and a null value keeps the default; a value of the
wrong type fails with yaml.v3's wording plus the key, on one line. The file is read only up to
MAX_CONFIG_BYTES, and only from a regular file (or a pipe), so `--config /dev/zero` is an error
rather than a hang.

vLLM's `vllm serve --config` files are read too: keys may use underscores (`max_num_seqs`),
and a key naming a vLLM flag the simulator has no setting for (`dtype`, `trust-remote-code`)
is checked as vLLM checks its value and listed with the flags that have no effect, instead of
warned about.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from typing import Any

import yaml

from .errors import ConfigError
from .flags import FLAGS, YAML_KEYS, Group, Setting
from .kinds import YamlValue, valid_text, without_surrogates
from .vllm_cli import LONG_NAMES, VllmArgumentError, VllmOption, convert

_PREFIX = "failed to unmarshal configuration: yaml: "
MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: far beyond any settings file

log = logging.getLogger("vllm_sim")


def _short_tag(tag: str) -> str:
    return tag.replace("tag:yaml.org,2002:", "!!")


def _to_value(node: yaml.Node, loader: yaml.SafeLoader) -> YamlValue:
    line = node.start_mark.line + 1
    data = without_surrogates(loader.construct_object(node, deep=True))
    if isinstance(node, yaml.ScalarNode):
        text = valid_text(node.value)
        return YamlValue(_short_tag(node.tag), text, node.style is None, line, data)
    items: tuple[YamlValue, ...] = ()
    if isinstance(node, yaml.SequenceNode):
        items = tuple(_to_value(item, loader) for item in node.value)
    return YamlValue(_short_tag(node.tag), None, False, line, data, items)


def _os_reason(path: str, error: OSError) -> str:
    """Go's `open <path>: <reason>`, with Go's lower-case reason."""
    reason = error.strerror or str(error)
    return f"open {path}: {reason[:1].lower()}{reason[1:]}"


def _yaml_reason(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        return f"line {error.problem_mark.line + 1}: {error.problem}"
    return " ".join(str(error).split())


@dataclass(slots=True)
class YamlSettings:
    values: dict[str, Any] = field(default_factory=dict)  # Config attribute -> value
    no_effect: list[str] = field(default_factory=list)  # vLLM keys no setting takes, as flags


def _setting_for(key: str) -> Setting | VllmOption | None:
    """The setting a key names (as written, then with vLLM's `_` for `-`), else the vLLM
    option it names."""
    for name in (key, key.replace("_", "-")):
        if name in YAML_KEYS:
            return YAML_KEYS[name]
    option = LONG_NAMES.get("--" + key.replace("_", "-"))
    if option is not None and option.key in FLAGS:
        return YAML_KEYS.get(option.key)  # a second name of a setting's flag (not `config`)
    return option


def _check_vllm_value(option: VllmOption, node: yaml.Node, key: str) -> None:
    """A scalar as vLLM would pass it to its parser; lists and mappings are not checked."""
    if option.is_bool or not isinstance(node, yaml.ScalarNode) or node.tag.endswith(":null"):
        return
    try:
        convert(option, node.value)
    except VllmArgumentError as error:
        raise ConfigError(f'argument {option.display}: {error} (key "{key}")') from None


def _settings_from(root: yaml.MappingNode, loader: yaml.SafeLoader) -> YamlSettings:
    found = YamlSettings()
    values = found.values
    seen: dict[str, int] = {}
    for key_node, value_node in root.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ConfigError(
                f'{_PREFIX}unmarshal errors: line {line}: mapping key "{key}" already defined '
                f"at line {seen[key]}"
            )
        setting = _setting_for(key) if isinstance(key, str) else None
        if key is not None:
            seen[key] = line
        if isinstance(setting, VllmOption):
            _check_vllm_value(setting, value_node, str(key))
            found.no_effect.append(setting.name)
            continue
        if setting is None or setting.attr is None:
            shown = key if key is not None else "(not a scalar)"
            log.warning("WARN unknown configuration key '%s' at line %d ignored", shown, line)
            continue
        if value_node.tag.endswith(":null"):
            continue
        try:
            values[setting.attr] = setting.kind.from_yaml(_to_value(value_node, loader))
        except ValueError as error:
            raise ConfigError(f'{_PREFIX}unmarshal errors: {error} (key "{key}")') from None
        if setting.group is Group.IGNORED:  # stored for /admin/config, and still no effect
            found.no_effect.append("--" + setting.key)
    return found


def parse_yaml(text: str) -> YamlSettings:
    """Config attribute -> value for every known key the document sets."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return YamlSettings()
        if not isinstance(root, yaml.MappingNode):
            raise ConfigError(
                f"{_PREFIX}unmarshal errors: line {root.start_mark.line + 1}: cannot unmarshal "
                f"{_short_tag(root.tag)} into a mapping of settings"
            )
        return _settings_from(root, loader)
    except yaml.YAMLError as error:
        raise ConfigError(_PREFIX + _yaml_reason(error)) from None
    finally:
        loader.dispose()


def _read_bounded(path: str) -> bytes:
    """The file's bytes; a device, directory or file over MAX_CONFIG_BYTES is a ConfigError."""
    prefix = "failed to read configuration file: "
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise ConfigError(prefix + _os_reason(path, error)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a pipe: `--config <(...)`
            raise ConfigError(f"{prefix}{path} is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as error:
        raise ConfigError(prefix + _os_reason(path, error)) from None
    finally:
        os.close(fd)
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{prefix}{path} is larger than {MAX_CONFIG_BYTES >> 20} MiB")
    return b"".join(chunks)


def load_yaml_file(path: str) -> YamlSettings:
    data = _read_bounded(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"failed to unmarshal configuration: {error}") from None
    return parse_yaml(text)
