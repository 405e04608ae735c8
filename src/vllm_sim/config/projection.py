"""Settings objects of other layers, read from the Config by field name.

Each layer keeps its own small settings dataclass, named in its own words; a projection
says only where a field's name differs from the config's, so adding a knob is one field
and, at most, one entry in a rename table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from .model import Config

T = TypeVar("T")


def project(
    settings: type[T], cfg: Config, renamed: Mapping[str, str] | None = None, **given: Any
) -> T:
    """An instance of the dataclass `settings`: each field from `given` if there, else from
    the config key `renamed[field]`, else from the config key of the same name."""
    renamed = renamed or {}
    values = {
        spec.name: given[spec.name]
        if spec.name in given
        else getattr(cfg, renamed.get(spec.name, spec.name))
        for spec in fields(settings)  # type: ignore[arg-type]
        if spec.init
    }
    return settings(**values)
