"""POST /v1/completions: the legacy text API, with its four prompt forms."""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_sim.api.body import PARSE_ERROR_PREFIX
from vllm_sim.api.context import ApiContext
from vllm_sim.api.endpoint import Call, Endpoint, Options, Plan
from vllm_sim.api.logprobs import CompletionLogprobs, check_logprobs_count
from vllm_sim.api.sampling import CompletionSampling, check_sampling
from vllm_sim.api.streaming import OpenAIChunks, encoded_choices, json_str, openai_object
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.request import Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.engine.tokenizer import Tokenizer
from vllm_sim.errors import RequestError

PROMPT_FORMS = (
    "prompt must be a string, an array of strings, an array of token ids, "
    "or an array of arrays of token ids"
)
_MAX_TOKEN_ID = 2**32 - 1


class CompletionRequest(CompletionSampling, kw_only=True):
    # One of four shapes msgspec cannot express as a union (it allows one array type in a
    # union), so parse_prompts checks it.
    prompt: Any = None
    n: int | None = None
    max_tokens: int | None = None
    cache_hit_threshold: float | None = None
    logprobs: int | None = None


def _is_token_id(value: object) -> bool:
    return type(value) is int and 0 <= value <= _MAX_TOKEN_ID


def parse_prompts(prompt: object, tokenizer: Tokenizer) -> list[Prompt]:
    """The prompt field as a list of prompts, each tokenized (or taken as token ids)."""
    if prompt is None or prompt == []:
        raise RequestError(400, "prompt array must contain at least one prompt", "prompt")
    if isinstance(prompt, str):
        prompt = [prompt]
    if not isinstance(prompt, list):
        raise RequestError(400, PARSE_ERROR_PREFIX + PROMPT_FORMS, "prompt")
    if all(isinstance(item, str) for item in prompt):
        if any(item == "" for item in prompt):
            raise RequestError(400, "prompt must not contain an empty string", "prompt")
        return [Prompt(tokenizer.encode(text), text) for text in prompt]
    if all(_is_token_id(item) for item in prompt):
        return [Prompt(list(prompt))]
    if all(isinstance(item, list) and all(_is_token_id(i) for i in item) for item in prompt):
        if any(not item for item in prompt):
            raise RequestError(400, "prompt must not contain an empty token-id array", "prompt")
        return [Prompt(list(item)) for item in prompt]
    raise RequestError(400, PARSE_ERROR_PREFIX + PROMPT_FORMS, "prompt")


class CompletionsEndpoint(Endpoint[CompletionRequest]):
    decoder = msgspec.json.Decoder(CompletionRequest)

    def options(self, body: CompletionRequest) -> Options:
        options = Options.of(
            body, body.max_tokens, "max_tokens", body.n, body.cache_hit_threshold, body.logprobs
        )
        check_sampling(body, options)
        return options

    def plan(self, ctx: ApiContext, body: CompletionRequest) -> Plan:
        check_logprobs_count(body.logprobs, "logprobs")
        return Plan(parse_prompts(body.prompt, ctx.tokenizer))

    def chunks(self, call: Call[CompletionRequest]) -> CompletionChunks:
        usage = call.options.include_usage
        return CompletionChunks(
            call.stream, f"cmpl-{call.request_id}", call.model, _top(call), usage
        )

    def answer(self, call: Call[CompletionRequest]) -> dict[str, Any]:
        return _completion(call.stream, f"cmpl-{call.request_id}", call.model, _top(call))


def _top(call: Call[CompletionRequest]) -> int:
    logprobs = call.body.logprobs
    return logprobs if logprobs is not None else -1


def _completion(stream: RequestStream, rid: str, model: str, top: int) -> dict[str, Any]:
    logprobs = CompletionLogprobs(top) if top >= 0 else None
    choices = encoded_choices(stream, _choice, logprobs)
    return openai_object(stream, rid, "text_completion", model, choices)


def _choice(seq: Sequence, logprobs: CompletionLogprobs | None) -> dict[str, Any]:
    pieces = seq.output_pieces
    return {
        "index": seq.index,
        "text": "".join(pieces),
        "logprobs": logprobs.of(pieces, 0, 0) if logprobs is not None else None,
        "finish_reason": seq.finish_reason,
    }


class CompletionChunks(OpenAIChunks):
    """Text completion chunks: no role chunk, one token per chunk, a finish chunk."""

    OBJECT = "text_completion"
    BODY_KEY = b'"text"'

    def __init__(
        self, stream: RequestStream, rid: str, model: str, top: int, include_usage: bool
    ) -> None:
        super().__init__(stream, rid, model, top, include_usage)
        self._offsets: dict[int, int] = {}
        self._logprobs = CompletionLogprobs(top) if top >= 0 else None

    def opening(self, seq: Sequence) -> bytes:
        return b""

    def tokens(self, seq: Sequence, start: int, end: int) -> bytes:
        pieces = seq.output_pieces
        encoder = self._logprobs
        if encoder is None:
            return b"".join(
                self._chunk(seq, json_str(pieces[i]), b"null", b"null") for i in range(start, end)
            )
        parts = []
        offset = self._offsets.get(seq.index, 0)
        for i in range(start, end):
            logprobs = encoder.of([pieces[i]], i, offset)
            offset += len(pieces[i].encode())
            parts.append(
                self._chunk(seq, json_str(pieces[i]), msgspec.json.encode(logprobs), b"null")
            )
        self._offsets[seq.index] = offset
        return b"".join(parts)

    def finish(self, seq: Sequence) -> bytes:
        return self._chunk(seq, b'""', b"null", json_str(seq.finish_reason or Finish.STOP))
