"""Command-line syntax: pflag's rules as the reference uses them (with its bool bugs fixed),
and `vllm serve`'s rules for vLLM's flags, so Go-simulator lines, vLLM lines and mixes load.

vLLM's syntax, read for every flag vLLM 0.32 has (see `vllm_cli`): `--max_num_seqs`
(underscores), any unique prefix (`--max-num-seq`), short aliases (`-tp 2`, `-tp=2`), `-O3`,
and dotted JSON keys (`--kv-transfer-config.kv_role kv_both`). A vLLM flag the simulator has
no setting for is checked as vLLM checks it and noted as having no effect; a flag vLLM 0.32
removed is refused in vLLM's words. Settings of the reference keep pflag's rules.

Parsing is two passes so errors come out in argv order, as pflag reports them: `walk` splits
argv into flag occurrences (stopping at `--help` or the first syntax error), then
`convert_occurrences` turns each value into its typed form.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .flags import FLAGS, SHORTHANDS, Group, Setting
from .gosyntax import go_quote, is_go_bool
from .kinds import BadItem
from .vllm_cli import (
    BY_KEY,
    REMOVED,
    SHORT_NAMES,
    VllmArgumentError,
    VllmOption,
    convert,
    find_long,
    human_readable_int,
    is_negated,
    looks_like_option,
)

_OPTIMIZATION_LEVEL = BY_KEY["optimization-level"]
_BARE_OPTIMIZATION_LEVELS = ("0", "1", "2", "3")  # `-O 3`: vLLM takes only these apart


@dataclass(frozen=True, slots=True)
class Target:
    """What a flag name means: a setting, a vLLM option, or both (a shared name)."""

    setting: Setting | None  # None: a vLLM flag the simulator has no setting for
    option: VllmOption | None
    negated: bool = False
    shown: str = ""  # the long name, as the no-effect log lists it

    @property
    def vllm_syntax(self) -> bool:
        return self.setting is None or self.setting.vllm_syntax

    @property
    def display(self) -> str:
        """The flag as errors name it: vLLM's `--x/-x` for vLLM's syntax, else `--x`."""
        if self.option is not None and self.vllm_syntax:
            return self.option.display
        return "--" + self.setting.key if self.setting is not None else self.shown


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One flag as given: `text` for scalars (bools normalised to "true"/"false"), `texts` for
    list flags and for vLLM flags without a setting."""

    setting: Setting | None
    text: str = ""
    texts: tuple[str, ...] = ()
    option: VllmOption | None = None
    shown: str = ""


@dataclass(slots=True)
class ParsedArgv:
    occurrences: list[Occurrence] = field(default_factory=list)
    positionals: list[str] = field(default_factory=list)
    help: bool = False
    error: ConfigError | None = None  # the syntax error parsing stopped at
    unrecognized: list[str] = field(default_factory=list)  # flags vLLM 0.32 removed
    hints: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Converted:
    given: dict[str, Any]  # typed values by setting key, a repeated one keeping its last
    no_effect: tuple[str, ...]  # vLLM flags given that no setting takes, in argv order


def option_name(setting: Setting) -> str:
    """How pflag names a flag in messages: `--port`, or `-v, --v` with a shorthand."""
    long = "--" + setting.key
    return f"-{setting.shorthand}, {long}" if setting.shorthand else long


def find_config_path(argv: list[str]) -> str | None:
    """`--config` is read before everything else, so a file's values become the defaults."""
    for index, item in enumerate(argv):
        if item == "--config":
            return argv[index + 1] if index + 1 < len(argv) else None
        if item.startswith("--config="):
            return item.removeprefix("--config=")
    return None


def _setting_target(key: str) -> Target | None:
    if key in FLAGS:
        return Target(FLAGS[key], BY_KEY.get(key), False, "--" + key)
    base = FLAGS.get(key.removeprefix("no-")) if key.startswith("no-") else None
    if base is not None and base.kind.is_bool:
        return Target(base, BY_KEY.get(base.key), True, "--" + key)
    return None


def resolve_long(token: str, name: str) -> Target | None:
    """A settings' name first (as given, then with `_` read as `-`), then vLLM's names and
    their unique prefixes; raises VllmArgumentError for an ambiguous prefix."""
    for key in (name, name.replace("_", "-")):
        target = _setting_target(key)
        if target is not None:
            return target
    found = find_long(token, "--" + name)
    if found is None:
        return None
    option, spelled = found
    return Target(FLAGS.get(option.key), option, is_negated(option, spelled), spelled)


