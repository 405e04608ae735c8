"""POST /v1/completions: the legacy text API, with its four prompt forms."""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_sim.api.common import (
    PARSE_ERROR_PREFIX,
    ApiContext,
    check_output_limit,
    decode_body,
    unix_now,
    wait_for_result,
)
from vllm_sim.api.logprobs import check_logprobs_count, completion_logprobs
from vllm_sim.api.streaming import OpenAIChunks, json_str, sse_events
from vllm_sim.api.transfer import (
    KvTransferParams,
    cache_threshold_forced,
    check_transfer,
    prefill_answer,
)
from vllm_sim.api.usage import usage_of
from vllm_sim.engine.errors import RequestError
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.engine.tokenizer import Tokenizer
from vllm_sim.server.http import AnyResponse, HttpRequest, StreamingResponse, json_response

PROMPT_FORMS = (
    "prompt must be a string, an array of strings, an array of token ids, "
    "or an array of arrays of token ids"
)
_MAX_TOKEN_ID = 2**32 - 1


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class CompletionRequest(msgspec.Struct):
    model: str | None = None
    # One of four shapes msgspec cannot express as a union; checked by parse_prompts.
    prompt: Any = None
    # vLLM declares these Optional: an explicit null means the default.
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    max_tokens: int | None = None
    cache_hit_threshold: float | None = None
    kv_transfer_params: KvTransferParams | None = None
    ignore_eos: bool | None = None
    logprobs: int | None = None


_decoder = msgspec.json.Decoder(CompletionRequest)


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


def _validate(body: CompletionRequest) -> None:
    if body.n is not None and body.n < 1:
        raise RequestError(400, "n must be at least 1", param="n")
    check_output_limit(body.max_tokens, "max_tokens", body.ignore_eos)
    check_logprobs_count(body.logprobs, "logprobs")


async def handle(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _decoder)
    ctx.failures.check(request)
    request_id = ctx.request_id(request)
    model = ctx.resolve_model(body.model)
    prompts = parse_prompts(body.prompt, ctx.tokenizer)
    _validate(body)
    check_transfer(body.kv_transfer_params, bool(body.stream))
    transfer = body.kv_transfer_params or KvTransferParams()
    generation = GenerationRequest(
        request_id=request_id,
        model=model,
        prompts=prompts,
        n=body.n or 1,
        max_tokens=body.max_tokens,
        ignore_eos=bool(body.ignore_eos),
        arrival_time=unix_now(),
        do_remote_prefill=transfer.do_remote_prefill,
        do_remote_decode=transfer.do_remote_decode,
        cache_hit_threshold=body.cache_hit_threshold,
        force_cache_threshold=cache_threshold_forced(request),
    )
    stream = ctx.engine.submit(generation)
    headers = ctx.response_headers(request_id)
    top = body.logprobs if body.logprobs is not None else -1
    rid = f"cmpl-{request_id}"
    if body.stream:
        include_usage = body.stream_options is not None and bool(body.stream_options.include_usage)
        encoder = CompletionChunks(stream, rid, model, top, include_usage)
        return StreamingResponse(sse_events(stream, request, encoder), headers=headers)
    await wait_for_result(stream, request)
    answer = _completion(stream, rid, model, top)
    if transfer.do_remote_decode:
        answer["kv_transfer_params"] = prefill_answer(
            stream.sequences[0], ctx.pod_ip, ctx.block_size
        )
    return json_response(answer, headers=headers)


def _completion(stream: RequestStream, rid: str, model: str, top: int) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(stream.request.arrival_time),
        "model": model,
        "choices": [_choice(seq, top) for seq in stream.sequences],
        "usage": usage_of(stream.sequences).openai_json(),
    }


def _choice(seq: Sequence, top: int) -> dict[str, Any]:
    pieces = seq.output_pieces
    return {
        "index": seq.index,
        "text": "".join(pieces),
        "logprobs": completion_logprobs(pieces, 0, top, 0) if top >= 0 else None,
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

    def opening(self, seq: Sequence) -> bytes:
        return b""

    def tokens(self, seq: Sequence, start: int, end: int) -> bytes:
        pieces = seq.output_pieces
        if self._top < 0:
            return b"".join(
                self._chunk(seq, json_str(pieces[i]), b"null", b"null") for i in range(start, end)
            )
        parts = []
        offset = self._offsets.get(seq.index, 0)
        for i in range(start, end):
            logprobs = completion_logprobs([pieces[i]], i, self._top, offset)
            offset += len(pieces[i].encode())
            parts.append(
                self._chunk(seq, json_str(pieces[i]), msgspec.json.encode(logprobs), b"null")
            )
        self._offsets[seq.index] = offset
        return b"".join(parts)

    def finish(self, seq: Sequence) -> bytes:
        return self._chunk(seq, b'""', b"null", json_str(seq.finish_reason or "stop"))
