"""Non-streamed answers carry every key vLLM sends, with vLLM's defaults, so that raw-JSON
clients written against vLLM (`choice["stop_reason"]`, `usage["prompt_tokens_details"]`)
work unchanged."""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai

from tests.support.fixtures import http_fixture, openai_fixture, server_fixture
from tests.support.http import CHAT, COMPLETIONS, json_ok, post

FINGERPRINT_RE = r"vllm-0\.32\.0-[0-9a-f]{8}"
USAGE_KEYS = {
    "prompt_tokens",
    "total_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
}
CHAT_TOP = {"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint"}
CHAT_TOP |= {"usage", "prompt_logprobs", "prompt_token_ids", "prompt_text"}
CHAT_TOP |= {"kv_transfer_params", "ec_transfer_params", "metrics"}
COMPLETION_TOP = {"id", "object", "created", "model", "choices", "service_tier", "usage"}
COMPLETION_TOP |= {"system_fingerprint", "kv_transfer_params", "ec_transfer_params", "metrics"}

keyed = server_fixture()
client = http_fixture("keyed")
sdk = openai_fixture("keyed")
cached = server_fixture(
    ["--enable-kvcache", "--enable-prompt-tokens-details"], env={"POD_IP": "127.0.0.1"}
)
cached_client = http_fixture("cached")


def _chat(client: httpx.Client, **extra: Any) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": "Hello there"}], **extra}
    return json_ok(post(client, CHAT, body))


def test_a_chat_answer_has_vllms_keys_and_defaults(client: httpx.Client) -> None:
    answer = _chat(client, max_tokens=3)
    assert set(answer) == CHAT_TOP
    nulls = ("service_tier", "prompt_logprobs", "prompt_token_ids", "prompt_text")
    assert all(answer[key] is None for key in nulls)
    assert all(answer[key] is None for key in ("kv_transfer_params", "ec_transfer_params"))
    assert answer["metrics"] is None
    assert re.fullmatch(FINGERPRINT_RE, answer["system_fingerprint"])
    (choice,) = answer["choices"]
    assert set(choice) == {"index", "message", "logprobs", "finish_reason", "stop_reason"} | {
        "token_ids",
        "routed_experts",
    }
    assert (choice["stop_reason"], choice["token_ids"], choice["routed_experts"]) == (None,) * 3
    message = choice["message"]
    assert set(message) == {"role", "content", "refusal", "annotations", "audio"} | {
        "function_call",
        "reasoning",
    }
    assert [message[k] for k in ("refusal", "annotations", "audio", "function_call")] == [None] * 4
    assert message["reasoning"] is None


def test_usage_details_are_null_by_default(client: httpx.Client) -> None:
    usage = _chat(client, max_tokens=3)["usage"]
    assert set(usage) == USAGE_KEYS
    assert usage["prompt_tokens_details"] is None
    assert usage["completion_tokens_details"] is None
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_a_completion_answer_has_vllms_keys(client: httpx.Client) -> None:
    answer = json_ok(post(client, COMPLETIONS, {"prompt": "Hello", "max_tokens": 2}))
    assert set(answer) == COMPLETION_TOP
    assert re.fullmatch(FINGERPRINT_RE, answer["system_fingerprint"])
    (choice,) = answer["choices"]
    keys = {"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids"}
    assert set(choice) == keys | {"prompt_logprobs", "prompt_token_ids", "routed_experts"}
    assert set(answer["usage"]) == USAGE_KEYS


def test_the_fingerprint_is_the_same_for_every_answer(client: httpx.Client) -> None:
    prints = {_chat(client, max_tokens=1)["system_fingerprint"] for _ in range(3)}
    assert len(prints) == 1


def test_return_token_ids_lists_the_prompt_and_output_ids(client: httpx.Client) -> None:
    answer = _chat(client, max_tokens=4, ignore_eos=True, return_token_ids=True)
    ids = answer["choices"][0]["token_ids"]
    assert len(ids) == answer["usage"]["completion_tokens"] == 4
    assert len(answer["prompt_token_ids"]) == answer["usage"]["prompt_tokens"]
    completion = json_ok(
        post(client, COMPLETIONS, {"prompt": "a b c", "max_tokens": 2, "return_token_ids": True})
    )
    choice = completion["choices"][0]
    assert (
        choice["prompt_token_ids"]
        == json_ok(post(client, "/tokenize", {"prompt": "a b c"}))["tokens"]
    )
    assert len(choice["token_ids"]) == completion["usage"]["completion_tokens"]


def test_prompt_logprobs_list_each_prompt_token_after_the_first(client: httpx.Client) -> None:
    answer = _chat(client, max_tokens=1, prompt_logprobs=2, return_token_ids=True)
    listed, prompt_ids = answer["prompt_logprobs"], answer["prompt_token_ids"]
    assert len(listed) == len(prompt_ids) and listed[0] is None
    for token, entries in zip(prompt_ids[1:], listed[1:], strict=True):
        assert len(entries) == 2
        own = entries[str(token)]
        assert own["rank"] == 1 and own["logprob"] < 0 and isinstance(own["decoded_token"], str)
        assert sorted(entry["rank"] for entry in entries.values()) == [1, 2]


def test_the_sdk_reads_the_extra_keys(sdk: openai.OpenAI) -> None:
    answer = sdk.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert answer.usage is not None and answer.usage.prompt_tokens_details is None
    assert answer.system_fingerprint is not None
    assert answer.choices[0].model_extra is not None
    assert answer.choices[0].model_extra["stop_reason"] is None


def test_prompt_token_details_are_listed_when_asked_for(
    cached_client: httpx.Client,
) -> None:
    prompt = " ".join(f"word{i}" for i in range(80))
    first = _chat(cached_client, max_tokens=1, messages=[{"role": "user", "content": prompt}])
    second = _chat(cached_client, max_tokens=1, messages=[{"role": "user", "content": prompt}])
    # vLLM 0.32 lists them on a miss too (older releases sent null until a hit).
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    details = second["usage"]["prompt_tokens_details"]
    assert details is not None and details["cached_tokens"] > 0
