"""Multimodal content blocks, chat render features, /tokenize and /detokenize, tool history."""

from __future__ import annotations

import base64
import random
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.errors import assert_openai_error
from tests.support.http import CHAT, post
from tests.support.schemas import (
    TOOL_ID_RE,
    WEATHER,
    detokenize,
    fnv_hex,
    http,
    sdk,
    token_count,
    tokenize_messages,
    tokenize_prompt,
    user,
)
from tests.support.server import SimServer

RENDER = "/v1/chat/completions/render"
MAX_MODEL_LEN = 4096
IMAGE = "https://example.com/cat.png?size=large&v=2"
IMAGE_2 = "http://example.com/b.png"
AUDIO_DATA = base64.b64encode(bytes(range(256)) * 8).decode()  # 2 KiB of "wav"
AUDIO_URL = "https://example.com/speech.mp3"
VIDEO = "https://example.com/clip.mp4"


@pytest.fixture(scope="module")
def server() -> Iterator[SimServer]:
    """Echo mode: a chat answer repeats the last message's prompt text."""
    with SimServer(["--mode", "echo", "--max-model-len", str(MAX_MODEL_LEN)]) as sim:
        yield sim


@pytest.fixture(scope="module")
def client(server: SimServer) -> Iterator[httpx.Client]:
    with http(server) as http_client:
        yield http_client


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def input_audio(data: str) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def audio_url(url: str) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": url}}


def video(url: str) -> dict[str, Any]:
    return {"type": "video_url", "video_url": {"url": url}}


def render(client: httpx.Client, messages: list[dict[str, Any]]) -> dict[str, Any]:
    response = post(client, RENDER, {"messages": messages})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# ---- blocks in the prompt ---------------------------------------------------------------------


def test_each_media_block_enters_the_prompt_as_text(client: httpx.Client) -> None:
    blocks = [
        text("Describe these"),
        image(IMAGE),
        input_audio(AUDIO_DATA),
        audio_url(AUDIO_URL),
        video(VIDEO),
    ]
    expected = (
        f"Describe these\nimage: {IMAGE}\naudio: {fnv_hex(AUDIO_DATA)}\n"
        f"audio: {AUDIO_URL}\nvideo: {VIDEO}"
    )
    response = post(client, CHAT, {"messages": user(blocks)})
    assert response.status_code == 200, response.text
    body = response.json()
    # Echo repeats the last message's text: the media items as the prompt saw them.
    assert body["choices"][0]["message"]["content"] == expected
    prompt_tokens = body["usage"]["prompt_tokens"]
    assert prompt_tokens == token_count(client, f"### user: {expected}\n")
    assert prompt_tokens == tokenize_messages(client, user(blocks))["count"]
    # The audio data (2 KiB) is carried as a short digest, not spelled out.
    assert prompt_tokens < 60


def test_an_input_audio_digest_depends_on_its_data(client: httpx.Client) -> None:
    contents = []
    for data in ("AAAA", "AAAB", AUDIO_DATA):
        response = post(client, CHAT, {"messages": user([input_audio(data)])})
        assert response.status_code == 200, response.text
        contents.append(response.json()["choices"][0]["message"]["content"])
    assert contents == [f"audio: {fnv_hex(d)}" for d in ("AAAA", "AAAB", AUDIO_DATA)]
    assert contents[0] == "audio: ff323f9"  # fnv1a32("AAAA"), lowercase hex, no padding


# ---- render features --------------------------------------------------------------------------


def _item_spans(rendered: str, items: list[str]) -> list[int]:
    """Character start of each item text, searched in order through the rendered text."""
    starts: list[int] = []
    position = 0
    for item in items:
        start = rendered.index(item, position)
        starts.append(start)
        position = start + len(item)
    return starts


