"""The official `openai` SDK (sync, async, stream iteration and stream helpers) works unchanged."""

from __future__ import annotations

import asyncio
from typing import cast

import openai
import pytest

from tests.support.fixtures import openai_fixture
from tests.support.http import EOS_TOKENS, ascii_tokens, is_bank_text
from tests.support.server import SimServer

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "user", "content": "This is a test."}
]


client = openai_fixture("sim")


echo = openai_fixture("echo_sim")


def test_chat_create(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.chat.completions.create(model=sim.model, messages=MESSAGES, max_tokens=20)
    assert reply.object == "chat.completion"
    assert reply.model == sim.model
    assert reply.id.startswith("chatcmpl-")
    [choice] = reply.choices
    assert choice.message.role == "assistant"
    assert choice.message.content is not None and is_bank_text(choice.message.content)
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == 10
    # A stop by the model itself counts its end-of-sequence token too.
    eos = EOS_TOKENS if choice.finish_reason == "stop" else 0
    assert reply.usage.completion_tokens == len(ascii_tokens(choice.message.content)) + eos
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    # vLLM leaves the details null unless asked for (and some tokens were cached).
    assert reply.usage.prompt_tokens_details is None
    assert reply.usage.completion_tokens_details is None


def test_chat_create_with_max_completion_tokens(client: openai.OpenAI, sim: SimServer) -> None:
    reply = client.chat.completions.create(
        model=sim.model, messages=MESSAGES, max_completion_tokens=7, n=3
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    for choice in reply.choices:
        assert choice.message.content is not None
        count = len(ascii_tokens(choice.message.content))
        assert count <= 7
        assert (choice.finish_reason == "length") == (count == 7)
    assert reply.usage is not None and reply.usage.completion_tokens <= 3 * 7


def test_chat_stream_iteration(client: openai.OpenAI, sim: SimServer) -> None:
    stream = client.chat.completions.create(
        model=sim.model,
        messages=MESSAGES,
        max_tokens=30,
        stream=True,
        stream_options={"include_usage": True},
    )
    text = ""
    tokens = 0
    finish = None
    usage = None
    roles = []
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            assert chunk.choices == []
            usage = chunk.usage
            continue
        [choice] = chunk.choices
        if choice.delta.role:
            roles.append(choice.delta.role)
        if choice.delta.content:
            text += choice.delta.content
            tokens += 1
        if choice.finish_reason:
            finish = choice.finish_reason
    assert roles == ["assistant"]
    assert is_bank_text(text)
    assert finish in ("stop", "length")
    eos = EOS_TOKENS if finish == "stop" else 0  # a chunk with no text, counted in usage
    assert usage is not None and usage.completion_tokens == tokens + eos
    assert usage.prompt_tokens == 10


def test_chat_stream_helper(client: openai.OpenAI, sim: SimServer) -> None:
    # No max_tokens: the helper raises LengthFinishReasonError on `length` by design.
    with client.chat.completions.stream(
        model=sim.model,
        messages=MESSAGES,
        stream_options={"include_usage": True},
    ) as stream:
        events = [event for event in stream if event.type == "content.delta"]
        final = stream.get_final_completion()
    deltas = [event.delta for event in events if event.delta]
    [choice] = final.choices
    assert choice.message.content == "".join(deltas)
    assert is_bank_text(choice.message.content)
    assert choice.finish_reason == "stop"
    assert final.usage is not None
    assert final.usage.completion_tokens == len(deltas) + EOS_TOKENS


def test_beta_chat_stream_helper_n_two(echo: openai.OpenAI, echo_sim: SimServer) -> None:
    beta = getattr(echo, "beta", None)
    if beta is None or not hasattr(beta.chat.completions, "stream"):
        pytest.skip("this openai version has no beta.chat.completions.stream")
    with beta.chat.completions.stream(model=echo_sim.model, messages=MESSAGES, n=2) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert [c.message.content for c in final.choices] == ["This is a test."] * 2
    assert [c.finish_reason for c in final.choices] == ["stop", "stop"]


def test_chat_logprobs_through_sdk(echo: openai.OpenAI, echo_sim: SimServer) -> None:
    reply = echo.chat.completions.create(
        model=echo_sim.model, messages=MESSAGES, logprobs=True, top_logprobs=2
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    # The end-of-sequence token is listed last, with no text.
    assert [e.token for e in logprobs.content] == ["This ", "is ", "a ", "test", ".", ""]
    assert [e.logprob for e in logprobs.content] == [-1.0, -1.1, -1.2, -1.0, -1.1, -1.2]
    assert logprobs.content[-1].bytes == []
    assert [t.token for t in logprobs.content[0].top_logprobs] == ["This ", "This _1"]
    reply = echo.chat.completions.create(model=echo_sim.model, messages=MESSAGES, logprobs=True)
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert all(entry.top_logprobs == [] for entry in logprobs.content)


def test_completions_create(echo: openai.OpenAI, echo_sim: SimServer) -> None:
    reply = echo.completions.create(
        model=echo_sim.model, prompt=["This is a test.", "Hello"], n=2, logprobs=1
    )
    assert reply.object == "text_completion"
    assert reply.id.startswith("cmpl-")
    assert [c.text for c in reply.choices] == ["This is a test."] * 2 + ["Hello"] * 2
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == 6
    assert reply.usage.completion_tokens == 12 + 4 * EOS_TOKENS
    first = reply.choices[0].logprobs
    assert first is not None
    assert first.tokens == ["This ", "is ", "a ", "test", ".", ""]
    assert first.text_offset == [0, 5, 8, 10, 14, 15]


def test_completions_stream(client: openai.OpenAI, sim: SimServer) -> None:
    stream = client.completions.create(
        model=sim.model,
        prompt=[1, 2, 3, 4],
        max_tokens=50,
        extra_body={"ignore_eos": True},
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces = []
    usage = None
    finish = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            continue
        [choice] = chunk.choices
        # The SDK types finish_reason as never None; on the wire it is null until the end.
        reason: str | None = cast("str | None", choice.finish_reason)
        assert finish is None, "nothing after the finish"
        if reason:
            finish = reason  # on the chunk of the last token: ignore_eos has no EOS
        assert choice.text
        pieces.append(choice.text)
    assert len(pieces) == 50
    assert finish == "length"
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (4, 50)


def test_async_client(sim: SimServer) -> None:
    async def run() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=sim.openai_url, api_key="none", max_retries=0
        ) as sdk:
            reply = await sdk.chat.completions.create(
                model=sim.model, messages=MESSAGES, max_tokens=10
            )
            assert reply.choices[0].message.content
            stream = await sdk.chat.completions.create(
                model=sim.model, messages=MESSAGES, max_tokens=10, stream=True
            )
            texts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
            async with sdk.chat.completions.stream(model=sim.model, messages=MESSAGES) as helper:
                final = await helper.get_final_completion()
            assert final.choices[0].message.content
            return texts

    texts = asyncio.run(run())
    assert is_bank_text("".join(texts))


def test_async_concurrent_requests(sim: SimServer) -> None:
    async def run() -> list[int]:
        async with openai.AsyncOpenAI(
            base_url=sim.openai_url, api_key="none", max_retries=0
        ) as sdk:
            replies = await asyncio.gather(
                *[
                    sdk.chat.completions.create(
                        model=sim.model,
                        messages=MESSAGES,
                        max_tokens=5 + i,
                        extra_body={"ignore_eos": True},
                    )
                    for i in range(20)
                ]
            )
            return [r.usage.completion_tokens for r in replies if r.usage]

    assert asyncio.run(run()) == [5 + i for i in range(20)]


def test_sdk_errors(client: openai.OpenAI, sim: SimServer) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(model="x", messages=MESSAGES)
    assert not_found.value.status_code == 404
    assert not_found.value.body == {
        "message": f"The model `x` does not exist. Valid aliases: {sim.model}.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    assert not_found.value.type == "NotFoundError"
    assert not_found.value.param == "model"
    assert not_found.value.code == "404"

    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=sim.model, messages=MESSAGES, n=0)
    assert isinstance(bad.value.body, dict)
    assert bad.value.body["message"] == "n must be at least 1"
    assert bad.value.type == "BadRequestError"

    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=sim.model, prompt=[])

    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=sim.model, messages=MESSAGES, stream=True, max_tokens=0
        )


def test_sdk_raw_response_headers(client: openai.OpenAI, sim: SimServer) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=sim.model, messages=MESSAGES, max_tokens=2
    )
    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.parse().object == "chat.completion"


def test_sdk_explicit_none_values(client: openai.OpenAI, sim: SimServer) -> None:
    """User code often forwards None for unset options; the SDK then sends JSON null."""
    reply = client.chat.completions.create(
        model=sim.model,
        messages=MESSAGES,
        max_tokens=None,
        n=None,
        stream=None,
        logprobs=None,
        top_logprobs=None,
        stream_options=None,
    )
    assert reply.choices[0].message.content
