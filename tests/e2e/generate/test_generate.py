"""POST /inference/v1/generate end to end: token ids in, token ids out, plain and streamed,
its validation errors, P/D prefill answers, encoder-only EC params and echo mode."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.errors import assert_openai_error, context_length_message, unknown_model_message
from tests.support.fixtures import http_fixture, server_fixture
from tests.support.http import json_ok
from tests.support.metrics import PROMPT_TOTAL, scrape
from tests.support.native import GENERATE, MODEL, TRANSFER_KEYS, gen_body, stream_post
from vllm_sim.engine.tokenizer.simulated import EOS_TOKEN_ID

EC_ENTRY = {
    "peer_host": "DUMMY",
    "peer_port": 1234,
    "size_bytes": 2359296,
    "nixl_agent_metadata_b64": "TklYTF9NRVRBREFUQV9QTEFDRUhPTERFUg==",
}


_generating = server_fixture(["--max-num-seqs", "16", "--max-model-len", "1024"])
client = http_fixture("_generating")


_echoing = server_fixture(["--mode", "echo", "--max-model-len", "64"])
echo = http_fixture("_echoing")


def generate(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    return json_ok(client.post(GENERATE, json=body))


def only_choice(answer: dict[str, Any]) -> dict[str, Any]:
    assert len(answer["choices"]) == 1, answer
    choice: dict[str, Any] = answer["choices"][0]
    assert set(choice) == {"index", "finish_reason", "token_ids"}, choice
    assert choice["index"] == 0
    assert all(type(t) is int and 0 <= t < 2**32 for t in choice["token_ids"]), choice
    return choice


# --- non-streaming -------------------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [1, 3, 7, 40])
def test_answer_shape_and_at_most_max_tokens(client: httpx.Client, max_tokens: int) -> None:
    for _ in range(5):
        answer = generate(client, gen_body([11, 22, 33, 44], max_tokens))
        assert set(answer) == {"request_id", "choices", "ec_transfer_params"}, answer
        assert isinstance(answer["request_id"], str) and answer["request_id"]
        assert answer["ec_transfer_params"] is None
        choice = only_choice(answer)
        count = len(choice["token_ids"])
        assert 1 <= count <= max_tokens, answer
        # A natural stop ends with the end-of-sequence id, within max_tokens; a cut one
        # fills max_tokens with other ids.
        ends = choice["token_ids"][-1] == EOS_TOKEN_ID
        assert choice["finish_reason"] == ("stop" if ends else "length"), answer
        assert ends or count == max_tokens, answer
        assert EOS_TOKEN_ID not in choice["token_ids"][:-1], answer


def test_request_ids_differ(client: httpx.Client) -> None:
    ids = {generate(client, gen_body([1], 1))["request_id"] for _ in range(5)}
    assert len(ids) == 5


@pytest.mark.parametrize("max_tokens", [1, 5, 64])
def test_ignore_eos_gives_exactly_max_tokens(client: httpx.Client, max_tokens: int) -> None:
    choice = only_choice(generate(client, gen_body([7, 8, 9], max_tokens, ignore_eos=True)))
    assert len(choice["token_ids"]) == max_tokens
    assert choice["finish_reason"] == "length"
    assert EOS_TOKEN_ID not in choice["token_ids"]


def test_without_max_tokens_the_context_limit_bounds_the_answer(client: httpx.Client) -> None:
    prompt = list(range(1000))  # max-model-len 1024: at most 24 more
    for _ in range(3):
        choice = only_choice(generate(client, gen_body(prompt)))
        assert 1 <= len(choice["token_ids"]) <= 24, choice


def test_prompt_tokens_are_the_ids_as_given(client: httpx.Client) -> None:
    before = scrape(client).value(PROMPT_TOTAL, model_name=MODEL)
    generate(client, gen_body([4294967295, 0, 17, 17, 17], 2))
    after = scrape(client).value(PROMPT_TOTAL, model_name=MODEL)
    assert after - before == 5


def test_the_model_field_is_checked(client: httpx.Client) -> None:
    assert client.post(GENERATE, json=gen_body([1], 1, model=MODEL)).status_code == 200
    error = assert_openai_error(client.post(GENERATE, json=gen_body([1], 1, model="other")), 404)
    assert error["message"] == unknown_model_message("other", MODEL)


def test_unknown_fields_are_ignored(client: httpx.Client) -> None:
    body = gen_body([1, 2], 2, surprise={"x": 1}, priority=3)
    body["sampling_params"]["temperature"] = 0.5
    only_choice(generate(client, body))


# --- streaming -----------------------------------------------------------------------------------


def token_frames(frames: list[dict[str, Any]], request_id: str) -> list[dict[str, Any]]:
    out = []
    for frame in frames:
        assert frame["request_id"] == request_id, frame
        if frame["choices"]:
            assert set(frame) == {"request_id", "choices"}, frame
            (choice,) = frame["choices"]
            assert set(choice) == {"index", "finish_reason", "token_ids"}, choice
            assert choice["index"] == 0
            out.append(choice)
    return out


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_stream_has_one_frame_per_token_the_last_with_the_reason(
    client: httpx.Client, ignore_eos: bool
) -> None:
    for _ in range(4):
        body = gen_body([3, 1, 4, 1, 5], 9, stream=True, ignore_eos=ignore_eos)
        sse = stream_post(client, GENERATE, body)
        assert sse.status == 200, sse.body
        assert sse.content_type.startswith("text/event-stream")
        assert sse.done and sse.done_last
        request_id = sse.frames[0]["request_id"]
        assert isinstance(request_id, str) and request_id
        choices = token_frames(sse.frames, request_id)
        assert len(choices) == len(sse.frames), "no usage frame unless asked for"
        assert all(len(c["token_ids"]) == 1 for c in choices), choices
        assert all(c["finish_reason"] is None for c in choices[:-1]), choices
        reason = choices[-1]["finish_reason"]
        assert 1 <= len(choices) <= 9
        if ignore_eos:
            assert len(choices) == 9
        # A natural stop's last frame is its end-of-sequence token.
        ends = choices[-1]["token_ids"] == [EOS_TOKEN_ID]
        assert reason == ("stop" if ends else "length"), choices
        assert ends or len(choices) == 9, choices


def test_stream_usage_frame_comes_last_before_done(client: httpx.Client) -> None:
    body = gen_body([9, 8, 7, 6], 6, stream=True, stream_options={"include_usage": True})
    sse = stream_post(client, GENERATE, body)
    assert sse.status == 200 and sse.done_last
    request_id = sse.frames[0]["request_id"]
    choices = token_frames(sse.frames, request_id)
    usage_frame = sse.frames[-1]
    assert usage_frame["choices"] == []
    assert set(usage_frame) == {"request_id", "choices", "usage"}
    assert len(choices) == len(sse.frames) - 1
    usage = usage_frame["usage"]
    assert usage["prompt_tokens"] == 4
    assert usage["completion_tokens"] == len(choices)
    assert usage["total_tokens"] == 4 + len(choices)
    assert choices[-1]["finish_reason"] in ("stop", "length")


def test_stream_usage_false_sends_no_usage_frame(client: httpx.Client) -> None:
    body = gen_body([1, 2], 3, stream=True, stream_options={"include_usage": False})
    sse = stream_post(client, GENERATE, body)
    assert sse.status == 200 and sse.done_last
    assert all(frame["choices"] for frame in sse.frames)


def test_stream_and_plain_answers_agree_in_echo_mode(echo: httpx.Client) -> None:
    ids = [10, 20, 30, 40000, 2**32 - 1]
    plain = only_choice(generate(echo, gen_body(ids, 8)))
    sse = stream_post(echo, GENERATE, gen_body(ids, 8, stream=True))
    choices = token_frames(sse.frames, sse.frames[0]["request_id"])
    assert [c["token_ids"][0] for c in choices] == plain["token_ids"] == [*ids, EOS_TOKEN_ID]
    assert choices[-1]["finish_reason"] == plain["finish_reason"] == "stop"


# --- validation ----------------------------------------------------------------------------------


ERRORS: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("empty-body", {}, "Missing input token_ids", None),
    ("no-token-ids", {"sampling_params": {"max_tokens": 2}}, "Missing input token_ids", None),
    (
        "null-token-ids",
        {"token_ids": None, "sampling_params": {}},
        "Missing input token_ids",
        None,
    ),
    ("no-sampling-params", {"token_ids": [1, 2]}, "Missing sampling_params field", None),
    (
        "null-sampling-params",
        {"token_ids": [1, 2], "sampling_params": None},
        "Missing sampling_params field",
        None,
    ),
    (
        "zero-max-tokens",
        gen_body([1], 0),
        "Max completion tokens and max tokens should be positive",
        None,
    ),
    (
        "negative-max-tokens",
        gen_body([1], -3),
        "Max completion tokens and max tokens should be positive",
        None,
    ),
    (
        "ignore-eos-without-max-tokens",
        gen_body([1], ignore_eos=True),
        "Ignore_eos is true but max_completion_tokens (or max_tokens) is not set",
        None,
    ),
    ("negative-id", gen_body([1, -1, 3], 2), "", "body.token_ids.1"),
    ("id-2**32", gen_body([1, 2, 2**32], 2), "", "body.token_ids.2"),
    ("float-id", gen_body([1.5], 2), "", "body.token_ids.0"),
    ("string-id", gen_body([1, "2"], 2), "", "body.token_ids.1"),
    ("bool-id", gen_body([1, 2, 3, True], 2), "", "body.token_ids.3"),
    ("null-id", gen_body([None], 2), "", "body.token_ids.0"),
    (
        "stream-and-remote-decode",
        gen_body([1, 2], 2, stream=True, kv_transfer_params={"do_remote_decode": True}),
        "Prefill does not support streaming",
        None,
    ),
    (
        "stream-and-nested-remote-decode",
        {
            "token_ids": [1, 2],
            "stream": True,
            "sampling_params": {
                "max_tokens": 2,
                "extra_args": {"kv_transfer_params": {"do_remote_decode": True}},
            },
        },
        "Prefill does not support streaming",
        None,
    ),
]


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [case[1:] for case in ERRORS],
    ids=[case[0] for case in ERRORS],
)
def test_invalid_requests_are_400(
    client: httpx.Client, body: dict[str, Any], message: str, param: str | None
) -> None:
    for stream in (False, True):
        sent = {**body, "stream": True} if stream else body
        # The body's schema refuses a token id, worded as vLLM words it.
        schema = param is not None and param.startswith("body.")
        kind = "Bad Request" if schema else "BadRequestError"
        error = assert_openai_error(client.post(GENERATE, json=sent), 400, error_type=kind)
        if message:
            assert error["message"] == message, error
        if param is not None:
            assert error["param"] == param, error


def test_the_model_is_checked_before_the_body_is_validated(client: httpx.Client) -> None:
    error = assert_openai_error(client.post(GENERATE, json={"model": "other"}), 404)
    assert error["message"] == unknown_model_message("other", MODEL)


def test_context_length_is_checked(echo: httpx.Client) -> None:
    error = assert_openai_error(echo.post(GENERATE, json=gen_body(list(range(60)), 5)), 400)
    assert error["message"] == context_length_message(64, 5), error
    assert error["param"] == "input_tokens", error
    assert echo.post(GENERATE, json=gen_body(list(range(60)), 4)).status_code == 200


def test_empty_token_ids_are_allowed(echo: httpx.Client) -> None:
    choice = only_choice(generate(echo, gen_body([], 3)))
    assert choice["token_ids"] == [EOS_TOKEN_ID]  # nothing to echo: the end at once


# --- P/D: the prefill side ----------------------------------------------------------------------


def assert_prefill_answer(answer: dict[str, Any]) -> None:
    choice = only_choice(answer)
    assert choice["finish_reason"] == "remote_decode", answer
    params = answer["kv_transfer_params"]
    assert isinstance(params, dict) and set(params) == TRANSFER_KEYS, params
    assert params["do_remote_decode"] is False
    assert params["do_remote_prefill"] is True
    assert isinstance(params["remote_block_ids"], list)
    assert type(params["remote_port"]) is int and type(params["tp_size"]) is int


def test_remote_decode_at_the_root(client: httpx.Client) -> None:
    body = gen_body(list(range(40)), 5, kv_transfer_params={"do_remote_decode": True})
    assert_prefill_answer(generate(client, body))


def test_remote_decode_in_extra_args(client: httpx.Client) -> None:
    body = {
        "token_ids": list(range(40)),
        "sampling_params": {
            "max_tokens": 5,
            "extra_args": {"kv_transfer_params": {"do_remote_decode": True}},
        },
    }
    assert_prefill_answer(generate(client, body))


def test_root_transfer_params_win_over_extra_args(client: httpx.Client) -> None:
    body = {
        "token_ids": [1, 2, 3],
        "kv_transfer_params": {"do_remote_decode": False},
        "sampling_params": {
            "max_tokens": 5,
            "extra_args": {"kv_transfer_params": {"do_remote_decode": True}},
        },
    }
    answer = generate(client, body)
    assert "kv_transfer_params" not in answer
    assert only_choice(answer)["finish_reason"] in ("stop", "length")


def test_no_transfer_params_without_remote_decode(client: httpx.Client) -> None:
    answer = generate(client, gen_body([1, 2, 3], 3, kv_transfer_params={}))
    assert "kv_transfer_params" not in answer


def test_remote_prefill_decodes_normally(client: httpx.Client) -> None:
    transfer = {
        "do_remote_prefill": True,
        "remote_engine_id": "engine",
        "remote_block_ids": [1, 2],
        "remote_host": "10.0.0.1",
        "remote_port": 5600,
        "tp_size": 1,
    }
    answer = generate(client, gen_body(list(range(40)), 4, kv_transfer_params=transfer))
    choice = only_choice(answer)
    assert choice["finish_reason"] in ("stop", "length")
    assert 1 <= len(choice["token_ids"]) <= 4
    assert "kv_transfer_params" not in answer


# --- encoder-only and echo ------------------------------------------------------------------------


_encoder_only = server_fixture(["--mm-encoder-only"])
encoder = http_fixture("_encoder_only")


def test_encoder_only_keys_ec_params_by_every_hash(encoder: httpx.Client) -> None:
    features = {"mm_hashes": {"image": ["img-1", "img-2"], "audio": ["aud-1"]}, "other": [1]}
    answer = generate(encoder, gen_body([1, 2, 3], 3, features=features))
    assert answer["ec_transfer_params"] == {h: EC_ENTRY for h in ("img-1", "img-2", "aud-1")}
    choice = only_choice(answer)
    assert choice["finish_reason"] == "length"
    assert len(choice["token_ids"]) == 3 and len(set(choice["token_ids"])) == 1


def test_encoder_only_without_features_has_null_ec_params(encoder: httpx.Client) -> None:
    answer = generate(encoder, gen_body([1, 2, 3]))
    assert answer["ec_transfer_params"] is None
    assert len(only_choice(answer)["token_ids"]) == 1  # max_tokens absent: one token
    assert generate(encoder, gen_body([1], 1, features={}))["ec_transfer_params"] == {}


def test_ec_params_need_encoder_only_mode(client: httpx.Client) -> None:
    features = {"mm_hashes": {"image": ["img-1"]}}
    assert generate(client, gen_body([1, 2], 2, features=features))["ec_transfer_params"] is None


@pytest.mark.parametrize(
    "ids", [[5], [1, 2, 3, 4, 5, 6, 7], [0, 2**32 - 1, 604802540]], ids=["one", "seven", "edges"]
)
def test_echo_returns_the_input_ids(echo: httpx.Client, ids: list[int]) -> None:
    choice = only_choice(generate(echo, gen_body(ids, 10)))
    assert choice["token_ids"] == [*ids, EOS_TOKEN_ID]
    assert choice["finish_reason"] == "stop"
    exact = only_choice(generate(echo, gen_body(ids, len(ids))))
    assert exact["token_ids"] == ids and exact["finish_reason"] == "length"