def check_features(
    client: httpx.Client,
    messages: list[dict[str, Any]],
    rendered: str,
    items: list[tuple[str, str, str]],  # (modality, identifier, prompt text) in order
) -> dict[str, Any]:
    """Render's features against /tokenize of the same conversation: one placeholder per
    item covering exactly the tokens that spell its text (plus their trailing whitespace)."""
    body = render(client, messages)
    tokens = tokenize_messages(client, messages)
    assert body["token_ids"] == tokens["tokens"]
    strs: list[str] = tokens["token_strs"]
    assert "".join(strs) == rendered
    features: dict[str, Any] = body["features"]
    assert set(features) == {"mm_hashes", "mm_placeholders", "kwargs_data"}
    modalities = {modality for modality, _, _ in items}
    for key in features:
        assert set(features[key]) == modalities, (key, features[key])
    starts = _item_spans(rendered, [prompt_text for _, _, prompt_text in items])
    per_modality: dict[str, int] = {}
    prefix = {"image": "img", "audio": "audio", "video": "video"}
    for (modality, identifier, prompt_text), start in zip(items, starts, strict=True):
        j = per_modality.get(modality, 0)
        per_modality[modality] = j + 1
        digest = f"sim_{prefix[modality]}_{j}_{fnv_hex(identifier)}"
        assert features["mm_hashes"][modality][j] == digest
        assert features["kwargs_data"][modality][j] == base64.b64encode(digest.encode()).decode()
        placeholder = features["mm_placeholders"][modality][j]
        assert set(placeholder) == {"offset", "length"}
        offset, length = placeholder["offset"], placeholder["length"]
        assert "".join(strs[:offset]) == rendered[:start], (modality, j, "starts at the item")
        covered = "".join(strs[offset : offset + length])
        assert covered.startswith(prompt_text), (covered, prompt_text)
        assert covered[len(prompt_text) :].strip(" \n") == "", (covered, prompt_text)
        assert detokenize(client, body["token_ids"][offset : offset + length]) == covered
    for key in features:
        for modality, entries in features[key].items():
            assert len(entries) == per_modality[modality], (key, modality)
    return features


def test_render_points_one_placeholder_at_each_item(client: httpx.Client) -> None:
    audio_text = f"audio: {fnv_hex(AUDIO_DATA)}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You see, hear and watch."},
        {
            "role": "user",
            "content": [
                text("Look at"),
                image(IMAGE),
                text("listen to"),
                input_audio(AUDIO_DATA),
                video(VIDEO),
                text("and compare."),
            ],
        },
    ]
    rendered = (
        "### system: You see, hear and watch.\n"
        f"### user: Look at\nimage: {IMAGE}\nlisten to\n{audio_text}\nvideo: {VIDEO}\n"
        "and compare.\n"
    )
    items = [
        ("image", IMAGE, f"image: {IMAGE}"),
        ("audio", AUDIO_DATA, audio_text),
        ("video", VIDEO, f"video: {VIDEO}"),
    ]
    check_features(client, messages, rendered, items)


def test_render_arrays_follow_item_order_per_modality(client: httpx.Client) -> None:
    audio_text = f"audio: {fnv_hex('AAAA')}"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [image(IMAGE), audio_url(AUDIO_URL)]},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": [text("and"), image(IMAGE_2), input_audio("AAAA")]},
    ]
    rendered = (
        f"### user: image: {IMAGE}\naudio: {AUDIO_URL}\n"
        "### assistant: Noted.\n"
        f"### user: and\nimage: {IMAGE_2}\n{audio_text}\n"
    )
    items = [
        ("image", IMAGE, f"image: {IMAGE}"),
        ("audio", AUDIO_URL, f"audio: {AUDIO_URL}"),
        ("image", IMAGE_2, f"image: {IMAGE_2}"),
        ("audio", "AAAA", audio_text),
    ]
    features = check_features(client, messages, rendered, items)
    assert features["mm_hashes"]["image"] == [
        f"sim_img_0_{fnv_hex(IMAGE)}",
        f"sim_img_1_{fnv_hex(IMAGE_2)}",
    ]


