"""The `--config` YAML file: keys are flag names, decoded with yaml.v3's rules.

Unknown keys are ignored and a null value keeps the default, as in the reference; a value of
the wrong type fails with yaml.v3's wording plus the key, on one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .flags import YAML_KEYS
from .kinds import YamlValue

_PREFIX = "failed to unmarshal configuration: yaml: "


def _short_tag(tag: str) -> str:
    return tag.replace("tag:yaml.org,2002:", "!!")


def _to_value(node: yaml.Node, loader: yaml.SafeLoader) -> YamlValue:
    line = node.start_mark.line + 1
    data = loader.construct_object(node, deep=True)
    if isinstance(node, yaml.ScalarNode):
        return YamlValue(_short_tag(node.tag), node.value, node.style is None, line, data)
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
        if setting is None or setting.attr is None or value_node.tag.endswith(":null"):
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


def load_yaml_file(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"failed to read configuration file: {_os_reason(path, error)}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"failed to unmarshal configuration: {error}") from None
    return parse_yaml(text)
