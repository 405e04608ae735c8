"""Compares the oracle's and the simulator's answers to one case, content aside.

Pure functions: an Exchange is what came back (status, headers, body bytes), a Difference
one way the two answers disagree. Aspects: `transport`, `status`, `header`, `body-kind`,
`body` (JSON shape), `body-text`, `message` (error text), `framing`, `stream-chunk` (a chunk
kind's shape), `stream-count` (how many chunks of a kind), `stream-events` (a chunk kind one
side sends and the other does not), `stream-order` (how the chunks of several choices
interleave).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from conformance.case import Case
from conformance.shape import ShapeRules, diff_shapes, render_kinds, shape_of
from conformance.sse import Event, Framing, Run, parse_sse, runs, summary

MESSAGE_KEYS = frozenset({"message", "detail"})


@dataclass(frozen=True)
class Exchange:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased
    body: bytes = b""
    error: str | None = None  # the request could not be made or read

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class Difference:
    case: str
    aspect: str
    path: str
    oracle: str
    sim: str

    def as_dict(self) -> dict[str, str]:
        return {
            "case": self.case,
            "aspect": self.aspect,
            "path": self.path,
            "oracle": self.oracle,
            "sim": self.sim,
        }


def rules_for(case: Case) -> ShapeRules:
    return ShapeRules(ignore_values=case.ignore_values, exact_values=case.exact_values)


def compare(case: Case, oracle: Exchange, sim: Exchange) -> list[Difference]:
    if oracle.error or sim.error:
        return [Difference(case.name, "transport", "", oracle.error or "ok", sim.error or "ok")]
    found: list[Difference] = []
    if oracle.status != sim.status:
        found.append(Difference(case.name, "status", "", str(oracle.status), str(sim.status)))
    if (oracle.status >= 400) != (sim.status >= 400):
        # An answer against an error: their keys have nothing in common, so the error's
        # text says more than a list of every key one side lacks.
        found.append(Difference(case.name, "message", "", error_text(oracle), error_text(sim)))
        return found
    found.extend(compare_headers(case, oracle, sim))
    found.extend(compare_bodies(case, oracle, sim))
    return _unique(found)


def error_text(exchange: Exchange) -> str:
    if exchange.status < 400:
        return "(no error)"
    try:
        texts = messages(json.loads(exchange.body))
    except ValueError:
        return _clip(exchange.body)
    return " / ".join(texts.values()) or _clip(exchange.body)


def _unique(found: list[Difference]) -> list[Difference]:
    return list(dict.fromkeys(found))


def normalize_content_type(value: str | None) -> str:
    if value is None:
        return "absent"
    return ";".join(part.strip() for part in value.lower().split(";"))


def compare_headers(case: Case, oracle: Exchange, sim: Exchange) -> Iterator[Difference]:
    left = normalize_content_type(oracle.header("content-type"))
    right = normalize_content_type(sim.header("content-type"))
    if left != right:
        yield Difference(case.name, "header", "content-type", left, right)
    for name in case.compare_headers:
        left = oracle.header(name) or "absent"
        right = sim.header(name) or "absent"
        if left != right:
            yield Difference(case.name, "header", name.lower(), left, right)


def body_kind(exchange: Exchange) -> str:
    if normalize_content_type(exchange.header("content-type")).startswith("text/event-stream"):
        return "sse"
    if not exchange.body:
        return "empty"
    try:
        json.loads(exchange.body)
    except ValueError:
        return "text"
    return "json"


def compare_bodies(case: Case, oracle: Exchange, sim: Exchange) -> Iterator[Difference]:
    kinds = body_kind(oracle), body_kind(sim)
    if kinds[0] != kinds[1]:
        yield Difference(case.name, "body-kind", "", kinds[0], kinds[1])
    elif kinds[0] == "json":
        yield from compare_json(case, json.loads(oracle.body), json.loads(sim.body))
    elif kinds[0] == "text" and oracle.body != sim.body:
        yield Difference(case.name, "body-text", "", _clip(oracle.body), _clip(sim.body))
    elif kinds[0] == "sse":
        yield from compare_streams(case, oracle.body, sim.body)


def _clip(body: bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "..."


def compare_json(case: Case, oracle: Any, sim: Any) -> Iterator[Difference]:
    rules = rules_for(case)
    for diff in diff_shapes(shape_of(oracle, rules), shape_of(sim, rules)):
        yield Difference(
            case.name, "body", diff.path, render_kinds(diff.oracle), render_kinds(diff.sim)
        )
    yield from compare_messages(case, oracle, sim)


def messages(document: Any, path: str = "") -> dict[str, str]:
    """The error texts of a document: string values under `message` or `detail` keys."""
    found: dict[str, str] = {}
    if isinstance(document, dict):
        for key, value in document.items():
            here = f"{path}.{key}" if path else str(key)
            if key in MESSAGE_KEYS and isinstance(value, str):
                found[here] = value
            else:
                found.update(messages(value, here))
    return found


def compare_messages(case: Case, oracle: Any, sim: Any) -> Iterator[Difference]:
    if case.message == "skip":
        return
    left, right = messages(oracle), messages(sim)
    for path in sorted(set(left) & set(right)):
        a, b = left[path], right[path]
        if case.message == "masked":
            a, b = mask_digits(a), mask_digits(b)
        if a != b:
            yield Difference(case.name, "message", path, a, b)


def mask_digits(text: str) -> str:
    return re.sub(r"\d+", "N", text)


def compare_streams(case: Case, oracle: bytes, sim: bytes) -> Iterator[Difference]:
    rules = rules_for(case)
    left_events, left_framing = parse_sse(oracle)
    right_events, right_framing = parse_sse(sim)
    yield from compare_framing(case, left_framing, right_framing)
    left, right = by_choice(left_events), by_choice(right_events)
    for key in sorted(set(left) | set(right), key=lambda k: (k is None, k or 0)):
        yield from compare_runs(
            case, runs(left.get(key, []), rules), runs(right.get(key, []), rules)
        )
    yield from compare_choice_order(case, left_events, right_events)


def by_choice(events: list[Event]) -> dict[int | None, list[Event]]:
    """With several choices, each choice's chunks apart (and, under None, those about no one
    choice, such as the usage chunk), so that each choice's sequence is compared on its own
    and how they interleave is compared once; with one choice, the whole stream in order."""
    split: dict[int | None, list[Event]] = {}
    for event in events:
        indices = [i for i, _ in choice_order([event])]
        split.setdefault(indices[0] if len(indices) == 1 else None, []).append(event)
    if len([k for k in split if k is not None]) < 2:
        return {0: events}
    return split


def choice_order(events: list[Event]) -> list[tuple[int, int]]:
    """The choice index each chunk is about, as runs of (index, count); chunks without
    choices (the usage chunk) are left out."""
    order: list[tuple[int, int]] = []
    for event in events:
        try:
            choices = json.loads(event.data).get("choices")
        except (ValueError, AttributeError):
            continue
        for choice in choices if isinstance(choices, list) else []:
            index = choice.get("index") if isinstance(choice, dict) else None
            if not isinstance(index, int):
                continue
            if order and order[-1][0] == index:
                order[-1] = (index, order[-1][1] + 1)
            else:
                order.append((index, 1))
    return order


def render_order(order: list[tuple[int, int]]) -> str:
    return " ".join(str(i) if n == 1 else f"{i}x{n}" for i, n in order) or "none"


def compare_choice_order(case: Case, oracle: list[Event], sim: list[Event]) -> Iterator[Difference]:
    """With several choices, whether their chunks interleave (choice 0, 1, 0, 1, ...) or come
    one choice after the other. Only that is compared: exactly how vLLM interleaves depends
    on which engine steps its API server catches."""
    left, right = choice_order(oracle), choice_order(sim)
    if len({i for i, _ in left + right}) < 2:
        return
    if interleaving(left) != interleaving(right):
        yield Difference(
            case.name,
            "stream-order",
            "choices[].index",
            f"{interleaving(left)}: {render_order(left)}",
            f"{interleaving(right)}: {render_order(right)}",
        )


def interleaving(order: list[tuple[int, int]]) -> str:
    return "interleaved" if len(order) > len({i for i, _ in order}) else "one after another"


def compare_framing(case: Case, oracle: Framing, sim: Framing) -> Iterator[Difference]:
    for name in ("line_end", "field_prefixes", "terminator", "ends_with_blank_line"):
        left, right = getattr(oracle, name), getattr(sim, name)
        if left != right:
            yield Difference(case.name, "framing", name, repr(left), repr(right))


def compare_runs(case: Case, oracle: list[Run], sim: list[Run]) -> Iterator[Difference]:
    """Aligns the two sequences of chunk kinds; kinds that differ in place are compared key
    by key, kinds with no counterpart are reported whole."""
    matcher = difflib.SequenceMatcher(
        None, [r.shape for r in oracle], [r.shape for r in sim], autojunk=False
    )
    for _tag, i1, i2, j1, j2 in matcher.get_opcodes():
        pairs = list(zip(oracle[i1:i2], sim[j1:j2], strict=False))
        for left, right in pairs:
            yield from compare_pair(case, left, right)
        for extra in oracle[i1 + len(pairs) : i2]:
            yield Difference(
                case.name, "stream-events", summary(extra.as_shape()), f"x{extra.count}", "absent"
            )
        for extra in sim[j1 + len(pairs) : j2]:
            yield Difference(
                case.name, "stream-events", summary(extra.as_shape()), "absent", f"x{extra.count}"
            )


def compare_pair(case: Case, oracle: Run, sim: Run) -> Iterator[Difference]:
    left, right = oracle.as_shape(), sim.as_shape()
    for diff in diff_shapes(left, right):
        yield Difference(
            case.name, "stream-chunk", diff.path, render_kinds(diff.oracle), render_kinds(diff.sim)
        )
    if case.counts and oracle.count != sim.count:
        yield Difference(
            case.name, "stream-count", summary(left), str(oracle.count), str(sim.count)
        )
