"""Fuzzes /v1/messages (Anthropic) and /v1/messages/count_tokens: errors in Anthropic's
envelope, streams that end with message_stop or an error event, and tools[].input_schema
drawn from every schema keyword.

The server skips tool validation, so that every drawn input_schema reaches the value
generator; the whitelist itself is fuzzed through the OpenAI routes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.fuzz import JUNK, counts, flags, route_settings
from tests.support.fuzz_bodies import MODEL, models, optional, short_tokens, text
from tests.support.fuzz_harness import (
    Probe,
    Route,
    Target,
    assert_still_serving,
    exchange,
    requests,
    target_fixture,
)
from tests.support.fuzz_schemas import ANY_SCHEMAS

MESSAGES = Route("/v1/messages", envelope="anthropic", framing="anthropic")
COUNT_TOKENS = Route("/v1/messages/count_tokens", envelope="anthropic")

target = target_fixture(["--skip-tool-validation"])


def _blocks() -> st.SearchStrategy[dict[str, Any]]:
    text_block = st.fixed_dictionaries({"type": st.just("text"), "text": text})
    source = st.one_of(
        st.fixed_dictionaries(
            {
                "type": st.just("base64"),
                "media_type": st.sampled_from(["image/png", "image/jpeg", ""]),
                "data": st.sampled_from(["iVBORw0KGgo=", ""]),
            }
        ),
        st.fixed_dictionaries(
            {"type": st.just("url"), "url": st.just("https://example.invalid/a.png")}
        ),
    )
    return st.one_of(
        text_block,
        st.fixed_dictionaries({"type": st.just("image"), "source": source}),
        st.fixed_dictionaries(
            {
                "type": st.just("tool_use"),
                "id": st.just("toolu_1"),
                "name": st.sampled_from(["f", "g"]),
                "input": optional(a=text, b=st.integers()),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("tool_result"),
                "tool_use_id": st.just("toolu_1"),
                "content": text | st.lists(text_block, max_size=2),
            },
            optional={"is_error": st.booleans()},
        ),
        st.fixed_dictionaries({"type": st.just("thinking"), "thinking": text}),
    )


def _messages() -> st.SearchStrategy[list[dict[str, Any]]]:
    content = text.filter(bool) | st.lists(_blocks(), min_size=1, max_size=3)
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": content}
    )
    last = st.fixed_dictionaries({"role": st.just("user"), "content": content})
    return st.tuples(st.lists(message, max_size=3), last).map(lambda t: [*t[0], t[1]])


def _tools() -> st.SearchStrategy[list[dict[str, Any]]]:
    tool = st.fixed_dictionaries(
        {"name": st.sampled_from(["f", "g"]), "input_schema": ANY_SCHEMAS},
        optional={"description": text},
    )
    return st.lists(tool, min_size=1, max_size=3)


tool_choices = st.fixed_dictionaries(
    {"type": st.sampled_from(["auto", "any", "none"])}
) | st.fixed_dictionaries({"type": st.just("tool"), "name": st.sampled_from(["f", "missing"])})

bodies = st.fixed_dictionaries(
    {"model": st.just(MODEL), "max_tokens": short_tokens, "messages": _messages()},
    optional={
        "system": text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text})),
        "stream": st.booleans(),
        "tools": _tools(),
        "tool_choice": tool_choices,
        "ignore_eos": st.booleans(),
        "temperature": st.floats(0, 1),
        "top_k": st.integers(0, 10),
        "stop_sequences": st.lists(text, max_size=2),
        "metadata": optional(user_id=text),
        "thinking": st.just({"type": "enabled", "budget_tokens": 1024}),
    },
)
FIELDS = {
    "model": st.sampled_from(["", "nope", "claude-3"]) | models | JUNK,
    "max_tokens": counts(1, 4),
    "messages": JUNK | st.just([]) | _messages(),
    "system": JUNK,
    "stream": flags(),
    "tools": JUNK | st.just([]) | _tools(),
    "tool_choice": JUNK | tool_choices,
    "ignore_eos": flags(),
    "temperature": JUNK,
}


# count_tokens takes the conversation without the generation knobs.
count_bodies = st.fixed_dictionaries(
    {"model": st.just(MODEL), "messages": _messages()},
    optional={
        "system": text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text})),
        "tools": _tools(),
        "tool_choice": tool_choices,
    },
)
COUNT_FIELDS = {key: FIELDS[key] for key in ("model", "messages", "system", "tools")}


@route_settings()
@given(probe=requests(MESSAGES.path, bodies, FIELDS))
def test_messages(target: Target, probe: Probe) -> None:
    exchange(target, MESSAGES, probe)


@route_settings()
@given(probe=requests(COUNT_TOKENS.path, count_bodies, COUNT_FIELDS))
def test_count_tokens(target: Target, probe: Probe) -> None:
    exchange(target, COUNT_TOKENS, probe)


def test_still_serving(target: Target) -> None:
    body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    assert_still_serving(target, MESSAGES.path, body)
