"""POST /inference/v1/generate: vLLM's token-in, token-out endpoint.

The prompt arrives as token ids and is never re-tokenized; the answer is token ids. It runs
through the same engine as the text endpoints (queue, latency, KV cache, metrics, P/D).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from vllm_sim.engine.request import Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.errors import RequestError
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.endpoint import Call, Endpoint, OpenAIBody, Options, Plan
from vllm_sim.frontend.transfer import KvTransferParams
from vllm_sim.frontend.usage import usage_of
from vllm_sim.protocols.common.encoding import OpenAIStreamErrors, json_str
from vllm_sim.protocols.common.sampling import EngineSampling, check_sampling

TokenId = Annotated[int, msgspec.Meta(ge=0, lt=2**32)]
# What an encoder-only node hands the decoder for each multimodal item (vLLM's EC connector).
_EC_ENTRY = {
    "peer_host": "DUMMY",
    "peer_port": 1234,
    "size_bytes": 2359296,
    "nixl_agent_metadata_b64": "TklYTF9NRVRBREFUQV9QTEFDRUhPTERFUg==",
}


class SamplingParams(EngineSampling, kw_only=True):
    max_tokens: int | None = None
    extra_args: dict[str, Any] | None = None


class Features(msgspec.Struct):
    mm_hashes: dict[str, list[str]] | None = None


class GenerateRequest(OpenAIBody, kw_only=True):
    token_ids: list[TokenId] | None = None
    sampling_params: SamplingParams | None = None
    features: Features | None = None


class GenerateEndpoint(Endpoint[GenerateRequest]):
    decoder = msgspec.json.Decoder(GenerateRequest)

    def options(self, body: GenerateRequest) -> Options:
        if body.token_ids is None:
            raise RequestError(400, "Missing input token_ids", "token_ids")
        params = body.sampling_params
        if params is None:
            raise RequestError(400, "Missing sampling_params field", "sampling_params")
        options = Options.of(body, params.max_tokens, "sampling_params.max_tokens")
        check_sampling(params, options)
        options.transfer = _transfer(body, params)
        return options

    def plan(self, ctx: ApiContext, body: GenerateRequest) -> Plan:
        return Plan([Prompt(list(body.token_ids or ()))])

    def chunks(self, call: Call[GenerateRequest]) -> TokenFrames:
        return TokenFrames(call.request_id, call.options.include_usage)

    def answer(self, call: Call[GenerateRequest]) -> dict[str, Any]:
        seq = call.stream.sequences[0]
        choice = {"index": 0, "finish_reason": seq.finish_reason, "token_ids": seq.output_ids}
        return {
            "request_id": call.request_id,
            "choices": [choice],
            "ec_transfer_params": _ec_params(call.ctx, call.body.features),
        }


def _transfer(body: GenerateRequest, params: SamplingParams) -> KvTransferParams | None:
    """The root kv_transfer_params, else the one vLLM's router puts in extra_args."""
    if body.kv_transfer_params is not None:
        return body.kv_transfer_params
    nested = (params.extra_args or {}).get("kv_transfer_params")
    if nested is None:
        return None
    try:
        return msgspec.convert(nested, KvTransferParams)
    except msgspec.ValidationError as error:
        raise RequestError(
            400, f"invalid kv_transfer_params: {error}", "sampling_params.extra_args"
        ) from None


def _ec_params(ctx: ApiContext, features: Features | None) -> dict[str, Any] | None:
    """Encoder-only nodes say where each item's encoder output can be fetched."""
    if not ctx.settings.mm_encoder_only or features is None:
        return None
    hashes = [h for items in (features.mm_hashes or {}).values() for h in items]
    return {h: dict(_EC_ENTRY) for h in hashes}


class TokenFrames(OpenAIStreamErrors):
    """One frame per token; the last token's frame carries the finish reason."""

    def __init__(self, request_id: str, include_usage: bool) -> None:
        self._head = b'data: {"request_id":' + json_str(request_id) + b',"choices":[{"index":0,'
        self._request_id = request_id
        self._include_usage = include_usage

    def opening(self, seq: Sequence) -> bytes:
        return b""

    def _frame(self, token_ids: list[int], finish: str | None) -> bytes:
        reason = b"null" if finish is None else json_str(finish)
        ids = msgspec.json.encode(token_ids)
        return self._head + b'"finish_reason":' + reason + b',"token_ids":' + ids + b"}]}\n\n"

    def tokens(self, seq: Sequence, start: int, end: int) -> bytes:
        ids = seq.output_ids
        last = len(ids) - 1
        return b"".join(
            self._frame([ids[i]], seq.finish_reason if i == last and seq.finished else None)
            for i in range(start, end)
        )

    def finish(self, seq: Sequence) -> bytes:
        if seq.output_ids:
            return b""  # the last token frame already said why it stopped
        return self._frame([], seq.finish_reason)

    def closing(self, stream: RequestStream) -> bytes:
        if not self._include_usage:
            return b"data: [DONE]\n\n"
        usage = {
            "request_id": self._request_id,
            "choices": [],
            "usage": usage_of(stream.sequences).openai_json(),
        }
        return b"data: " + msgspec.json.encode(usage) + b"\n\ndata: [DONE]\n\n"
