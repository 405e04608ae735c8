"""Server-sent events as the wire carries them, and a stream's structure, content aside.

A stream's structure is its framing (line prefixes, line ends, the terminator) and the
sequence of its events' shapes, with runs of equal shapes collapsed to (shape, count): one
chunk per generated token shows as a run whose count is the token count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from conformance.shape import Shape, ShapeRules, shape_of

ShapeKey = tuple[tuple[str, frozenset[str]], ...]


@dataclass(frozen=True)
class Event:
    """One event: its `event:` name (None when the stream names none) and its data text."""

    name: str | None
    data: str


@dataclass(frozen=True)
class Framing:
    """How the bytes are laid out, apart from what the events say."""

    line_end: str  # "\\n", "\\r\\n" or "mixed"
    field_prefixes: tuple[str, ...]  # e.g. ("data: ", "event: "), in order of first use
    terminator: str | None  # the last event's data when it is not JSON (`[DONE]`), else None
    ends_with_blank_line: bool


def parse_sse(body: bytes) -> tuple[list[Event], Framing]:
    text = body.decode("utf-8", errors="replace")
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    line_end = "\\r\\n" if crlf and not lf else ("mixed" if crlf else "\\n")
    events: list[Event] = []
    prefixes: dict[str, None] = {}
    name: str | None = None
    data: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line:
            if data or name is not None:
                events.append(Event(name, "\n".join(data)))
            name, data = None, []
            continue
        field, sep, value = line.partition(":")
        prefixes[field + sep + (" " if value.startswith(" ") else "")] = None
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    if data or name is not None:
        events.append(Event(name, "\n".join(data)))
    terminator = events[-1].data if events and not _is_json(events[-1].data) else None
    ends = text.endswith("\n\n") or text.endswith("\r\n\r\n")
    return events, Framing(line_end, tuple(prefixes), terminator, ends)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def event_shape(event: Event, rules: ShapeRules) -> Shape:
    """An event's shape: its data's JSON shape, with its name as the `event` key."""
    try:
        document: Any = json.loads(event.data)
    except ValueError:
        # Not JSON (the `[DONE]` terminator): the text itself is the shape.
        return {"<text>": frozenset({f"str={json.dumps(event.data)}"})}
    shape = shape_of(document, rules)
    if event.name is not None:
        shape["<event>"] = frozenset({f"str={json.dumps(event.name)}"})
    return shape


def shape_key(shape: Shape) -> ShapeKey:
    return tuple(sorted(shape.items()))


@dataclass(frozen=True)
class Run:
    shape: ShapeKey
    count: int

    def as_shape(self) -> Shape:
        return dict(self.shape)


def runs(events: list[Event], rules: ShapeRules) -> list[Run]:
    """Consecutive events of one shape, collapsed."""
    out: list[Run] = []
    for event in events:
        key = shape_key(event_shape(event, rules))
        if out and out[-1].shape == key:
            out[-1] = Run(key, out[-1].count + 1)
        else:
            out.append(Run(key, 1))
    return out


def summary(shape: Shape, limit: int | None = 6) -> str:
    """A chunk kind named for a reader: its event name, then its leaf paths, with their
    compared values or `=null`."""
    parts: list[str] = []
    name = shape.get("<event>")
    if name:
        parts.append(next(iter(name)).removeprefix("str="))
    leaves = [
        (path, kinds)
        for path, kinds in sorted(shape.items())
        if path not in ("$", "<event>") and not kinds & {"object", "list"}
    ]
    for path, kinds in leaves[:limit]:
        values = [k.split("=", 1)[1] for k in sorted(kinds) if "=" in k]
        values += ["null"] if "null" in kinds else []
        parts.append(f"{path}={'|'.join(values)}" if values else path)
    if limit is not None and len(leaves) > limit:
        parts.append(f"+{len(leaves) - limit}")
    return ", ".join(parts) or "{}"