def _short_target(option: VllmOption) -> Target:
    return Target(FLAGS.get(option.key), option, False, option.name)


def _ends_reference_list(item: str) -> bool:
    """A reference list flag collects items up to the next `--` item; a vLLM short flag
    (`-tp 2`, `-O3`) ends it too, so vLLM lines read as vLLM reads them, while a Go line's
    `-v=5` is still collected, as the reference collects it."""
    if item.startswith("--"):
        return True
    name = item[1:].partition("=")[0].partition(".")[0]
    return item.startswith("-") and ("-" + name in SHORT_NAMES or name.startswith("O"))


def _dotted_value(text: str) -> Any:
    """A dotted key's value as vLLM reads it: JSON, else a human-readable int, else text."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return human_readable_int(text)
    except VllmArgumentError:
        return text


def merge_dotted(tree: dict[str, Any], keys: list[str], text: str) -> None:
    """`a.b` = text into `tree`; a last key ending in `+` appends comma-separated items."""
    *parents, last = keys
    node = tree
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    if last.endswith("+"):
        existing = node.get(last[:-1])
        node[last[:-1]] = (existing if isinstance(existing, list) else []) + text.split(",")
    else:
        node[last] = _dotted_value(text)


class _Walker:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.index = 0
        self.result = ParsedArgv()
        # Items up to here were collected by a list flag, so they are not positionals; the
        # single-dash ones among them are still parsed as flags, as in the reference.
        self.collected_until = 0
        self.lists_seen: set[str] = set()
        # Dotted keys by the flag they extend; vLLM applies them after everything else.
        self.dotted: dict[str, tuple[Target, dict[str, Any]]] = {}

    def run(self) -> ParsedArgv:
        while self.index < len(self.argv) and not self._stopped():
            item = self.argv[self.index]
            if item == "--":
                self.result.positionals.extend(self.argv[self.index + 1 :])
                break
            if item.startswith("--"):
                self._long(item)
            elif item.startswith("-") and len(item) > 1:
                self._short(item)
            else:
                if item and self.index >= self.collected_until:
                    self.result.positionals.append(item)
                self.index += 1
        for target, tree in self.dotted.values():
            if not self._stopped():
                self._dispatch(target, True, json.dumps(tree))
        return self.result

    def _stopped(self) -> bool:
        return self.result.help or self.result.error is not None

    def _next_item(self) -> str | None:
        following = self.index + 1
        return self.argv[following] if following < len(self.argv) else None

    def _stop(self, message: str) -> None:
        self.result.error = ConfigError(message)

    def _long(self, item: str) -> None:
        name, equals, value = item[2:].partition("=")
        if name == "help":
            self.result.help = True
            return
        if not name:
            return self._stop(f"bad flag syntax: {item}")
        try:
            base = name.partition(".")[0]
            target = resolve_long("--" + base if base != name else item, base)
        except VllmArgumentError as error:
            return self._stop(str(error))
        if target is None:
            return self._unknown(item, name)
        if base != name:
            return self._dotted(target, "--" + base, name, bool(equals), value)
        self._dispatch(target, bool(equals), value)

    def _unknown(self, item: str, name: str) -> None:
        """A flag vLLM 0.32 removed joins vLLM's `unrecognized arguments` list (with its
        value); any other unknown flag stops parsing, as in the reference."""
        removed = REMOVED.get("--" + name.replace("_", "-"))
        if removed is None:
            return self._stop(f"unknown flag: --{name}")
        self.result.unrecognized.append(item)
        if removed.hint:
            self.result.hints.append(removed.hint)
        following = self._next_item()
        takes_next = removed.takes_value and "=" not in item
        if takes_next and following is not None and not following.startswith("-"):
            self.result.unrecognized.append(following)
            self.index += 1
        self.index += 1

    def _dispatch(self, target: Target, has_value: bool, value: str) -> None:
        setting, option = target.setting, target.option
        if setting is not None:
            if setting.kind.is_list:
                return self._list(setting, has_value, value)
            if setting.kind.is_bool:
                return self._bool(target, has_value, value)
            return self._scalar(target, has_value, value)
        assert option is not None
        if option.is_bool:
            return self._bool(target, has_value, value)
        if option.nargs == "+":
            return self._vllm_list(target, has_value, value)
        self._scalar(target, has_value, value)

    def _record(self, target: Target, text: str = "", texts: tuple[str, ...] = ()) -> None:
        self.result.occurrences.append(
            Occurrence(target.setting, text, texts, target.option, target.shown)
        )

    def _record_value(self, target: Target, value: str) -> None:
        """A scalar: a setting's text, or a vLLM flag's one value to check."""
        if target.setting is None:
            self._record(target, texts=(value,))
        else:
            self._record(target, value)

    def _bool(self, target: Target, has_value: bool, value: str) -> None:
        following = self._next_item()
        if target.negated and has_value:
            return self._stop(
                f'invalid argument {go_quote(value)} for "{target.shown}" flag: '
                "a --no- flag takes no value"
            )
        if has_value and target.vllm_syntax and not is_go_bool(value):
            return self._stop(f"argument {target.display}: ignored explicit argument {value!r}")
        if target.negated:
            self._record(target, "false")
        elif has_value:
            self._record(target, value)
        elif following is not None and is_go_bool(following):
            # Fix: the reference leaves `false` in `--x false` as a positional and sets true.
            self._record(target, following)
            self.index += 1
        else:
            self._record(target, "true")
        self.index += 1

    def _missing_value(self, target: Target) -> None:
        if target.vllm_syntax:
            return self._stop(f"argument {target.display}: expected one argument")
        assert target.setting is not None
        self._stop(f"flag needs an argument: --{target.setting.key}")

    def _scalar(self, target: Target, has_value: bool, value: str) -> None:
        following = self._next_item()
        # pflag takes the next item even if it starts with "-"; argparse does not.
        takes_next = following is not None and not (
            target.vllm_syntax and looks_like_option(following)
        )
        option = target.option
        if has_value:
            self._record_value(target, value)
        elif takes_next:
            assert following is not None
            self._record_value(target, following)
            self.index += 1
        elif target.setting is None and option is not None and option.nargs == "?":
            self._record(target)  # bare: the option's const (`--hf-token`: the cached login)
        else:
            return self._missing_value(target)
        self.index += 1

    def _values(
        self, has_value: bool, value: str, ends: Callable[[str], bool]
    ) -> tuple[tuple[str, ...], int]:
        """A list flag's values: its `=value`, or the items after it up to the first that
        `ends` the list; and the index past them."""
        end = self.index + 1
        if has_value:
            return (value,), end
        while end < len(self.argv) and not ends(self.argv[end]):
            end += 1
        return tuple(self.argv[self.index + 1 : end]), end

    def _vllm_list(self, target: Target, has_value: bool, value: str) -> None:
        """nargs='+': the items up to the next option-like item; a repeat replaces."""
        texts, end = self._values(has_value, value, looks_like_option)
        if not texts:
            return self._stop(f"argument {target.display}: expected at least one argument")
        self._record(target, texts=texts)
        self.collected_until = max(self.collected_until, end)
        self.index += 1

    def _list(self, setting: Setting, has_value: bool, value: str) -> None:
        """Values run until the next `--` item and empty items are skipped, like the reference's
        pre-scan of list flags, so `--served-model-name a b` gives two names."""
        texts, end = self._values(has_value, value, _ends_reference_list)
        if not has_value:
            texts = tuple(item for item in texts if item)
        # A repeatable flag (--api-key) given nothing must not quietly mean "no key".
        if (setting.kind.needs_value or setting.repeatable) and not texts:
            return self._stop(f"flag needs an argument: --{setting.key}")
        if setting.key not in self.lists_seen:  # later occurrences are ignored, as in the reference
            self.lists_seen.add(setting.key)
            self._record(Target(setting, BY_KEY.get(setting.key)), texts=texts)
        elif setting.repeatable:  # ... except for flags meant to be repeated (--api-key)
            self._extend(setting, texts)
        self.collected_until = max(self.collected_until, end)
        self.index += 1

    def _extend(self, setting: Setting, texts: tuple[str, ...]) -> None:
        occurrences = self.result.occurrences
        for index, occurrence in enumerate(occurrences):
            if occurrence.setting is setting:
                occurrences[index] = Occurrence(
                    setting, texts=occurrence.texts + texts, option=occurrence.option
                )
                return

    def _dotted(self, target: Target, spelled: str, name: str, has_value: bool, value: str) -> None:
        """`--json-arg.key value`: collected into one JSON object per flag, which vLLM
        applies after the whole line (so it replaces an earlier `--json-arg '{...}'`)."""
        path = name.partition(".")[2]
        if not has_value:
            following = self._next_item()
            if following is None:  # vLLM takes the next item whatever it is
                return self._missing_value(target)
            value = following
            self.index += 1
        spelled = spelled.replace("_", "-")  # `-cc.x` and `--compilation-config.x` stay apart
        merge_dotted(self.dotted.setdefault(spelled, (target, {}))[1], path.split("."), value)
        self.index += 1

    @staticmethod
    def _short_of(name: str) -> Target | None:
        option = SHORT_NAMES.get("-" + name)
        return _short_target(option) if option is not None else None

    def _short(self, item: str) -> None:
        name, equals, value = item[1:].partition("=")
        if name.startswith("h"):
            self.result.help = True
            return
        base = name.partition(".")[0]
        target = self._short_of(base)
        if target is not None and base != name:
            return self._dotted(target, "-" + base, name, bool(equals), value)
        if target is not None:
            return self._dispatch(target, bool(equals), value)
        if name.startswith("O"):
            return self._optimization_level(item)
        attached = self._short_of(name[:1])  # `-n2`: a one-letter vLLM flag, value attached
        if attached is not None and not equals:
            return self._dispatch(attached, True, name[1:])
        self._klog_short(item)

    def _optimization_level(self, item: str) -> None:
        """vLLM's `-O3`, `-O=3`, `-Odecode`, and `-O 3` for levels 0-3 only."""
        target = Target(None, _OPTIMIZATION_LEVEL, False, _OPTIMIZATION_LEVEL.name)
        level = item[2:].removeprefix("=")
        following = self._next_item()
        if level:
            self._record(target, texts=(level,))
        elif following in _BARE_OPTIMIZATION_LEVELS:
            self._record(target, texts=(following,))
            self.index += 1
        else:
            self.result.unrecognized.append(item)
        self.index += 1

    def _klog_short(self, item: str) -> None:
        """pflag's one-letter flags: only klog's `-v` (`-v 5`, `-v=5`, `-v5`)."""
        letter, rest = item[1], item[2:]
        setting = SHORTHANDS.get(letter)
        if setting is None:
            return self._stop(f"unknown shorthand flag: '{letter}' in {item}")
        target = Target(setting, None)
        following = self._next_item()
        if rest:
            self._record(target, rest.removeprefix("="))
        elif following is not None:
            self._record(target, following)
            self.index += 1
        else:
            return self._stop(f"flag needs an argument: '{letter}' in -{letter}")
        self.index += 1


