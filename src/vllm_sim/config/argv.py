"""Command-line syntax: pflag's rules as the reference uses them, with its bool bugs fixed.

Parsing is two passes so errors come out in argv order, as pflag reports them: `walk` splits
argv into flag occurrences (stopping at `--help` or the first syntax error), then
`convert_occurrences` turns each value into its typed form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .flags import FLAGS, SHORTHANDS, Setting
from .gosyntax import go_quote, is_go_bool
from .kinds import BadItem


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One flag as given: `text` for scalars (bools normalised to "true"/"false"), `texts` for
    list flags."""

    setting: Setting
    text: str = ""
    texts: tuple[str, ...] = ()


@dataclass(slots=True)
class ParsedArgv:
    occurrences: list[Occurrence] = field(default_factory=list)
    positionals: list[str] = field(default_factory=list)
    help: bool = False
    error: ConfigError | None = None  # the syntax error parsing stopped at


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


class _Walker:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.index = 0
        self.result = ParsedArgv()
        # Items up to here were collected by a list flag, so they are not positionals; the
        # single-dash ones among them are still parsed as flags, as in the reference.
        self.collected_until = 0
        self.lists_seen: set[str] = set()

    def run(self) -> ParsedArgv:
        while self.index < len(self.argv) and not (self.result.help or self.result.error):
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
        return self.result

    def _next_item(self) -> str | None:
        following = self.index + 1
        return self.argv[following] if following < len(self.argv) else None

    def _stop(self, message: str) -> None:
        self.result.error = ConfigError(message)

    def _lookup(self, name: str) -> tuple[Setting | None, bool]:
        """The setting and whether it was negated with `--no-`."""
        if name in FLAGS:
            return FLAGS[name], False
        base = FLAGS.get(name.removeprefix("no-")) if name.startswith("no-") else None
        if base is not None and base.kind.is_bool:
            return base, True
        return None, False

    def _long(self, item: str) -> None:
        name, equals, value = item[2:].partition("=")
        has_value = bool(equals)
        if name == "help":
            self.result.help = True
            return
        if not name:
            return self._stop(f"bad flag syntax: {item}")
        setting, negated = self._lookup(name)
        if setting is None:
            return self._stop(f"unknown flag: --{name}")
        if setting.kind.is_list:
            return self._list(setting, has_value, value)
        if setting.kind.is_bool:
            return self._bool(setting, negated, has_value, value)
        self._scalar(setting, has_value, value)

    def _record(self, setting: Setting, text: str = "", texts: tuple[str, ...] = ()) -> None:
        self.result.occurrences.append(Occurrence(setting, text, texts))

    def _bool(self, setting: Setting, negated: bool, has_value: bool, value: str) -> None:
        following = self._next_item()
        if negated and has_value:
            return self._stop(
                f'invalid argument {go_quote(value)} for "--no-{setting.key}" flag: '
                "a --no- flag takes no value"
            )
        if negated:
            self._record(setting, "false")
        elif has_value:
            self._record(setting, value)
        elif following is not None and is_go_bool(following):
            # Fix: the reference leaves `false` in `--x false` as a positional and sets true.
            self._record(setting, following)
            self.index += 1
        else:
            self._record(setting, "true")
        self.index += 1

    def _scalar(self, setting: Setting, has_value: bool, value: str) -> None:
        following = self._next_item()
        if has_value:
            self._record(setting, value)
        elif following is not None:  # pflag takes the next item even if it starts with "-"
            self._record(setting, following)
            self.index += 1
        else:
            return self._stop(f"flag needs an argument: --{setting.key}")
        self.index += 1

    def _list(self, setting: Setting, has_value: bool, value: str) -> None:
        """Values run until the next `--` item and empty items are skipped, like the reference's
        pre-scan of list flags, so `--served-model-name a b` gives two names."""
        end = self.index + 1
        if has_value:
            texts: tuple[str, ...] = (value,)
        else:
            while end < len(self.argv) and not self.argv[end].startswith("--"):
                end += 1
            texts = tuple(item for item in self.argv[self.index + 1 : end] if item)
        # A repeatable flag (--api-key) given nothing must not quietly mean "no key".
        if (setting.kind.needs_value or setting.repeatable) and not texts:
            return self._stop(f"flag needs an argument: --{setting.key}")
        if setting.key not in self.lists_seen:  # later occurrences are ignored, as in the reference
            self.lists_seen.add(setting.key)
            self._record(setting, texts=texts)
        elif setting.repeatable:  # ... except for flags meant to be repeated (--api-key)
            self._extend(setting, texts)
        self.collected_until = max(self.collected_until, end)
        self.index += 1

    def _extend(self, setting: Setting, texts: tuple[str, ...]) -> None:
        occurrences = self.result.occurrences
        for index, occurrence in enumerate(occurrences):
            if occurrence.setting is setting:
                occurrences[index] = Occurrence(setting, texts=occurrence.texts + texts)
                return

    def _short(self, item: str) -> None:
        letter, rest = item[1], item[2:]
        if letter == "h":
            self.result.help = True
            return
        setting = SHORTHANDS.get(letter)
        if setting is None:
            return self._stop(f"unknown shorthand flag: '{letter}' in {item}")
        following = self._next_item()
        if rest:
            self._record(setting, rest.removeprefix("="))
        elif following is not None:
            self._record(setting, following)
            self.index += 1
        else:
            return self._stop(f"flag needs an argument: '{letter}' in -{letter}")
        self.index += 1


def walk(argv: list[str]) -> ParsedArgv:
    return _Walker(argv).run()


def _convert(occurrence: Occurrence) -> Any:
    kind = occurrence.setting.kind
    try:
        if kind.is_list:
            return kind.parse_texts(occurrence.texts)
        return kind.parse_text(occurrence.text)
    except BadItem as error:
        item, reason = error.item, str(error)
    except ValueError as error:
        item, reason = occurrence.text, str(error)
    name = go_quote(option_name(occurrence.setting))
    raise ConfigError(f"invalid argument {go_quote(item)} for {name} flag: {reason}")


def convert_occurrences(parsed: ParsedArgv) -> dict[str, Any]:
    """Typed values by setting key, in argv order, so a repeated scalar keeps its last value."""
    return {occ.setting.key: _convert(occ) for occ in parsed.occurrences}
