"""Fuzzes vLLM's own routes: /tokenize, /detokenize, the two render routes, /v1/embeddings
and /inference/v1/generate (token ids in, token ids out, streamed or not)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.fuzz import (
    EDGE_INTS,
    JUNK,
    LARGE_COUNTS,
    counts,
    flags,
    pick,
    route_settings,
)
from tests.support.fuzz_bodies import (
    chat_messages,
    chat_tools,
    completion_prompts,
    kv_transfer,
    models,
    optional,
    sampling_fields,
    sampling_mutations,
    short_tokens,
    stream_options,
    text,
    token_ids,
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

TOKENIZE = Route("/tokenize")
DETOKENIZE = Route("/detokenize")
RENDER_COMPLETION = Route("/v1/completions/render")
RENDER_CHAT = Route("/v1/chat/completions/render")
EMBEDDINGS = Route("/v1/embeddings")
GENERATE = Route("/inference/v1/generate", framing="openai")

target = target_fixture(["--max-loras", "2"])

model_names = st.sampled_from(["", "nope"]) | models | JUNK
edge_ids = st.lists(st.sampled_from(EDGE_INTS) | st.integers(0, 100), max_size=6)

tokenize_bodies = st.one_of(
    st.fixed_dictionaries({"prompt": text}, optional={"model": models}),
    st.fixed_dictionaries({"messages": chat_messages()}, optional={"model": models}),
).flatmap(
    lambda body: st.fixed_dictionaries(
        {k: st.just(v) for k, v in body.items()},
        optional={"return_token_strs": st.booleans(), "add_special_tokens": st.booleans()},
    )
)
TOKENIZE_FIELDS = {
    "prompt": JUNK,
    "messages": JUNK | st.just([]) | chat_messages(),
    "model": model_names,
    "return_token_strs": flags(),
}

detokenize_bodies = st.fixed_dictionaries({"tokens": token_ids}, optional={"model": models})
DETOKENIZE_FIELDS = {"tokens": JUNK | edge_ids, "model": model_names}

render_completion_bodies = st.fixed_dictionaries(
    {"prompt": completion_prompts()}, optional={"model": models}
)
RENDER_COMPLETION_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "prompt": JUNK | st.just([]),
    "model": model_names,
}

render_chat_bodies = st.fixed_dictionaries(
    {"messages": chat_messages()}, optional={"model": models, "tools": chat_tools()}
)
RENDER_CHAT_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "messages": JUNK | st.just([]),
    "model": model_names,
}

# Inputs at the size limits: a response of about a million values is legal.
MANY_INPUTS = (["word"] * 1024, [[1, 2, 3]] * 1024, list(range(5000)), ["a b c " * 500] * 16)
embedding_inputs = st.one_of(
    text.filter(bool),
    st.lists(text.filter(bool), min_size=1, max_size=3),
    token_ids,
    st.lists(token_ids, min_size=1, max_size=3),
)
embedding_bodies = st.fixed_dictionaries(
    {"input": embedding_inputs},
    optional={
        "model": models,
        "dimensions": st.integers(1, 64),
        "encoding_format": st.sampled_from(["float", "base64"]),
        "user": text,
    },
)
EMBEDDING_FIELDS = {
    "input": JUNK | pick(MANY_INPUTS) | st.lists(edge_ids, max_size=3),
    "model": model_names,
    "dimensions": counts(1, 8, 384, 65536, 65537),
    "encoding_format": JUNK | st.sampled_from(["float", "base64", "FLOAT", "binary", ""]),
}


GENERATE_SAMPLING: dict[str, st.SearchStrategy[Any]] = {
    "extra_args": optional(kv_transfer_params=kv_transfer()),
    **sampling_fields(),
}
generate_params: st.SearchStrategy[Any] = st.fixed_dictionaries(
    {"max_tokens": short_tokens}, optional=GENERATE_SAMPLING
)
generate_bodies = st.fixed_dictionaries(
    {"token_ids": token_ids, "sampling_params": generate_params},
    optional={
        "model": models,
        "stream": st.booleans(),
        "stream_options": stream_options(),
        "ignore_eos": st.booleans(),
        "kv_transfer_params": kv_transfer(),
        "features": optional(mm_hashes=st.dictionaries(text, st.lists(text, max_size=2))),
    },
)
GENERATE_FIELDS = {
    "token_ids": JUNK | edge_ids | st.just([]),
    "sampling_params": JUNK
    | st.fixed_dictionaries(
        {"max_tokens": counts(1, 4) | st.sampled_from(LARGE_COUNTS)},
        optional=sampling_mutations(JUNK, counts(0, 1, 2, -1)),
    ),
    "model": model_names,
    "stream": flags(),
    "stream_options": JUNK,
    "ignore_eos": flags(),
    "kv_transfer_params": JUNK,
    "features": JUNK,
}


def _run(target: Target, route: Route, probe: Probe) -> None:
    exchange(target, route, probe)


@route_settings()
@given(probe=requests(TOKENIZE.path, tokenize_bodies, TOKENIZE_FIELDS))
def test_tokenize(target: Target, probe: Probe) -> None:
    _run(target, TOKENIZE, probe)


@route_settings()
@given(probe=requests(DETOKENIZE.path, detokenize_bodies, DETOKENIZE_FIELDS))
def test_detokenize(target: Target, probe: Probe) -> None:
    _run(target, DETOKENIZE, probe)


@route_settings()
@given(probe=requests(RENDER_COMPLETION.path, render_completion_bodies, RENDER_COMPLETION_FIELDS))
def test_render_completion(target: Target, probe: Probe) -> None:
    _run(target, RENDER_COMPLETION, probe)


@route_settings()
@given(probe=requests(RENDER_CHAT.path, render_chat_bodies, RENDER_CHAT_FIELDS))
def test_render_chat(target: Target, probe: Probe) -> None:
    _run(target, RENDER_CHAT, probe)


@route_settings()
@given(probe=requests(EMBEDDINGS.path, embedding_bodies, EMBEDDING_FIELDS))
def test_embeddings(target: Target, probe: Probe) -> None:
    _run(target, EMBEDDINGS, probe)


@route_settings()
@given(probe=requests(GENERATE.path, generate_bodies, GENERATE_FIELDS))
def test_generate(target: Target, probe: Probe) -> None:
    _run(target, GENERATE, probe)


def test_still_serving(target: Target) -> None:
    body: dict[str, Any] = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}}
    assert_still_serving(target, GENERATE.path, body)