def walk(argv: list[str]) -> ParsedArgv:
    return _Walker(argv).run()


def _vllm_error(occurrence: Occurrence, error: VllmArgumentError) -> ConfigError:
    option = occurrence.option
    name = option.display if option is not None else occurrence.shown
    return ConfigError(f"argument {name}: {error}")


def _convert(occurrence: Occurrence) -> Any:
    setting = occurrence.setting
    assert setting is not None
    kind = setting.kind
    try:
        if kind.is_list:
            return kind.parse_texts(occurrence.texts)
        return kind.parse_text(occurrence.text)
    except VllmArgumentError as error:
        raise _vllm_error(occurrence, error) from None
    except BadItem as error:
        item, reason = error.item, str(error)
    except ValueError as error:
        item, reason = occurrence.text, str(error)
    name = go_quote(option_name(setting))
    raise ConfigError(f"invalid argument {go_quote(item)} for {name} flag: {reason}")


def _check_vllm_values(occurrence: Occurrence) -> None:
    assert occurrence.option is not None
    try:
        for text in occurrence.texts:
            convert(occurrence.option, text)
    except VllmArgumentError as error:
        raise _vllm_error(occurrence, error) from None


def convert_occurrences(parsed: ParsedArgv) -> Converted:
    """Typed values by setting key, in argv order, so a repeated scalar keeps its last value;
    vLLM flags without a setting are checked and listed."""
    given: dict[str, Any] = {}
    no_effect: dict[str, None] = {}  # ordered and without repeats
    for occurrence in parsed.occurrences:
        setting = occurrence.setting
        if setting is None:
            _check_vllm_values(occurrence)
            no_effect[occurrence.shown] = None
            continue
        given[setting.key] = _convert(occurrence)
        if setting.group is Group.IGNORED:  # stored for /admin/config, and still no effect
            no_effect["--" + setting.key] = None
    return Converted(given, tuple(no_effect))
