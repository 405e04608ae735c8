"""The vocabulary of a setting's one declaration: a field of `Config` (its name and type)
whose metadata says everything else (flag, YAML key, env var, default, help, rules, admin,
and the fields of other layers' settings views it feeds).

A declaration is written as `attr: Type = flag(...)`; the flag name is the attribute's with
`-` for `_` unless given. The metadata holds a maker called with the names once the class
exists, because a vLLM flag's kind and default are looked up by its name.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .durations import Duration
from .kinds import BOOL, DURATION, Kind
from .rules import Fill, Rule
from .vllm_cli import BY_KEY, VllmOption
from .vllm_kinds import VllmValueKind


class Group(enum.Enum):
    """Help sections, in display order."""

    SERVER = "Server"
    MODEL = "Model"
    ENGINE = "Engine & queue"
    LATENCY = "Latency"
    PERFORMANCE = "Performance model (step engine)"
    CONTENT = "Content & tools"
    KV = "KV cache & events"
    LORA = "LoRA"
    FAILURES = "Failure injection & fake metrics"
    DATA_PARALLEL = "Data parallel"
    FLEET = "Fleet (many instances from one command)"
    TLS = "TLS"
    DATASETS = "Tokenizer & datasets"
    IGNORED = "Ignored vLLM flags"
    LOGGING = "Logging"
    ENVIRONMENT = "Environment"


class Admin(enum.Enum):
    """Whether POST /admin/config may change a setting."""

    NO = "no"
    YES = "yes"
    LATENCY = "yes (rebuilds the latency model)"


class EnvRule(enum.Enum):
    """Where an environment variable sits in the precedence order."""

    DEFAULT = "replaces the default; the YAML file still wins"
    OVER_YAML = "used when the flag is absent and the variable is non-empty; beats YAML"
    ONLY = "environment only"


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    rule: EnvRule
    parse: Callable[[str], Any] = str


@dataclass(frozen=True, slots=True)
class ViewField:
    """One field of a layer's settings view that a setting fills."""

    view: View
    field: str


@dataclass(frozen=True, slots=True)
class View:
    """A layer's settings view, by name: the composition root builds the typed class from
    the settings that feed it. `VIEW("x")` feeds its field `x`; `VIEW` alone, the field
    named like the setting's attribute."""

    name: str

    def __call__(self, field: str) -> ViewField:
        return ViewField(self, field)


Feeds = tuple[View | ViewField, ...]


@dataclass(frozen=True, slots=True)
class Setting:
    """One configurable value. `attr` None = accepted and ignored (klog, `--config`)."""

    key: str  # flag name without dashes; also the YAML key when `yaml`
    kind: Kind
    default: Any
    group: Group
    help: str
    attr: str | None
    json_key: str | None  # key in GET /admin/config, None = not shown
    cli: bool = True
    yaml: bool = True
    admin: Admin = Admin.NO
    env: EnvVar | None = None
    rules: tuple[Rule, ...] = ()
    fill: Fill | None = None
    shorthand: str | None = None
    default_factory: Callable[[], Any] | None = None
    default_doc: str | None = None  # shown instead of a computed default
    repeatable: bool = False  # a list flag whose later occurrences add to the first
    # A vLLM flag the reference lacks: vLLM's value syntax (a value never starts with '-')
    # and vLLM's wording in errors.
    vllm_syntax: bool = False
    views: tuple[ViewField, ...] = ()

    def initial(self) -> Any:
        return self.default_factory() if self.default_factory else self.default


Maker = Callable[[str, str], Setting]  # (key, attr) -> the setting
_MAKER = "vllm_sim.setting"


def _declare(make: Maker, key: str | None = None) -> Any:
    """A Config field carrying `make`; typed Any so that `attr: T = flag(...)` checks."""
    return dataclasses.field(metadata={_MAKER: (make, key)})


def _views(feeds: Feeds, attr: str) -> tuple[ViewField, ...]:
    return tuple(feed(attr) if isinstance(feed, View) else feed for feed in feeds)


def setting(
    kind: Kind,
    default: Any,
    group: Group,
    help: str,
    *,
    key: str | None = None,
    json_key: str | None = "",
    to: Feeds = (),
    **extra: Any,
) -> Any:
    """A declaration; `json_key` "" means the flag name, None hides it from /admin/config."""

    def make(flag_key: str, attr: str) -> Setting:
        shown = flag_key if json_key == "" else json_key
        # Defaults are written as arithmetic (`30 * SECOND`), which gives plain ints.
        value = Duration(default) if kind is DURATION else default
        return Setting(
            flag_key, kind, value, group, help, attr, shown, views=_views(to, attr), **extra
        )

    return _declare(make, key)


def flag(kind: Kind, default: Any, group: Group, help: str, **extra: Any) -> Any:
    """A flag that is also a YAML key and a GET /admin/config key."""
    return setting(kind, default, group, help, **extra)


def vllm_flag(group: Group, help: str, **extra: Any) -> Any:
    """A setting named after a vLLM flag the reference lacks; its kind, and its default
    unless given, come from the vLLM facts table."""

    def make(key: str, attr: str) -> Setting:
        option: VllmOption = BY_KEY[key]
        kind = BOOL if option.is_bool else VllmValueKind(option)
        given = dict(extra)
        default = given.pop("default", option.default)
        text = help
        if option.choices is not None:
            text += ": " + ", ".join(str(choice) for choice in option.choices)
        to = given.pop("to", ())
        views = _views(to, attr)
        return Setting(
            key, kind, default, group, text, attr, key, vllm_syntax=True, views=views, **given
        )

    return _declare(make)


def env_only(kind: Kind, default: Any, help: str, json_key: str, env: EnvVar) -> Any:
    """Neither flag nor YAML key: the environment sets it; GET /admin/config shows it."""
    return setting(
        kind, default, Group.ENVIRONMENT, help, json_key=json_key, cli=False, yaml=False, env=env
    )


def secret(kind: Kind, default: Any, help: str, **extra: Any) -> Any:
    """A flag never shown: not in GET /admin/config, not in YAML, not in `--help` defaults."""
    return setting(
        kind, default, Group.SERVER, help, json_key=None, yaml=False, default_doc="", **extra
    )


def cli_only(key: str, kind: Kind, default: Any, help: str) -> Setting:
    """Accepted and ignored (`--config` is read by the loader, klog flags have no effect)."""
    group = Group.SERVER if key == "config" else Group.LOGGING
    return Setting(key, kind, default, group, help, None, None, yaml=False)


def declared(fields: Iterable[dataclasses.Field[Any]]) -> tuple[Setting, ...]:
    """The settings the fields of a class declare, in field order."""
    settings = []
    for spec in fields:
        make, key = spec.metadata[_MAKER]
        settings.append(make(key or spec.name.replace("_", "-"), spec.name))
    return tuple(settings)
