"""The `--config` YAML file: keys are flag names, decoded with yaml.v3's rules.

Unknown keys are ignored with a one-line warning on stderr (the reference warns and goes on,
so files written for it keep loading), and a null value keeps the default; a value of the
wrong type fails with yaml.v3's wording plus the key, on one line. The file is read only up to
MAX_CONFIG_BYTES, and only from a regular file (or a pipe), so `--config /dev/zero` is an error
rather than a hang.
"""

from __future__ import annotations

import logging
import os
import stat
from typing import Any

import yaml

from .errors import ConfigError
from .flags import YAML_KEYS
from .kinds import YamlValue, valid_text, without_surrogates

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


def _settings_from(root: yaml.MappingNode, loader: yaml.SafeLoader) -> dict[str, Any]:
    values: dict[str, Any] = {}
    seen: dict[str, int] = {}
    for key_node, value_node in root.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ConfigError(
                f'{_PREFIX}unmarshal errors: line {line}: mapping key "{key}" already defined '
                f"at line {seen[key]}"
            )
        setting = YAML_KEYS.get(key) if isinstance(key, str) else None
        if key is not None:
            seen[key] = line
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
    return values


def parse_yaml(text: str) -> dict[str, Any]:
    """Config attribute -> value for every known key the document sets."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return {}
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


def load_yaml_file(path: str) -> dict[str, Any]:
    data = _read_bounded(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"failed to unmarshal configuration: {error}") from None
    return parse_yaml(text)
