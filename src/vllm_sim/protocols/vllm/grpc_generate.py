"""The Generate RPC's messages in the pipeline's terms: a GenerateRequest parsed into the
body the one pipeline runs (sampling params, token ids or text, P/D transfer params), and
the answers encoded as the contract's messages (a chunk per token, then the closing one),
which the one token driver writes as it writes every other protocol's stream.
"""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_sim.engine.generation.logprobs import token_logprob, top_alternatives
from vllm_sim.engine.request import Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.errors import RequestError
from vllm_sim.frontend.capabilities import GENERATE
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.endpoint import Call, Endpoint, OpenAIBody, Options, Plan
from vllm_sim.frontend.transfer import KvTransferParams, prefill_answer
from vllm_sim.proto import engine_pb2 as pb
from vllm_sim.protocols.common.logprobs import check_logprobs_count
from vllm_sim.protocols.common.prompts import in_vocabulary
from vllm_sim.protocols.common.sampling import EngineSampling, check_sampling, engine_sampled
from vllm_sim.protocols.vllm.grpc_names import GENERATE_PATH


class GrpcSampling(EngineSampling, kw_only=True):
    max_tokens: int | None = None
    logprobs: int | None = None


class GrpcGenerateBody(OpenAIBody, kw_only=True):
    """A Generate request in the pipeline's terms: token ids, or a text to tokenize."""

    token_ids: list[int] | None = None
    text: str | None = None
    sampling_params: GrpcSampling | None = None


# SamplingParams fields the engine reads, by their name in both the contract and the
# token-in endpoint's sampling params. Proto3 leaves a plain field at its zero when unset,
# so only `optional` fields (and non-zero plain ones) say something was asked for.
_OPTIONAL_SAMPLING = ("temperature", "max_tokens", "seed", "logprobs", "prompt_logprobs")
_PLAIN_SAMPLING = (
    "top_p",
    "top_k",
    "min_p",
    "min_tokens",
    "ignore_eos",
    "n",
    "include_stop_str_in_output",
)
_LIST_SAMPLING = ("stop", "stop_token_ids")


def sampling_of(params: pb.SamplingParams) -> dict[str, Any]:
    """The sampling params a Generate asked for, as the token-in endpoint's JSON."""
    asked: dict[str, Any] = {}
    for name in _OPTIONAL_SAMPLING:
        if params.HasField(name):
            asked[name] = getattr(params, name)
    for name in _PLAIN_SAMPLING:
        value = getattr(params, name)
        if value:
            asked[name] = value
    for name in _LIST_SAMPLING:
        values = list(getattr(params, name))
        if values:
            asked[name] = values
    return asked


def body_of(message: pb.GenerateRequest) -> GrpcGenerateBody:
    """The pipeline's body of a Generate request; RequestError naming a field it refuses."""
    params = sampling_of(message.sampling_params)
    ignore_eos = bool(params.pop("ignore_eos", False))
    try:
        sampling = msgspec.convert(params, GrpcSampling)
    except msgspec.ValidationError as error:
        raise RequestError(400, f"invalid sampling_params: {error}", "sampling_params") from None
    which = message.WhichOneof("input")
    return GrpcGenerateBody(
        stream=message.stream,
        ignore_eos=ignore_eos or None,
        kv_transfer_params=_transfer_of(message),
        token_ids=list(message.tokenized.input_ids) if which == "tokenized" else None,
        text=message.text if which == "text" else None,
        sampling_params=sampling,
    )


def _transfer_of(message: pb.GenerateRequest) -> KvTransferParams | None:
    """vLLM's kv_transfer_params as JSON (what P/D routers send), else the typed pair of
    a bootstrap address."""
    if message.HasField("kv_transfer_params_json"):
        try:
            return msgspec.json.decode(message.kv_transfer_params_json, type=KvTransferParams)
        except msgspec.DecodeError as error:
            message_ = f"invalid kv_transfer_params_json: {error}"
            raise RequestError(400, message_, "kv_transfer_params_json") from None
    if message.HasField("kv_transfer_params"):
        typed = message.kv_transfer_params
        return KvTransferParams(remote_host=typed.remote_host, remote_port=typed.remote_port)
    return None


