"""vLLM's sampling parameters: types, range checks with vLLM's messages, and list bounds.

Each body goes through the protocol's own decoder and `options()`, as the pipeline runs
them, so the wiring into chat, completions and generate is checked with the rules.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tests.support.errors import VALIDATION_PREFIX, VALIDATION_TYPE
from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import PARSE_ERROR_PREFIX, decode_body
from vllm_sim.frontend.capabilities import CHAT, COMPLETIONS, GENERATE
from vllm_sim.frontend.endpoint import OpenAIBody, Options
from vllm_sim.protocols.common import sampling
from vllm_sim.protocols.common.sampling import (
    MAX_ALLOWED_TOKEN_IDS,
    MAX_BAD_WORD_CHARS,
    MAX_BAD_WORDS,
    MAX_CACHE_SALT_CHARS,
    MAX_LOGIT_BIAS,
    MAX_LOGPROB_TOKEN_IDS,
    MAX_STOP_STRING_CHARS,
    MAX_STOP_STRINGS,
    MAX_STOP_TOKEN_IDS,
    VOCAB_SIZE,
    ChatSampling,
    SamplingRequest,
    StructuredOutputs,
    check_sampling,
    sampled,
)
from vllm_sim.protocols.openai.chat import ChatEndpoint, ChatRequest
from vllm_sim.protocols.openai.completions import CompletionRequest, CompletionsEndpoint
from vllm_sim.protocols.vllm.generate import GenerateEndpoint

MESSAGES = [{"role": "user", "content": "Hi"}]
_chat = ChatEndpoint("/v1/chat/completions", CHAT)
_completions = CompletionsEndpoint("/v1/completions", COMPLETIONS)
_generate = GenerateEndpoint("/inference/v1/generate", GENERATE)


def chat(**fields: Any) -> Options:
    body = decode_body(json.dumps({"messages": MESSAGES, **fields}).encode(), _chat.decoder)
    return _chat.options(body)


def completion(**fields: Any) -> Options:
    body = json.dumps({"prompt": "Hi", **fields}).encode()
    return _completions.options(decode_body(body, _completions.decoder))


def generate(**params: Any) -> Options:
    body = json.dumps({"token_ids": [1, 2], "sampling_params": params}).encode()
    return _generate.options(decode_body(body, _generate.decoder))


def refused(call: Any, **fields: Any) -> RequestError:
    with pytest.raises(RequestError) as caught:
        call(**fields)
    assert caught.value.status == 400
    return caught.value


def refuses(message: str, param: str, **fields: Any) -> None:
    """Chat, completions and generate all refuse `fields` with this message and param."""
    for call in (chat, completion, generate):
        error = refused(call, **fields)
        assert (error.message, error.param) == (message, param), call.__name__


# ------------------------------------------------------------------ valid values


VALID = {
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 50,
    "min_p": 0.05,
    "presence_penalty": -2,
    "frequency_penalty": 2,
    "repetition_penalty": 1.1,
    "seed": -(2**63),
    "stop": ["\n", "END"],
    "stop_token_ids": [0, 2**32 - 1],
    "bad_words": ["foo"],
    "include_stop_str_in_output": True,
    "min_tokens": 2,
    "max_tokens": 2,
    "skip_special_tokens": False,
    "spaces_between_special_tokens": False,
    "prompt_logprobs": 20,
    "logit_bias": {"17": 100, "0": -100},
    "allowed_token_ids": [1, 2, 3],
    "structured_outputs": {"regex": "[a-z]+"},
    "repetition_detection": {"max_pattern_size": 4, "min_count": 3},
    "thinking_token_budget": -1,
}
REQUEST_ONLY = {
    "truncate_prompt_tokens": -1,
    "truncation_side": "left",
    "use_beam_search": False,
    "length_penalty": 0.5,
    "watermarking": None,
    "user": "u",
    "priority": 2**63 - 1,
    "request_id": "abc",
    "session_id": "s",
    "cache_salt": "salt",
    "return_tokens_as_token_ids": True,
    "return_token_ids": True,
    "routed_experts_prompt_start": 3,
    "vllm_xargs": {"a": 1, "b": [1, "x", 2.5]},
    "stream_interval": 2,
    "ec_transfer_params": {"x": 1},
}
CHAT_ONLY = {
    "echo": True,
    "add_generation_prompt": False,
    "continue_final_message": True,
    "add_special_tokens": True,
    "documents": [{"title": "t", "text": "x"}],
    "chat_template": "{{ messages }}",
    "chat_template_kwargs": {"enable_thinking": False},
    "media_io_kwargs": {"image": {"x": 1}},
    "mm_processor_kwargs": {"fps": 2},
    "parallel_tool_calls": False,
    "reasoning_effort": "max",
    "include_reasoning": False,
    "return_prompt_text": True,
    "logprob_token_ids": [5, 6],
    "logprobs": True,
}


def test_every_valid_field_is_accepted_and_kept() -> None:
    body = decode_body(
        json.dumps({"messages": MESSAGES, **VALID, **REQUEST_ONLY, **CHAT_ONLY}).encode(),
        _chat.decoder,
    )
    _chat.options(body)
    assert body.top_k == 50 and body.stop == ["\n", "END"] and body.seed == -(2**63)
    assert body.chat_template_kwargs == {"enable_thinking": False}
    assert body.structured_outputs == StructuredOutputs(regex="[a-z]+")
    assert body.reasoning_effort == "max" and body.request_id == "abc"
    completion(**VALID, **REQUEST_ONLY, echo=True, add_special_tokens=False, logprobs=1)
    generate(**VALID)


def test_defaults_are_vllm_defaults() -> None:
    body = decode_body(json.dumps({"messages": MESSAGES}).encode(), _chat.decoder)
    assert body.temperature is None and body.stop is None and body.bad_words == []
    assert body.min_tokens == 0 and body.skip_special_tokens and body.add_generation_prompt
    assert not body.echo and not body.add_special_tokens and body.parallel_tool_calls
    done = decode_body(b'{"prompt": "x"}', _completions.decoder)
    assert done.add_special_tokens and done.echo is False and done.suffix is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", "hot"),
        ("top_k", 1.5),
        ("min_p", [0]),
        ("seed", 2**63),
        ("stop", 5),
        ("stop", ["a", 1]),
        ("stop_token_ids", ["1"]),
        ("bad_words", None),  # vLLM's field takes no null
        ("min_tokens", None),
        ("skip_special_tokens", "yes"),
        ("logit_bias", {"1": "x"}),
        ("truncate_prompt_tokens", -2),
        ("truncation_side", "middle"),
        ("request_id", None),
        ("priority", 2**63),
        ("reasoning_effort", "extreme"),
        ("chat_template_kwargs", []),
        ("documents", [{"title": 1}]),
        ("vllm_xargs", {"a": {"b": 1}}),
        ("stream_interval", 0),
        ("structured_outputs", {"choice": "a"}),
    ],
)
def test_a_wrong_type_names_the_field(field: str, value: object) -> None:
    # vLLM 0.32 refuses what its schema rejects with pydantic's entry, located under `body`.
    error = refused(chat, **{field: value})
    assert error.message.startswith(VALIDATION_PREFIX), error.message
    assert error.error_type == VALIDATION_TYPE, error.error_type
    assert error.param is not None and error.param.split(".")[:2] == ["body", field]
    assert f"'loc': '{error.param}'" in error.message, error.message


def test_unknown_fields_are_ignored() -> None:
    chat(guided_json={"type": "object"}, best_of=3, whatever=[1])
    completion(best_of=2, guided_regex="x")


# ------------------------------------------------------------------ range rules


@pytest.mark.parametrize("value", [-0.5, 2.5, 100])
def test_temperature_is_within_0_and_2(value: float) -> None:
    v = float(value)
    message = (
        f"temperature must be non-negative, got {v}."
        if v < 0
        else f"temperature must be in [0, 2], got {v}."
    )
    refuses(f"{message} (parameter=temperature, value={v})", "temperature", temperature=value)


def test_temperature_bounds_are_accepted() -> None:
    for value in (0, 2, 0.001):
        chat(temperature=value)


def test_a_non_finite_temperature_is_refused() -> None:
    body = ChatRequest(messages=[], temperature=float("inf"))
    with pytest.raises(RequestError) as caught:
        check_sampling(body, Options(None, "max_tokens"))
    assert caught.value.message == (
        "temperature must be a finite number, got inf. (parameter=temperature, value=inf)"
    )


@pytest.mark.parametrize("value", [0, -0.1, 1.5])
def test_top_p_is_in_0_1(value: float) -> None:
    v = float(value)
    message = f"top_p must be in (0, 1], got {v}. (parameter=top_p, value={v})"
    refuses(message, "top_p", top_p=value)
    chat(top_p=1)


def test_top_k_is_0_minus_1_or_positive() -> None:
    for value in (-1, 0, 1, 1000):
        chat(top_k=value)
        generate(top_k=value)
    refuses("top_k must be 0 (disable), or at least 1, got -2.", "top_k", top_k=-2)


@pytest.mark.parametrize("value", [-0.01, 1.01])
def test_min_p_is_in_0_1(value: float) -> None:
    refuses(f"min_p must be in [0, 1], got {value}.", "min_p", min_p=value)


@pytest.mark.parametrize("field", ["presence_penalty", "frequency_penalty"])
@pytest.mark.parametrize("value", [-2.5, 3])
def test_penalties_are_within_2(field: str, value: float) -> None:
    refuses(f"{field} must be in [-2, 2], got {float(value)}.", field, **{field: value})


@pytest.mark.parametrize("value", [0, -1])
def test_repetition_penalty_is_positive(value: float) -> None:
    message = f"repetition_penalty must be greater than zero, got {float(value)}."
    refuses(message, "repetition_penalty", repetition_penalty=value)
    chat(repetition_penalty=100)  # no upper bound


def test_min_tokens() -> None:
    refuses("min_tokens must be greater than or equal to 0, got -1.", "min_tokens", min_tokens=-1)
    message = "min_tokens must be less than or equal to max_tokens=3, got 4."
    for call in (chat, completion, generate):
        assert refused(call, min_tokens=4, max_tokens=3).message == message
    error = refused(chat, min_tokens=4, max_completion_tokens=3, max_tokens=10)
    assert error.message == message and error.param == "min_tokens"
    chat(min_tokens=3, max_tokens=3)
    chat(min_tokens=50)  # no max_tokens: the context bounds it, not checked here


def test_stop_strings() -> None:
    refuses("stop cannot contain an empty string.", "stop", stop="")
    refuses("stop cannot contain an empty string.", "stop", stop=["a", ""])
    chat(stop="a")
    chat(stop=None)


def test_bad_words_cannot_be_empty() -> None:
    message = "bad_words cannot contain an empty string. Got bad_words=['a', '']"
    refuses(message, "bad_words", bad_words=["a", "", "a", ""])


def test_greedy_sampling_takes_one_choice() -> None:
    error = refused(chat, temperature=0, n=2)
    assert (error.message, error.param) == ("n must be 1 when using greedy sampling, got 2.", "n")
    assert refused(completion, temperature=0.0, n=3).param == "n"
    chat(temperature=0.000001, n=2)  # raised to 0.01 by vLLM: not greedy
    chat(temperature=0, n=2, use_beam_search=True)  # n is the beam width there
    chat(temperature=0, n=1)


def test_prompt_logprobs() -> None:
    over = "Requested prompt logprobs of 21, which is greater than max allowed: 20"
    refuses(f"{over} (parameter=prompt_logprobs, value=21)", "prompt_logprobs", prompt_logprobs=21)
    every = f"Requested prompt logprobs of {VOCAB_SIZE}, which is greater than max allowed: 20"
    refuses(
        f"{every} (parameter=prompt_logprobs, value={VOCAB_SIZE})",
        "prompt_logprobs",
        prompt_logprobs=-1,
    )
    negative = "`prompt_logprobs` must be a positive value or -1."
    for call in (chat, completion):
        error = refused(call, prompt_logprobs=-2)
        assert error.message == f"{negative} (parameter=prompt_logprobs, value=-2)"
        error = refused(call, prompt_logprobs=1, stream=True)
        assert error.message == (
            "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)"
        )
        call(prompt_logprobs=0, stream=True)
    engine = "prompt_logprobs must be non-negative or -1, got -2."
    error = refused(generate, prompt_logprobs=-2)
    assert error.message == f"{engine} (parameter=prompt_logprobs, value=-2)"


def test_logit_bias_keys_are_token_ids() -> None:
    message = (
        "logit_bias contains key(s) that cannot be converted to integer token IDs: ['a', '1.5'] "
        "(parameter=logit_bias, value=['a', '1.5'])"
    )
    refuses(message, "logit_bias", logit_bias={"a": 1, "2": 1, "1.5": 0})
    out = f"token_id(s) [-1, {VOCAB_SIZE}] in logit_bias contain out-of-vocab token ids."
    message = (
        f"{out} Vocabulary size: {VOCAB_SIZE} (parameter=logit_bias, value=[-1, {VOCAB_SIZE}])"
    )
    refuses(message, "logit_bias", logit_bias={"-1": 1, str(VOCAB_SIZE): 1, "3": 0})
    chat(logit_bias={" 7 ": 500})  # int() takes it; the bias itself is clamped, not refused


def test_allowed_token_ids() -> None:
    refuses("allowed_token_ids is not None and empty!", "allowed_token_ids", allowed_token_ids=[])
    message = "allowed_token_ids contains out-of-vocab token id!"
    refuses(message, "allowed_token_ids", allowed_token_ids=[1, -1])
    refuses(message, "allowed_token_ids", allowed_token_ids=[VOCAB_SIZE])


def test_thinking_token_budget() -> None:
    message = (
        "`thinking_token_budget` must be a non-negative integer or -1 for unlimited. "
        "(parameter=thinking_token_budget, value=-2)"
    )
    refuses(message, "thinking_token_budget", thinking_token_budget=-2)
    chat(thinking_token_budget=0)


def test_repetition_detection() -> None:
    sizes = (
        "max_pattern_size, min_pattern_size must be >=0, with min_pattern_size <= max_pattern_size."
    )
    error = refused(chat, repetition_detection={"max_pattern_size": 2, "min_pattern_size": 3})
    assert error.message.startswith(sizes) and error.param == "repetition_detection"
    error = refused(generate, repetition_detection={"max_pattern_size": 2, "min_count": 1})
    assert error.message.startswith("min_count must be >= 2")
    chat(repetition_detection={})


def test_structured_outputs_take_one_constraint() -> None:
    one_kind = (
        "You can only use one kind of constraints for structured outputs "
        "('json', 'regex' or 'choice')."
    )
    both = {"json": {"type": "object"}, "regex": "x"}
    assert refused(chat, structured_outputs=both).message == one_kind
    named = refused(completion, structured_outputs=both).message
    assert named == f"{one_kind} (parameter=structured_outputs)"
    error = refused(generate, structured_outputs=both)
    assert error.message.startswith("You can only use one kind of structured outputs constraint")
    error = refused(chat, structured_outputs={"grammar": "g", "json_object": True})
    assert "but multiple are specified" in error.message
    error = refused(chat, structured_outputs={})
    assert "but none are specified" in error.message
    assert error.param == "structured_outputs"
    message = "Choice '[]' cannot be an empty list"
    refuses(message, "structured_outputs", structured_outputs={"choice": []})


# ------------------------------------------------------------------ request rules


def test_continue_final_message_needs_no_generation_prompt() -> None:
    error = refused(chat, continue_final_message=True)
    assert error.message == (
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
    )
    assert error.param == "continue_final_message"
    chat(continue_final_message=True, add_generation_prompt=False)


def test_cache_salt_is_not_empty() -> None:
    error = refused(chat, cache_salt="")
    assert error.message == (
        "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)"
    )
    assert refused(completion, cache_salt="").param == "cache_salt"


def test_logprob_token_ids() -> None:
    suffix = "(parameter=logprob_token_ids)"
    cases: list[tuple[Any, dict[str, Any], str]] = [
        (chat, {"logprob_token_ids": [], "logprobs": True}, "must not be an empty list."),
        (chat, {"logprob_token_ids": [1]}, "`logprobs` must be set to true."),
        (chat, {"logprob_token_ids": [1], "logprobs": True, "use_beam_search": True}, "beam"),
        (completion, {"logprob_token_ids": [1]}, "`logprobs` must be set."),
        (
            completion,
            {"logprob_token_ids": [1], "logprobs": 1, "echo": True, "max_tokens": 0},
            "echo",
        ),
    ]
    for call, fields, part in cases:
        error = refused(call, **fields)
        assert part in error.message and error.message.endswith(suffix), error.message
        assert error.param == "logprob_token_ids"
    chat(logprob_token_ids=[1], logprobs=True)
    completion(logprob_token_ids=[1], logprobs=0)


def test_suffix_is_refused() -> None:
    for suffix in ("s", ""):
        error = refused(completion, suffix=suffix)
        assert error.message == "suffix is only supported for models with FIM completion rendering"
        assert error.param == "suffix"
    completion(suffix=None)


def test_prompt_embeds_are_refused() -> None:
    error = refused(completion, prompt_embeds="AAAA")
    assert error.message == (
        "You must set `--enable-prompt-embeds` to input `prompt_embeds`. (parameter=prompt_embeds)"
    )
    completion(prompt_embeds=[])


@pytest.mark.parametrize("call", [chat, completion])
@pytest.mark.parametrize(
    "options", [{"include_usage": True}, {"include_usage": None}, {"continuous_usage_stats": False}]
)
def test_stream_options_need_stream(call: Any, options: dict[str, Any]) -> None:
    message = "Stream options can only be defined when `stream=True`. (parameter=stream_options)"
    for stream in (False, None):
        error = refused(call, stream_options=options, stream=stream)
        assert (error.message, error.param) == (message, "stream_options")
    assert refused(call, stream_options=options).param == "stream_options"
    call(stream_options=options, stream=True)


def test_empty_or_null_stream_options_need_no_stream() -> None:
    chat(stream_options={})
    chat(stream_options=None)
    completion(stream_options={})
    assert chat(stream_options={"include_usage": True}, stream=True).include_usage


def test_generate_checks_stream_options_too() -> None:
    body = {"token_ids": [1], "sampling_params": {}, "stream_options": {"include_usage": True}}
    with pytest.raises(RequestError) as caught:
        _generate.options(decode_body(json.dumps(body).encode(), _generate.decoder))
    assert caught.value.param == "stream_options"


# ------------------------------------------------------------------ bounds


@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("stop", ["s"] * (MAX_STOP_STRINGS + 1), "stop"),
        ("stop", "x" * (MAX_STOP_STRING_CHARS + 1), "stop"),
        ("stop", ["x" * (MAX_STOP_STRING_CHARS + 1)], "stop[0]"),
        ("stop_token_ids", [1] * (MAX_STOP_TOKEN_IDS + 1), "stop_token_ids"),
        ("bad_words", ["w"] * (MAX_BAD_WORDS + 1), "bad_words"),
        ("bad_words", ["w" * (MAX_BAD_WORD_CHARS + 1)], "bad_words[0]"),
        ("logit_bias", {str(i): 1 for i in range(MAX_LOGIT_BIAS + 1)}, "logit_bias"),
        ("allowed_token_ids", [1] * (MAX_ALLOWED_TOKEN_IDS + 1), "allowed_token_ids"),
        ("logprob_token_ids", [1] * (MAX_LOGPROB_TOKEN_IDS + 1), "logprob_token_ids"),
        ("cache_salt", "s" * (MAX_CACHE_SALT_CHARS + 1), "cache_salt"),
    ],
)
def test_lists_are_bounded(field: str, value: object, param: str) -> None:
    error = refused(chat, **{field: value})
    assert error.message.startswith(PARSE_ERROR_PREFIX) and error.param == param, error.message


def test_bounds_themselves_are_accepted() -> None:
    chat(
        stop=["x" * MAX_STOP_STRING_CHARS] * MAX_STOP_STRINGS,
        stop_token_ids=[1] * MAX_STOP_TOKEN_IDS,
        bad_words=["w"] * MAX_BAD_WORDS,
        logit_bias={str(i): 1 for i in range(MAX_LOGIT_BIAS)},
        allowed_token_ids=[1] * MAX_ALLOWED_TOKEN_IDS,
    )


def test_the_request_bases_share_one_field_set() -> None:
    assert issubclass(ChatRequest, SamplingRequest)
    assert issubclass(CompletionRequest, SamplingRequest)


@pytest.mark.parametrize("body_type", [ChatRequest, CompletionRequest])
def test_default_sampling_fields_pass_every_check_and_change_nothing(body_type: Any) -> None:
    # The premise of the fast path that skips the checks for a body setting no field.
    body = body_type(**({"messages": MESSAGES} if body_type is ChatRequest else {"prompt": "x"}))
    for n, max_tokens in ((None, None), (3, 1), (1, 0)):
        options = Options(max_tokens, "max_tokens", n=n)
        check_sampling(body, options)
        assert sampled(options, body) == Options(max_tokens, "max_tokens", n=n)


def test_any_sampling_field_set_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    # A body that sets any one sampling field leaves the fast path for the checks.
    checked: list[str] = []
    monkeypatch.setattr(sampling, "check_sampling", lambda body, options: checked.append("x"))
    monkeypatch.setattr(sampling, "sampled", lambda options, body: options)
    body = msgspec.convert({"messages": MESSAGES}, ChatRequest)
    fields = ChatSampling.__struct_fields__[len(OpenAIBody.__struct_fields__) :]
    assert "temperature" in fields and "return_prompt_text" in fields
    for field in fields:
        changed = msgspec.structs.replace(body, **{field: object()})
        sampling.sampling_options(Options(None, "max_tokens"), changed)
    assert len(checked) == len(fields)
    sampling.sampling_options(Options(None, "max_tokens"), body)
    assert len(checked) == len(fields)