def test_render_repeated_and_unicode_items_in_a_tool_turn(client: httpx.Client) -> None:
    unicode_url = "https://example.com/ü/猫 🐈.png"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [image(unicode_url), image(unicode_url)]},
        {
            "role": "tool",
            "tool_call_id": "call_9",
            "content": [text("frame:"), video(VIDEO), input_audio("ÄÖÜ")],
        },
    ]
    audio_text = f"audio: {fnv_hex('ÄÖÜ')}"
    rendered = (
        f"### user: image: {unicode_url}\nimage: {unicode_url}\n"
        f"### tool(call_9): frame:\nvideo: {VIDEO}\n{audio_text}\n"
    )
    items = [
        ("image", unicode_url, f"image: {unicode_url}"),
        ("image", unicode_url, f"image: {unicode_url}"),
        ("video", VIDEO, f"video: {VIDEO}"),
        ("audio", "ÄÖÜ", audio_text),
    ]
    features = check_features(client, messages, rendered, items)
    first, second = features["mm_placeholders"]["image"]
    assert first["offset"] + first["length"] == second["offset"], "adjacent, distinct spans"


def test_render_of_the_spec_example_image(client: httpx.Client) -> None:
    url = "http://example.com/a.png"
    body = render(client, user([text("describe this"), image(url)]))
    assert body["features"]["mm_hashes"] == {"image": ["sim_img_0_e2cca4f5"]}
    assert body["features"]["kwargs_data"] == {"image": ["c2ltX2ltZ18wX2UyY2NhNGY1"]}


def test_render_without_media_has_no_features(client: httpx.Client) -> None:
    body = render(client, user([text("just"), text("words")]))
    assert set(body) == {"token_ids"}
    assert body["token_ids"] == tokenize_prompt(client, "### user: just\nwords\n")["tokens"]


def test_render_needs_messages(client: httpx.Client) -> None:
    bodies: list[dict[str, Any]] = [{}, {"messages": []}]
    for body in bodies:
        assert_openai_error(post(client, RENDER, body), 400, "messages must not be empty")


# ---- /tokenize and /detokenize ----------------------------------------------------------------


def test_tokenize_shape(client: httpx.Client) -> None:
    response = post(client, "/tokenize", {"prompt": "This is a test"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"count", "max_model_len", "tokens", "token_strs"}
    assert body["count"] == 4 == len(body["tokens"])
    assert body["max_model_len"] == MAX_MODEL_LEN
    assert body["token_strs"] is None
    with_strs = tokenize_prompt(client, "This is a test")
    assert with_strs["tokens"] == body["tokens"]
    assert with_strs["token_strs"] == ["This ", "is ", "a ", "test"]
    assert tokenize_messages(client, user("hi"))["count"] == 6


def test_tokenize_rejects_prompt_and_messages_together(client: httpx.Client) -> None:
    body = {"prompt": "x", "messages": user("y")}
    assert_openai_error(
        post(client, "/tokenize", body), 400, "both prompt and messages fields in tokenize request"
    )


ROUND_TRIP_TEXTS = [
    "Hello, world! How are you?",
    "héllo wörld, naïve café",
    "emoji 😀🎉 and 👩‍👩‍👧 family",
    "中文字符测试，日本語のテキスト、한국어",
    "   leading spaces and trailing   ",
    "\t\ttabs\nnewlines\r\nand\fform feeds",
    "a|b||c | d",
    "`code` ~tilde~ <tag attr='x'>&amp;</tag>",
    "“smart quotes” — dashes – and … ellipsis",
    "zero\u200bwidth and combining e\u0301",
    "_leading_underscore __dunder__ a_b",
    "",
    " ",
    "|",
]


@pytest.mark.parametrize("prompt", ROUND_TRIP_TEXTS)
def test_tokenize_then_detokenize_round_trips(prompt: str, client: httpx.Client) -> None:
    body = tokenize_prompt(client, prompt)
    assert body["count"] == len(body["tokens"]) == len(body["token_strs"])
    assert "".join(body["token_strs"]) == prompt
    assert detokenize(client, body["tokens"]) == prompt


def test_round_trip_of_random_texts(client: httpx.Client) -> None:
    rng = random.Random(20240607)
    alphabet = (
        "abcXYZ019_ ,.;:!?-'\"(){}[]<>@#$%^&*+=/\\~|`\t\n\r\f"
        "éüßñ€£°±µ—…“”‘’😀🚀🎉中文日本語한국\u200b\u0301"
    )
    for _ in range(60):
        prompt = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80)))
        body = tokenize_prompt(client, prompt)
        assert "".join(body["token_strs"]) == prompt
        assert detokenize(client, body["tokens"]) == prompt, repr(prompt)


