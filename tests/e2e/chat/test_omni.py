"""Omni (`--omni`): generated images in chat answers, streamed and not, and their timing."""

from __future__ import annotations

import base64
import math
import struct
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.http import (
    CHAT,
    EOS_TOKENS,
    chat_body,
    chat_stream,
    is_bank_text,
    parse_sse,
    post,
)
from tests.support.metrics import timed_stream
from tests.support.schemas import WEATHER, http, token_count
from tests.support.server import SimServer

IMAGE_GENERATION_S = 0.3
SEND = {"X-Send-Image": "true"}
DATA_URL_PREFIX = "data:image/png;base64,"


@pytest.fixture(scope="module")
def omni() -> Iterator[httpx.Client]:
    with (
        SimServer(["--omni", "--time-to-generate-image", "300ms"]) as server,
        http(server) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def omni_always() -> Iterator[httpx.Client]:
    with SimServer(["--omni", "--image-emission-rate", "100"]) as server, http(server) as client:
        yield client


@pytest.fixture(scope="module")
def not_omni() -> Iterator[httpx.Client]:
    with SimServer(["--image-emission-rate", "100"]) as server, http(server) as client:
        yield client


def check_png_data_url(url: str) -> None:
    assert url.startswith(DATA_URL_PREFIX), url
    png = base64.b64decode(url[len(DATA_URL_PREFIX) :], validate=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (1, 1), "a 1x1 image"


def image_content(message: dict[str, Any]) -> str:
    """The text of a `[text, image_url]` omni message; fails on any other shape."""
    content = message["content"]
    assert isinstance(content, list), content
    assert len(content) == 2, content
    text_block, image_block = content
    assert set(text_block) == {"type", "text"} and text_block["type"] == "text"
    assert set(image_block) == {"type", "image_url"} and image_block["type"] == "image_url"
    assert set(image_block["image_url"]) == {"url"}
    check_png_data_url(image_block["image_url"]["url"])
    text: str = text_block["text"]
    return text


def ask(client: httpx.Client, headers: dict[str, str] | None = None) -> dict[str, Any]:
    response = post(client, CHAT, chat_body("Draw me a cat"), headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_header_adds_an_image_block(omni: httpx.Client) -> None:
    body = ask(omni, SEND)
    [choice] = body["choices"]
    text = image_content(choice["message"])
    assert text and is_bank_text(text)
    assert choice["finish_reason"] in ("stop", "length")
    # A stop ends with the end-of-sequence token, which has no text but counts.
    eos = EOS_TOKENS if choice["finish_reason"] == "stop" else 0
    assert body["usage"]["completion_tokens"] == token_count(omni, text) + eos


@pytest.mark.parametrize("value", ["true", "1", "True", "TRUE", "t"])
def test_true_header_values(value: str, omni: httpx.Client) -> None:
    image_content(ask(omni, {"X-Send-Image": value})["choices"][0]["message"])


@pytest.mark.parametrize("value", [None, "false", "0", "yes", ""])
def test_no_image_without_a_true_header(value: str | None, omni: httpx.Client) -> None:
    headers = None if value is None else {"X-Send-Image": value}
    content = ask(omni, headers)["choices"][0]["message"]["content"]
    assert isinstance(content, str) and is_bank_text(content)


def test_streamed_text_blocks_then_one_image_chunk(omni: httpx.Client) -> None:
    body = {**chat_body("Draw me a cat"), "stream": True, "stream_options": {"include_usage": True}}
    response = post(omni, CHAT, body, headers=SEND)
    assert response.status_code == 200, response.text
    role, *tokens, image, finish, usage = parse_sse(response.content).chunks
    assert role["choices"][0]["delta"]["role"] == "assistant"
    # A natural stop's end-of-sequence token comes last, before the image: an empty delta
    # (its step adds no text), without the finish, which waits for the image.
    eos = tokens[-1]["choices"][0]["delta"] == {}
    if eos:
        [eos_choice] = tokens.pop()["choices"]
        assert eos_choice["finish_reason"] is None
    assert tokens, "some text before the image"
    pieces = []
    for chunk in tokens:
        assert "modality" not in chunk
        [choice] = chunk["choices"]
        assert choice["finish_reason"] is None
        [block] = choice["delta"]["content"]
        assert set(block) == {"type", "text"} and block["type"] == "text"
        pieces.append(block["text"])
    assert is_bank_text("".join(pieces))
    assert all(pieces), "only the end of sequence has no text, and no text block"
    assert image["modality"] == "image"
    [choice] = image["choices"]
    assert choice["finish_reason"] is None
    [block] = choice["delta"]["content"]
    assert block["type"] == "image_url"
    check_png_data_url(block["image_url"]["url"])
    assert "modality" not in finish and "modality" not in usage
    # The image comes after the last token: a chunk of its own then carries the finish.
    assert finish["choices"][0]["delta"] == {}
    reason = finish["choices"][0]["finish_reason"]
    assert reason in ("stop", "length")
    assert eos == (reason == "stop")
    assert usage["usage"]["completion_tokens"] == len(pieces) + (EOS_TOKENS if eos else 0)


def test_streamed_without_header_is_plain_text(omni: httpx.Client) -> None:
    response = post(omni, CHAT, {**chat_body("Hi"), "stream": True})
    sse = parse_sse(response.content)
    assert all("modality" not in chunk for chunk in sse.chunks)
    [only] = chat_stream(sse).choices.values()  # plain string deltas, one per token
    assert only.pieces and is_bank_text(only.text)


@pytest.mark.timing
def test_image_generation_delays_the_end(omni: httpx.Client) -> None:
    start = time.monotonic()
    ask(omni)
    plain = time.monotonic() - start
    start = time.monotonic()
    image_content(ask(omni, SEND)["choices"][0]["message"])
    with_image = time.monotonic() - start
    assert plain < 0.2, plain
    assert 0.8 * IMAGE_GENERATION_S <= with_image <= IMAGE_GENERATION_S + 1.0, with_image


def test_streamed_image_arrives_after_the_generation_time(omni: httpx.Client) -> None:
    timed = timed_stream(omni, CHAT, {**chat_body("Draw"), "stream": True}, headers=SEND)
    assert timed.status == 200 and timed.done
    last_text = max(
        t
        for t, event in timed.events
        if event["choices"]
        and isinstance(event["choices"][0]["delta"].get("content"), list)
        and event["choices"][0]["delta"]["content"][0]["type"] == "text"
    )
    [image_at] = [t for t, event in timed.events if event.get("modality") == "image"]
    assert 0.8 * IMAGE_GENERATION_S <= image_at - last_text <= IMAGE_GENERATION_S + 1.0


def test_tool_calls_with_an_image_carry_only_the_image_block(omni: httpx.Client) -> None:
    body = {**chat_body("Weather?"), "tools": [WEATHER], "tool_choice": "required"}
    response = post(omni, CHAT, body, headers=SEND)
    assert response.status_code == 200, response.text
    [choice] = response.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"]
    [block] = choice["message"]["content"]
    assert block["type"] == "image_url"
    check_png_data_url(block["image_url"]["url"])


def test_emission_rate_sends_images_until_the_admin_turns_it_off(
    omni_always: httpx.Client,
) -> None:
    for _ in range(20):
        image_content(ask(omni_always)["choices"][0]["message"])
    response = omni_always.post("/admin/config", json={"image-emission-rate": 0})
    assert response.status_code == 200, response.text
    assert response.json()["image-emission-rate"] == 0
    for _ in range(20):
        assert isinstance(ask(omni_always)["choices"][0]["message"]["content"], str)
    # The header still forces one at rate 0.
    image_content(ask(omni_always, SEND)["choices"][0]["message"])
    # A rate in between: about that share of requests.
    response = omni_always.post("/admin/config", json={"image-emission-rate": 40})
    assert response.status_code == 200, response.text
    n = 200
    images = sum(
        isinstance(ask(omni_always)["choices"][0]["message"]["content"], list) for _ in range(n)
    )
    spread = 4.5 * math.sqrt(n * 0.4 * 0.6)
    assert n * 0.4 - spread <= images <= n * 0.4 + spread, images
    assert omni_always.get("/admin/config").json()["image-emission-rate"] == 40


def test_without_omni_nothing_changes(not_omni: httpx.Client) -> None:
    for _ in range(10):
        content = ask(not_omni, SEND)["choices"][0]["message"]["content"]
        assert isinstance(content, str) and is_bank_text(content)
    response = post(not_omni, CHAT, {**chat_body("Hi"), "stream": True}, headers=SEND)
    chunks = parse_sse(response.content).chunks
    assert all("modality" not in chunk for chunk in chunks)
    # Plain string deltas; a natural stop's last chunk is its end of sequence, an empty delta.
    *texts, last = chunks[1:]
    assert all(isinstance(c["choices"][0]["delta"].get("content"), str) for c in texts), chunks
    [last_choice] = last["choices"]
    if last_choice["finish_reason"] == "stop":
        assert last_choice["delta"] == {}, last
    else:
        assert isinstance(last_choice["delta"].get("content"), str), last