class GrpcGenerateEndpoint(Endpoint[GrpcGenerateBody]):
    """Generate, as the pipeline runs it. Its answers are messages, written by the
    servicer, not by the HTTP encoders."""

    def __init__(self) -> None:
        super().__init__(GENERATE_PATH, GENERATE)

    def options(self, body: GrpcGenerateBody) -> Options:
        params = body.sampling_params or GrpcSampling()
        options = Options.of(body, params.max_tokens, "sampling_params.max_tokens")
        check_sampling(params, options)
        check_logprobs_count(params.logprobs, "sampling_params.logprobs")
        options.transfer = body.kv_transfer_params
        options.logprobs = params.logprobs
        engine_sampled(options, params)
        return options

    def plan(self, ctx: ApiContext, body: GrpcGenerateBody) -> Plan:
        if body.token_ids:
            return Plan([Prompt(in_vocabulary(body.token_ids, ctx.tokenizer, "tokenized"))])
        text = body.text or ""  # neither input: the empty text
        ids = ctx.tokenizer.encode(text, True) if text else []
        if not ids:
            raise RequestError(400, "The decoder prompt cannot be empty", "text")
        return Plan([Prompt(ids, text)])

    def chunks(self, call: Call[GrpcGenerateBody]) -> GenerateChunks:
        return GenerateChunks(call)


class GenerateChunks:
    """Generate's stream framing: one chunk message per token, then the closing message.
    A call that fails after it began ends with a status, not a message: `error` raises."""

    def __init__(self, call: Call[GrpcGenerateBody]) -> None:
        self._call = call
        self._logprobs = _Logprobs(call) if call.options.logprobs is not None else None

    def opening(self, seq: Sequence) -> Messages:
        return []

    def tokens(self, seq: Sequence, start: int, end: int) -> Messages:
        ids, logprobs = seq.output_ids, self._logprobs
        messages = []
        for index in range(start, end):
            chunk = pb.GenerateStreamChunk(
                token_ids=[ids[index]],
                prompt_tokens=seq.prompt_tokens,
                completion_tokens=1,
                cached_tokens=seq.cached_tokens,
            )
            if logprobs is not None:
                chunk.output_logprobs.CopyFrom(logprobs.of(seq, index, index + 1))
            messages.append(pb.GenerateResponse(chunk=chunk))
        return messages

    def finish(self, seq: Sequence) -> Messages:
        return []

    def closing(self, stream: RequestStream) -> Messages:
        return [complete(self._call, whole=False)]

    def error(self, error: RequestError) -> Messages:
        raise error


Messages = list[pb.GenerateResponse]


def complete(call: Call[GrpcGenerateBody], whole: bool) -> pb.GenerateResponse:
    """The closing message: every output id when nothing was streamed, else none (the
    chunks carried them); why it stopped, the draft tokens speculative decoding verified
    and accepted, and where a prefill node's KV can be fetched."""
    seq = call.stream.sequences[0]
    ids = seq.output_ids[: seq.emitted] if whole else []
    complete = pb.GenerateComplete(
        output_ids=ids,
        finish_reason=str(seq.finish_reason or "stop"),
        prompt_tokens=seq.prompt_tokens,
        completion_tokens=len(ids),
        cached_tokens=seq.cached_tokens,
        spec_accepted_tokens=seq.spec_accepted_tokens,
        spec_draft_tokens=seq.spec_draft_tokens,
    )
    stop = seq.stop_reason
    if isinstance(stop, str):
        complete.matched_stop_str = stop
    elif isinstance(stop, int):
        complete.matched_token_id = stop
    if whole and call.options.logprobs is not None:
        complete.output_logprobs.CopyFrom(_Logprobs(call).of(seq, 0, len(ids)))
    transfer = call.options.transfer
    if transfer is not None and transfer.do_remote_decode:
        settings = call.ctx.settings
        answer = prefill_answer(seq, settings.pod_ip, settings.block_size)
        complete.kv_transfer_params_json = msgspec.json.encode(answer).decode()
        complete.kv_transfer_params.remote_host = answer["remote_host"]
        complete.kv_transfer_params.remote_port = answer["remote_port"]
    return pb.GenerateResponse(complete=complete)


class _Logprobs:
    """The synthetic logprobs every API reports (the same values as HTTP's), with the
    alternatives' token ids from the tokenizer."""

    def __init__(self, call: Call[GrpcGenerateBody]) -> None:
        self._top = call.options.logprobs or 0
        self._tokenizer = call.ctx.tokenizer

    def of(self, seq: Sequence, start: int, end: int) -> pb.OutputLogProbs:
        out = pb.OutputLogProbs()
        pieces, ids = seq.output_pieces, seq.output_ids
        for position in range(start, end):
            out.token_ids.append(ids[position])
            out.token_logprobs.append(token_logprob(position))
            if self._top:
                top = out.top_logprobs.add()
                for j, (piece, value) in enumerate(
                    top_alternatives(pieces[position], position, self._top)
                ):
                    top.values.append(value)
                    top.token_ids.append(ids[position] if j == 0 else self._id_of(piece))
        return out

    def _id_of(self, piece: str) -> int:
        encoded = self._tokenizer.encode(piece, False)
        return encoded[0] if encoded else 0