def test_detokenize_unknown_and_out_of_range_ids(client: httpx.Client) -> None:
    known = tokenize_prompt(client, "Hello ")["tokens"]
    unknown = next(i for i in range(1, 100) if i not in known)
    assert detokenize(client, [*known, unknown]) == f"Hello <unk:{unknown}>"
    assert detokenize(client, []) == ""
    assert_openai_error(post(client, "/detokenize", {"tokens": [1, -1]}), 400, param="tokens[1]")
    assert_openai_error(post(client, "/detokenize", {"tokens": [2**32]}), 400, param="tokens[0]")


# ---- tool calls and results in the history ------------------------------------------------------

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"zone":"CET"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "22 C, sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": [text("14:05")]},
    {"role": "user", "content": "Thanks!"},
]
HISTORY_TEXT = (
    "### system: You can call tools.\n"
    "### user: Weather in Paris?\n"
    '### assistant: [get_weather({"location":"Paris"})][get_time({"zone":"CET"})]\n'
    "### tool(call_1): 22 C, sunny\n"
    "### tool(call_2): 14:05\n"
    "### user: Thanks!\n"
)


def test_tool_history_is_accepted_and_counted(client: httpx.Client) -> None:
    tokens = tokenize_messages(client, HISTORY)
    assert "".join(tokens["token_strs"]) == HISTORY_TEXT
    for stream in (False, True):
        body = {"messages": HISTORY, "stream": stream, "stream_options": {"include_usage": True}}
        if not stream:
            del body["stream_options"]
        response = post(client, CHAT, body)
        assert response.status_code == 200, response.text
        if stream:
            usage = [c for c in response.text.split("\n\n") if '"usage":{' in c]
            assert len(usage) == 1, response.text
            assert f'"prompt_tokens":{tokens["count"]},' in usage[0]
        else:
            assert response.json()["usage"]["prompt_tokens"] == tokens["count"]
    bare = [
        {k: v for k, v in m.items() if k not in ("tool_calls", "tool_call_id")} for m in HISTORY
    ]
    assert tokenize_messages(client, bare)["count"] < tokens["count"]


def test_sdk_round_trip_of_a_tool_call(server: SimServer, client: httpx.Client) -> None:
    """The assistant message the SDK got back, and a tool result, go back in unchanged."""
    with sdk(server) as sdk_client:
        messages: Any = user("Weather in Paris?")
        tools: Any = [WEATHER]
        first = sdk_client.chat.completions.create(
            model=server.model, messages=messages, tools=tools, tool_choice="required"
        )
        assistant = first.choices[0].message
        assert assistant.tool_calls
        call = assistant.tool_calls[0]
        assert isinstance(call, openai.types.chat.ChatCompletionMessageToolCall)
        assert TOOL_ID_RE.fullmatch(call.id)
        history: Any = [
            *messages,
            assistant.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "22 C"},
        ]
        second = sdk_client.chat.completions.create(model=server.model, messages=history)
    expected = (
        "### user: Weather in Paris?\n"
        f"### assistant: [get_weather({call.function.arguments})]\n"
        f"### tool({call.id}): 22 C\n"
    )
    assert second.usage is not None
    assert second.usage.prompt_tokens == token_count(client, expected)
    assert second.usage.prompt_tokens == tokenize_messages(client, history)["count"]
    # Echo mode repeats the last message: the tool result.
    assert second.choices[0].message.content == "22 C"
