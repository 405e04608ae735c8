"""Fuzzes the OpenAI generation routes: /v1/chat/completions, /v1/completions, /v1/responses,
and SageMaker's /invocations, which dispatches to the first two.

Bodies are valid ones with a few places broken, JSON Schemas drawn for response_format,
tools[].function.parameters and text.format, streams read to their end.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.fuzz import EDGE_FLOATS, JUNK, counts, flags, route_settings
from tests.support.fuzz_bodies import (
    chat_messages,
    chat_sampling_fields,
    chat_tools,
    completion_prompts,
    flat_tools,
    kv_transfer,
    models,
    openai_tool_choice,
    optional,
    request_sampling_fields,
    response_formats,
    sampling_mutations,
    short_tokens,
    stream_options,
    text,
)
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

CHAT = Route("/v1/chat/completions", framing="openai")
COMPLETIONS = Route("/v1/completions", framing="openai")
# An unknown previous_response_id is vLLM's 404 of type invalid_request_error.
RESPONSES = Route("/v1/responses", framing="responses", error_types={404: "invalid_request_error"})
INVOCATIONS = Route("/invocations", framing="openai")

target = target_fixture()

model_names = st.sampled_from(["", "nope", "test-model ", "TEST-MODEL"]) | JUNK
thresholds = st.sampled_from(EDGE_FLOATS) | st.floats() | JUNK
# The fields every OpenAI-style body shares, with the values that break them.
SHARED_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": model_names,
    "stream": flags(),
    "stream_options": JUNK | stream_options(),
    "n": counts(1, 2),
    "max_tokens": counts(1, 4),
    "ignore_eos": flags(),
    "cache_hit_threshold": thresholds,
    "kv_transfer_params": JUNK | kv_transfer(),
    "temperature": thresholds,
    **sampling_mutations(JUNK, counts(0, 1, 2, -1)),
}

chat_bodies = st.fixed_dictionaries(
    {"messages": chat_messages(), "max_tokens": short_tokens},
    optional={
        "model": models,
        "stream": st.booleans(),
        "stream_options": stream_options(),
        "n": st.integers(1, 3),
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(0, 5),
        "tools": chat_tools(),
        "tool_choice": openai_tool_choice(),
        "response_format": response_formats(),
        "ignore_eos": st.booleans(),
        "cache_hit_threshold": st.floats(0, 1),
        "kv_transfer_params": kv_transfer(),
        "max_completion_tokens": short_tokens,
        "user": text,
        **chat_sampling_fields(),
    },
)
CHAT_FIELDS = {
    **SHARED_FIELDS,
    "messages": JUNK | st.just([]),
    "max_completion_tokens": counts(1, 4),
    "top_logprobs": counts(0, 5, 20, 21),
    "logprobs": flags(),
    "tools": JUNK | st.just([]) | chat_tools(),
    "tool_choice": JUNK | openai_tool_choice(),
    "response_format": JUNK | response_formats(),
}

completion_bodies = st.fixed_dictionaries(
    {"prompt": completion_prompts(), "max_tokens": short_tokens},
    optional={
        "model": models,
        "stream": st.booleans(),
        "stream_options": stream_options(),
        "n": st.integers(1, 3),
        "logprobs": st.integers(0, 5),
        "echo": st.booleans(),
        "ignore_eos": st.booleans(),
        "cache_hit_threshold": st.floats(0, 1),
        "kv_transfer_params": kv_transfer(),
        "prompt_embeds": st.just([]),
        **request_sampling_fields(),
    },
)
COMPLETION_FIELDS = {
    **SHARED_FIELDS,
    "prompt": JUNK | completion_prompts(),
    "logprobs": counts(0, 5, 20, 21),
    "echo": flags(),
    "suffix": JUNK | text,  # any suffix is refused: no fill-in-the-middle rendering
    "prompt_embeds": JUNK | text,
}


def _response_items() -> st.SearchStrategy[list[dict[str, Any]]]:
    part = st.one_of(
        st.fixed_dictionaries({"type": st.just("input_text"), "text": text}),
        st.fixed_dictionaries(
            {"type": st.just("input_image"), "image_url": st.just("https://example.invalid/a.png")}
        ),
        st.fixed_dictionaries(
            {"type": st.just("input_audio"), "data": st.just("AAAA"), "format": st.just("wav")}
        ),
    )
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "developer"])},
        optional={"type": st.just("message"), "content": text | st.lists(part, max_size=3)},
    )
    call = st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": st.just("call_1"),
            "name": st.just("f"),
            "arguments": st.sampled_from(["{}", '{"a": 1}']),
        }
    )
    output = st.fixed_dictionaries(
        {
            "type": st.just("function_call_output"),
            "call_id": st.just("call_1"),
            "output": text | st.lists(part, max_size=2),
        }
    )
    return st.lists(st.one_of(message, message, call, output), min_size=1, max_size=4)


def _text_formats() -> st.SearchStrategy[dict[str, Any]]:
    schema = st.fixed_dictionaries(
        {"type": st.just("json_schema"), "name": st.just("out"), "schema": ANY_SCHEMAS},
        optional={"strict": st.booleans()},
    )
    plain = st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object"])})
    return st.fixed_dictionaries({"format": st.one_of(schema, schema, plain)})


response_bodies = st.fixed_dictionaries(
    {"input": text | _response_items(), "max_output_tokens": short_tokens},
    optional={
        "model": models,
        "stream": st.booleans(),
        "instructions": text,
        "tools": flat_tools(),
        "tool_choice": openai_tool_choice(),
        "text": _text_formats(),
        "include": st.just(["message.output_text.logprobs"]),
        "top_logprobs": st.integers(0, 5),
        "ignore_eos": st.booleans(),
        "metadata": optional(k=text),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "store": st.booleans(),
        "previous_response_id": st.sampled_from(["resp_missing", ""]),
        "parallel_tool_calls": st.booleans(),
        "max_tool_calls": st.integers(0, 3),
        "reasoning": optional(effort=st.sampled_from(["low", "high"])),
        "service_tier": st.sampled_from(["auto", "default", "flex", "scale", "priority"]),
        "truncation": st.sampled_from(["auto", "disabled"]),
        "user": text,
    },
)
RESPONSE_FIELDS = {
    "model": model_names,
    "stream": flags(),
    "input": JUNK | _response_items(),
    "max_output_tokens": counts(1, 4),
    "top_logprobs": counts(0, 5, 20, 21),
    "include": JUNK | st.lists(st.text(max_size=30), max_size=2),
    "tools": JUNK | st.just([]) | flat_tools(),
    "tool_choice": JUNK | openai_tool_choice(),
    "text": JUNK | _text_formats(),
    "instructions": JUNK,
    "ignore_eos": flags(),
    "temperature": thresholds,
    "store": flags(),
    "background": flags(),
    "previous_response_id": JUNK,
    "prompt": JUNK,
    "service_tier": JUNK,
    "truncation": JUNK,
    "max_tool_calls": JUNK,
}
# SageMaker's entry point sees either shape, broken either way.
invocation_bodies = chat_bodies | completion_bodies
INVOCATION_FIELDS = {**COMPLETION_FIELDS, **CHAT_FIELDS, "inputs": JUNK}


@route_settings()
@given(probe=requests(CHAT.path, chat_bodies, CHAT_FIELDS))
def test_chat_completions(target: Target, probe: Probe) -> None:
    exchange(target, CHAT, probe)


@route_settings()
@given(probe=requests(COMPLETIONS.path, completion_bodies, COMPLETION_FIELDS))
def test_completions(target: Target, probe: Probe) -> None:
    exchange(target, COMPLETIONS, probe)


@route_settings()
@given(probe=requests(RESPONSES.path, response_bodies, RESPONSE_FIELDS))
def test_responses(target: Target, probe: Probe) -> None:
    exchange(target, RESPONSES, probe)


@route_settings()
@given(probe=requests(INVOCATIONS.path, invocation_bodies, INVOCATION_FIELDS))
def test_invocations(target: Target, probe: Probe) -> None:
    exchange(target, INVOCATIONS, probe)


def test_still_serving(target: Target) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert_still_serving(target, CHAT.path, body)
