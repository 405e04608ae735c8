"""The common chat and completion answers are written from precomputed parts; each must be
byte for byte the answer the general path builds, whatever the request id, model, finish or
usage."""

from __future__ import annotations

import asyncio
import json
from types import ModuleType
from typing import Any

import pytest

from tests.support.config import load
from tests.support.exchange import exchange
from vllm_sim.frontend import capabilities
from vllm_sim.frontend.endpoint import Endpoint
from vllm_sim.frontend.envelope import encode_json
from vllm_sim.protocols.openai import chat, completions
from vllm_sim.server.build import build_instance

Headers = list[tuple[bytes, bytes]]
Api = tuple[ModuleType, Endpoint[Any], dict[str, Any]]
HELLO = [{"role": "user", "content": "Hello there"}]
CHAT: Api = (
    chat,
    chat.ChatEndpoint("/v1/chat/completions", capabilities.CHAT),
    {"messages": HELLO},
)
COMPLETIONS: Api = (
    completions,
    completions.CompletionsEndpoint("/v1/completions", capabilities.COMPLETIONS),
    {"prompt": "Hello there"},
)
PLAIN: list[tuple[dict[str, Any], Headers]] = [
    ({"max_tokens": 5}, []),
    ({"max_tokens": 50}, []),  # finishes with "stop" (and its end-of-sequence step)
    ({"max_tokens": 40, "stop": ["a", "e"]}, []),  # a stop_reason
    ({"max_tokens": 40, "stop_token_ids": [1, 2]}, []),
    ({"max_tokens": 5, "seed": 7, "temperature": 0.5}, []),
    ({"max_tokens": 5}, [(b"x-request-id", b'id "quoted" \\ \xc3\xa9')]),
]


def answers(
    api: Api, argv: list[str], fields: dict[str, Any], headers: Headers, times: int = 1
) -> tuple[bytes | None, bytes]:
    """(the plain bytes the endpoint wrote, the general path's encoding) of the last of
    `times` identical requests."""
    module, endpoint, base = api
    app = build_instance(load(*argv), 8000).app
    seen: dict[str, Any] = {}
    plain = module._plain_completion

    def spy(call: Any) -> bytes | None:
        written: bytes | None = plain(call)
        seen["plain"] = written
        # The general answer of the same call, made now: once answered, the server lets
        # go of the request's sequences.
        with pytest.MonkeyPatch.context() as general_only:
            general_only.setattr(module, "_plain_completion", lambda call: None)
            seen["general"] = encode_json(endpoint.answer(call))
        return written

    body = json.dumps({**base, **fields}).encode()

    headers = [(b"content-type", b"application/json"), *headers]

    async def requests() -> None:
        for _ in range(times):
            await exchange(app, "POST", endpoint.path, body, headers)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "_plain_completion", spy)
        asyncio.run(requests())
    return seen["plain"], seen["general"]


@pytest.mark.parametrize("api", [CHAT, COMPLETIONS], ids=["chat", "completions"])
@pytest.mark.parametrize(("fields", "headers"), PLAIN)
def test_plain_answer_is_the_general_answer(
    api: Api, fields: dict[str, Any], headers: Headers
) -> None:
    plain, general = answers(api, ["--model", 'm "ü"'], fields, headers)
    assert plain is not None and plain == general


@pytest.mark.parametrize("api", [CHAT, COMPLETIONS], ids=["chat", "completions"])
def test_plain_answer_with_cached_prompt_details(api: Api) -> None:
    argv = ["--model", "m", "--enable-kvcache", "--enable-prompt-tokens-details"]
    argv += ["--block-size", "8"]
    long = {"messages": [{"role": "user", "content": "Hello there " * 20}], "max_tokens": 3}
    if api is COMPLETIONS:
        long = {"prompt": "Hello there " * 20, "max_tokens": 3}
    plain, general = answers(api, argv, long, [], times=2)
    assert plain is not None and plain == general
    assert b'"prompt_tokens_details":{"cached_tokens":' in plain


@pytest.mark.parametrize(
    ("api", "fields"),
    [
        (CHAT, {"max_tokens": 3, "logprobs": True}),
        (CHAT, {"max_tokens": 3, "n": 2}),
        (CHAT, {"max_tokens": 3, "return_token_ids": True}),
        (CHAT, {"max_tokens": 3, "prompt_logprobs": 1}),
        (CHAT, {"max_tokens": 3, "kv_transfer_params": {"do_remote_decode": True}}),
        (COMPLETIONS, {"max_tokens": 3, "logprobs": 0}),
        (COMPLETIONS, {"max_tokens": 3, "echo": True}),
        (COMPLETIONS, {"max_tokens": 3, "prompt": ["a", "b"]}),
        (COMPLETIONS, {"max_tokens": 3, "return_token_ids": True}),
        (COMPLETIONS, {"max_tokens": 3, "kv_transfer_params": {"do_remote_decode": True}}),
    ],
)
def test_other_answers_take_the_general_path(api: Api, fields: dict[str, Any]) -> None:
    plain, general = answers(api, ["--model", "m"], fields, [])
    assert plain is None and general.startswith(b'{"id":')
