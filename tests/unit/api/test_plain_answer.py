"""The common chat answer is written from precomputed parts; it must be byte for byte the
answer the general path builds, whatever the request id, model, finish or usage."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.support.config import load
from vllm_sim.api import chat
from vllm_sim.api.endpoint import answer_shape
from vllm_sim.http.messages import encode_json
from vllm_sim.server.build import build_instance

PLAIN = [
    ({"max_tokens": 5}, []),
    ({"max_tokens": 50}, []),  # finishes with "stop" (and its end-of-sequence step)
    ({"max_tokens": 40, "stop": ["a", "e"]}, []),  # a stop_reason
    ({"max_tokens": 40, "stop_token_ids": [1, 2]}, []),
    ({"max_tokens": 5, "seed": 7, "temperature": 0.5}, []),
    ({"max_tokens": 5}, [(b"x-request-id", b'id "quoted" \\ \xc3\xa9')]),
]


def answers(
    argv: list[str], fields: dict[str, Any], headers: list[tuple[bytes, bytes]], times: int = 1
) -> Any:
    """(the bytes the endpoint wrote, the general path's encoding) of the last of `times`
    identical requests."""
    app = build_instance(load(*argv), 8000).app
    seen: dict[str, Any] = {}
    plain = chat._plain_completion

    def spy(call: Any) -> bytes | None:
        seen["call"] = call
        seen["plain"] = plain(call)
        return seen["plain"]

    body = json.dumps({"messages": [{"role": "user", "content": "Hello there"}], **fields})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body.encode(), "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), *headers],
        "server": ("127.0.0.1", 8000),
    }

    async def requests() -> None:
        for _ in range(times):
            await app(scope, receive, send)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chat, "_plain_completion", spy)
        asyncio.run(requests())
    call = seen["call"]
    return seen["plain"], encode_json(chat._completion(call, answer_shape(call, "chatcmpl-")))


@pytest.mark.parametrize(("fields", "headers"), PLAIN)
def test_plain_answer_is_the_general_answer(
    fields: dict[str, Any], headers: list[tuple[bytes, bytes]]
) -> None:
    plain, general = answers(["--model", 'm "ü"'], fields, headers)
    assert plain is not None and plain == general


def test_plain_answer_with_cached_prompt_details() -> None:
    argv = ["--model", "m", "--enable-kvcache", "--enable-prompt-tokens-details"]
    argv += ["--block-size", "8"]
    long = {"messages": [{"role": "user", "content": "Hello there " * 20}], "max_tokens": 3}
    plain, general = answers(argv, long, [], times=2)
    assert plain == general and b'"prompt_tokens_details":{"cached_tokens":' in plain


@pytest.mark.parametrize(
    "fields",
    [
        {"max_tokens": 3, "logprobs": True},
        {"max_tokens": 3, "n": 2},
        {"max_tokens": 3, "return_token_ids": True},
        {"max_tokens": 3, "prompt_logprobs": 1},
        {"max_tokens": 3, "kv_transfer_params": {"do_remote_decode": True}},
    ],
)
def test_other_answers_take_the_general_path(fields: dict[str, Any]) -> None:
    assert answers(["--model", "m"], fields, [])[0] is None
