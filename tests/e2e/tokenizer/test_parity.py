"""With a local model folder, every token count and id list equals what HuggingFace
`transformers` gives for the same folder: chat (`apply_chat_template(..., tokenize=True,
add_generation_prompt=True)`) and completions (`tokenizer(prompt)`), over a corpus of 60
conversations (multi-turn, system prompts, tools, tool calls and results, Unicode), for two
families of templates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from tests.support.chat_corpus import TEXTS, Conversation, corpus
from tests.support.server import SimServer

SERVED = "tiny"
CONVERSATIONS = corpus()
PROMPTS = [*TEXTS, *(f"{a} {b}" for a, b in zip(TEXTS, reversed(TEXTS), strict=True))]


@pytest.fixture(scope="module", params=["qwen", "llama"])
def family(
    request: pytest.FixtureRequest, hf_models: dict[str, Path]
) -> Iterator[tuple[httpx.Client, Any]]:
    folder = hf_models[request.param]
    reference = AutoTokenizer.from_pretrained(str(folder))
    with (
        SimServer(["--served-model-name", SERVED], model=str(folder)) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as client,
    ):
        yield client, reference


def _chat_ids(reference: Any, conversation: Conversation) -> list[int]:
    ids = reference.apply_chat_template(
        conversation.template,
        tools=conversation.template_tools,
        tokenize=True,
        add_generation_prompt=True,
    )
    if not isinstance(ids, list):  # newer releases answer a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_corpus_is_varied() -> None:
    assert len(CONVERSATIONS) >= 50
    assert sum(1 for c in CONVERSATIONS if c.tools) >= 10
    assert sum(1 for c in CONVERSATIONS if c.wire[0]["role"] == "system") >= 30
    assert sum(1 for c in CONVERSATIONS if len(c.wire) >= 4) >= 20


@pytest.mark.parametrize("index", range(len(CONVERSATIONS)))
def test_chat_prompt_tokens_tokenize_and_render_equal_transformers(
    family: tuple[httpx.Client, Any], index: int
) -> None:
    client, reference = family
    conversation = CONVERSATIONS[index]
    expected = _chat_ids(reference, conversation)
    tools = {"tools": conversation.tools} if conversation.tools else {}
    chat = _post(
        client,
        "/v1/chat/completions",
        {
            "model": SERVED,
            "messages": conversation.wire,
            "max_tokens": 1,
            "tool_choice": "none",
            **tools,
        },
    )
    assert chat["usage"]["prompt_tokens"] == len(expected)
    tokenized = _post(
        client, "/tokenize", {"model": SERVED, "messages": conversation.wire, **tools}
    )
    assert tokenized["tokens"] == expected
    rendered = _post(
        client,
        "/v1/chat/completions/render",
        {"model": SERVED, "messages": conversation.wire, **tools},
    )
    assert rendered["token_ids"] == expected


@pytest.mark.parametrize("prompt", PROMPTS)
def test_completion_prompt_tokens_tokenize_and_render_equal_transformers(
    family: tuple[httpx.Client, Any], prompt: str
) -> None:
    client, reference = family
    expected = list(reference(prompt)["input_ids"])
    answer = _post(client, "/v1/completions", {"model": SERVED, "prompt": prompt, "max_tokens": 1})
    assert answer["usage"]["prompt_tokens"] == len(expected)
    assert _post(client, "/tokenize", {"model": SERVED, "prompt": prompt})["tokens"] == expected
    rendered = client.post("/v1/completions/render", json={"model": SERVED, "prompt": prompt})
    assert rendered.json() == [{"token_ids": expected}]


def test_token_strs_are_vocabulary_entries(family: tuple[httpx.Client, Any]) -> None:
    client, reference = family
    answer = _post(client, "/tokenize", {"prompt": "Hello there", "return_token_strs": True})
    assert answer["token_strs"] == reference.convert_ids_to_tokens(answer["tokens"])


def test_detokenize_is_the_reference_decode(family: tuple[httpx.Client, Any]) -> None:
    client, reference = family
    ids = list(reference("Héllo 你好 🙂")["input_ids"])
    answer = _post(client, "/detokenize", {"tokens": ids})
    assert answer["prompt"] == reference.decode(ids)
    too_big = client.post("/detokenize", json={"tokens": [len(reference)]})
    assert too_big.status_code == 400
    assert too_big.json()["error"]["param"] == "tokens[0]"


def test_prompt_ids_outside_the_vocabulary_are_refused(family: tuple[httpx.Client, Any]) -> None:
    client, reference = family
    body = {"model": SERVED, "prompt": [1, len(reference)], "max_tokens": 1}
    refused = client.post("/v1/completions", json=body)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == f"Token id {len(reference)} is out of vocabulary"
