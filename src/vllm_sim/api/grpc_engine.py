"""The vLLM gRPC engine service (`vllm.grpc.engine.VllmEngine`): its requests are parsed
into the token-in endpoint's terms and run through the one pipeline; its answers are
encoded as the contract's messages.

Gateways that tokenize themselves (the SGLang router, now the Shepherd Model Gateway) call
`Generate` with token ids and read one message per token. The requests share everything
with the HTTP ones: queue, timing, KV cache and events, metrics, failure injection, API
keys (from the call's metadata), request ids, and aborting (a cancelled call, or `Abort`
by id, frees its slot at once).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
import msgspec
from google.protobuf.message import DecodeError

from vllm_sim.api.capabilities import GENERATE
from vllm_sim.api.context import ApiContext
from vllm_sim.api.embeddings import embedding_vector
from vllm_sim.api.embeddings import prefill as prefill_embedding
from vllm_sim.api.endpoint import Call, Endpoint, OpenAIBody, Options, Plan
from vllm_sim.api.errors import as_request_error
from vllm_sim.api.grpc_feeds import MAX_PENDING_EVENTS, KvEventFeed, tokenizer_archive
from vllm_sim.api.logprobs import check_logprobs_count
from vllm_sim.api.pipeline import admit
from vllm_sim.api.sampling import EngineSampling, check_sampling
from vllm_sim.api.transfer import KvTransferParams, prefill_answer
from vllm_sim.engine.errors import RequestAborted
from vllm_sim.engine.generation.logprobs import token_logprob, top_alternatives
from vllm_sim.engine.generation.stops import StopRules
from vllm_sim.engine.request import Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.errors import RequestError
from vllm_sim.http.access import Guard
from vllm_sim.http.messages import Headers, HttpRequest
from vllm_sim.proto import engine_pb2 as pb

SERVICE = "vllm.grpc.engine.VllmEngine"
GENERATE_PATH = f"/{SERVICE}/Generate"
SERVER_TYPE = "vllm-grpc"  # what vLLM's own gRPC server says it is
NO_PROFILER = "profiling is not available: the simulator runs no model to profile"
# A GetTokenizer stream's chunks: well under the 4 MiB a gRPC client accepts by default.
TOKENIZER_CHUNK_BYTES = 1024 * 1024
_MAX_UINT32 = 2**32 - 1

# The HTTP status a refusal carries, as the gRPC status gateways expect for it.
_STATUS: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


# A call's context; the servicer reads its metadata and ends it with a status.
Context = grpc.aio.ServicerContext[Any, Any]


def grpc_status(http_status: int) -> grpc.StatusCode:
    return _STATUS.get(http_status, grpc.StatusCode.UNKNOWN)


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
        # What changes the generated text, as the OpenAI bodies' sampling fields do.
        stop = params.stop
        strings = (stop,) if isinstance(stop, str) else tuple(stop or ())
        ids = frozenset(params.stop_token_ids or ())
        if strings or ids or params.min_tokens:
            options.stops = StopRules(
                strings, ids, params.include_stop_str_in_output, params.min_tokens
            )
        options.seed = params.seed
        options.greedy = params.temperature == 0
        options.prompt_logprobs = params.prompt_logprobs
        return options

    def plan(self, ctx: ApiContext, body: GrpcGenerateBody) -> Plan:
        if body.token_ids is not None:
            return Plan([Prompt(body.token_ids)])
        text = body.text or ""  # neither input: the empty text
        ids = ctx.tokenizer.encode(text, True) if text else []
        if not ids:
            raise RequestError(400, "The decoder prompt cannot be empty", "text")
        return Plan([Prompt(ids, text)])


@dataclass(slots=True)
class GrpcState:
    """What the servicer reads of the server beyond the pipeline's context."""

    guard: Guard | None  # the API keys, checked against the call's metadata
    draining: Callable[[], bool]
    sleeping: Callable[[], bool]
    started: float  # time.monotonic() at start-up
    rank: int = 0  # this instance's data-parallel rank
    ranks: int = 1  # data-parallel ranks in all (each serves its own port)
    version: str = ""  # the vLLM version the server says it is


class VllmEngineServicer:
    """The service's RPCs over one instance."""

    def __init__(self, ctx: ApiContext, state: GrpcState) -> None:
        self._ctx = ctx
        self._state = state
        self._endpoint = GrpcGenerateEndpoint()
        self._running: dict[str, RequestStream] = {}  # in-flight Generate calls by id
        self._tokenizer_zip: bytes | None = None  # made at the first GetTokenizer
        self._last_receive = 0.0

    # -- Generate --

    async def Generate(
        self, request: pb.GenerateRequest, context: Context
    ) -> AsyncIterator[pb.GenerateResponse]:
        self._last_receive = time.time()
        try:
            call = await self._admit(request, context)
        except RequestError as error:
            await context.abort(grpc_status(error.status), error.message)
        stream, request_id = call.stream, call.request_id
        self._running[request_id] = stream
        try:
            if call.options.stream:
                async for message in _streamed(call):
                    yield message
            else:
                await stream.wait_done()
                _raise_failure(stream)
                yield _complete(call, whole=True)
        except RequestError as error:
            await context.abort(grpc_status(error.status), error.message)
        except RequestAborted:
            await context.abort(grpc.StatusCode.CANCELLED, "the request was aborted")
        finally:
            if self._running.get(request_id) is stream:
                del self._running[request_id]
            stream.abort()  # a cancelled call frees its slot at once; a no-op once done

    async def _admit(self, request: pb.GenerateRequest, context: Context) -> Call[GrpcGenerateBody]:
        state = self._state
        http = self._http_request(context, request.request_id)
        if request.HasField("data_parallel_rank") and request.data_parallel_rank != state.rank:
            message = (
                f"data_parallel_rank {request.data_parallel_rank} is not served here "
                f"(this port serves rank {state.rank})"
            )
            raise RequestError(400, message, "data_parallel_rank")
        body = body_of(request)
        if request.request_id in self._running:
            raise RequestError(409, f"request already exists for id {request.request_id}")
        call, _ = await admit(self._ctx, self._endpoint, http, (body, request.ByteSize()))
        return call

    def _http_request(self, context: Context, request_id: str) -> HttpRequest:
        """The call as the pipeline reads a request: its metadata as headers, its id as
        X-Request-Id. Refuses it while the server drains, or without an accepted key."""
        state = self._state
        if state.draining():
            raise RequestError(503, "server is shutting down")
        headers = _headers(context)
        if state.guard is not None:
            refusal = state.guard("POST", headers)
            if refusal is not None:
                raise refusal
        if request_id:
            headers.append((b"x-request-id", request_id.encode()))
        return HttpRequest("POST", GENERATE_PATH, b"", headers, b"", _no_watch, 0)

    # -- the other RPCs --

    async def Abort(self, request: pb.AbortRequest, context: Context) -> pb.AbortResponse:
        for request_id in request.request_ids:
            stream = self._running.get(request_id)
            if stream is not None:
                stream.abort()
        return pb.AbortResponse()

    async def HealthCheck(
        self, request: pb.HealthCheckRequest, context: Context
    ) -> pb.HealthCheckResponse:
        if self._state.draining():
            return pb.HealthCheckResponse(healthy=False, message="server is shutting down")
        if self._state.sleeping():
            return pb.HealthCheckResponse(healthy=False, message="engine is sleeping")
        return pb.HealthCheckResponse(healthy=True, message="OK")

    async def GetModelInfo(
        self, request: pb.GetModelInfoRequest, context: Context
    ) -> pb.GetModelInfoResponse:
        settings = self._ctx.settings
        return pb.GetModelInfoResponse(
            model_path=settings.base_model,
            is_generation=True,
            max_context_length=settings.max_model_len,
            vocab_size=min(self._ctx.tokenizer.max_token_id + 1, _MAX_UINT32),
            served_model_name=settings.display_model,
            tokenizer_path=settings.base_model,
            max_req_input_len=settings.max_model_len,
        )

    async def GetServerInfo(
        self, request: pb.GetServerInfoRequest, context: Context
    ) -> pb.GetServerInfoResponse:
        engine = self._ctx.engine
        return pb.GetServerInfoResponse(
            active_requests=engine.open_requests,
            is_paused=engine.paused is not None,
            last_receive_timestamp=self._last_receive,
            uptime_seconds=time.monotonic() - self._state.started,
            server_type=SERVER_TYPE,
            data_parallel_size=self._state.ranks,
            block_size=self._ctx.settings.block_size,
            max_num_seqs=engine.limits.max_num_seqs,
        )

    async def GetLoads(self, request: pb.GetLoadsRequest, context: Context) -> pb.GetLoadsResponse:
        rank = self._state.rank
        if request.HasField("dp_rank") and request.dp_rank != rank:
            message = f"data-parallel rank {request.dp_rank} is not served here (rank {rank})"
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        return pb.GetLoadsResponse(
            timestamp=datetime.now(UTC).isoformat(),
            version=self._state.version,
            dp_rank_count=self._state.ranks,
            loads=[self._load(rank)],
        )

    def _load(self, rank: int) -> pb.SchedulerLoad:
        engine = self._ctx.engine
        running, waiting = engine.num_running, engine.num_waiting
        cap = engine.limits.max_num_seqs
        load = pb.SchedulerLoad(
            dp_rank=rank,
            num_running_reqs=running,
            num_waiting_reqs=waiting,
            num_total_reqs=running + waiting,
            utilization=running / cap if cap else 0.0,
            max_running_requests=cap,
        )
        if engine.kv is not None:
            cache = engine.kv.cache
            load.num_used_tokens = cache.held_blocks * cache.block_size
            load.max_total_num_tokens = cache.capacity * cache.block_size
            load.token_usage = cache.usage
        return load

    async def FlushCache(
        self, request: pb.FlushCacheRequest, context: Context
    ) -> pb.FlushCacheResponse:
        # As vLLM's /reset_prefix_cache: refused while requests run (their blocks are in use).
        if self._ctx.engine.reset_prefix_cache():
            return pb.FlushCacheResponse(success=True, message="prefix cache flushed")
        return pb.FlushCacheResponse(
            success=False, message="the prefix cache cannot be flushed while requests run"
        )

    async def Embed(self, request: pb.EmbedRequest, context: Context) -> pb.EmbedResponse:
        ctx = self._ctx
        try:
            http = self._http_request(context, request.request_id)
            ids = list(request.tokenized.input_ids)
            if not ids:
                raise RequestError(400, "The decoder prompt cannot be empty", "tokenized")
            model = ctx.resolve_model(None)
            await prefill_embedding(ctx, http, ctx.request_id(http), model, [ids])
        except RequestError as error:
            await context.abort(grpc_status(error.status), error.message)
        dimensions = ctx.settings.default_embedding_dimensions
        return pb.EmbedResponse(
            embedding=embedding_vector(ids, dimensions),
            prompt_tokens=len(ids),
            embedding_dim=dimensions,
        )

    async def GetTokenizer(
        self, request: pb.GetTokenizerRequest, context: Context
    ) -> AsyncIterator[pb.GetTokenizerChunk]:
        folder = self._ctx.tokenizer.folder
        if folder is None:
            message = "no tokenizer files: the server uses its simulated tokenizer"
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)
        if self._tokenizer_zip is None:
            self._tokenizer_zip = await self._ctx.off_loop(tokenizer_archive, folder)
        data = self._tokenizer_zip
        digest = hashlib.sha256(data).hexdigest()
        for start in range(0, max(len(data), 1), TOKENIZER_CHUNK_BYTES):
            end = start + TOKENIZER_CHUNK_BYTES
            last = end >= len(data)
            yield pb.GetTokenizerChunk(data=data[start:end], sha256=digest if last else "")

    async def SubscribeKvEvents(
        self, request: pb.SubscribeKvEventsRequest, context: Context
    ) -> AsyncIterator[pb.KvEventBatch]:
        kv = self._ctx.engine.kv
        if kv is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no KV cache")
        feed = KvEventFeed(kv.cache.block_size)
        stop = kv.cache.subscribe(feed.add)
        try:
            while True:
                events = await feed.next()
                if events is None:
                    message = f"the subscriber fell {MAX_PENDING_EVENTS} KV events behind"
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message)
                feed.sequence += 1
                yield pb.KvEventBatch(
                    sequence_number=feed.sequence,
                    timestamp=time.time(),
                    events=events,
                    dp_rank=self._state.rank,
                )
        finally:
            stop()

    async def StartProfile(
        self, request: pb.StartProfileRequest, context: Context
    ) -> pb.ProfileResponse:
        return pb.ProfileResponse(success=False, message=NO_PROFILER)

    async def StopProfile(
        self, request: pb.StopProfileRequest, context: Context
    ) -> pb.ProfileResponse:
        return pb.ProfileResponse(success=False, message=NO_PROFILER)


def engine_handler(servicer: VllmEngineServicer) -> grpc.GenericRpcHandler:
    """The service's methods, each reading its request itself: a message that does not
    parse is INVALID_ARGUMENT naming it (grpc's own parsing would answer INTERNAL, a
    server fault, for a client's bytes)."""
    service = pb.DESCRIPTOR.services_by_name["VllmEngine"]
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        request_type = getattr(pb, method.input_type.name)
        response_type = getattr(pb, method.output_type.name)
        implementation = getattr(servicer, method.name)
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _parsed_stream(implementation, request_type),
                response_serializer=response_type.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _parsed_unary(implementation, request_type),
                response_serializer=response_type.SerializeToString,
            )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


async def _parse(raw: bytes, request_type: Any, context: Context) -> Any:
    try:
        return request_type.FromString(raw)
    except DecodeError:
        name = request_type.DESCRIPTOR.full_name
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed {name} message")


def _parsed_unary(
    implementation: Callable[[Any, Context], Awaitable[Any]], request_type: Any
) -> Callable[[bytes, Context], Awaitable[Any]]:
    async def unary(raw: bytes, context: Context) -> Any:
        return await implementation(await _parse(raw, request_type, context), context)

    return unary


def _parsed_stream(
    implementation: Callable[[Any, Context], AsyncIterator[Any]], request_type: Any
) -> Callable[[bytes, Context], AsyncIterator[Any]]:
    async def stream(raw: bytes, context: Context) -> AsyncIterator[Any]:
        async for message in implementation(await _parse(raw, request_type, context), context):
            yield message

    return stream


def _no_watch(callback: Callable[[], None]) -> Callable[[], None]:
    """A gRPC call's cancellation ends its handler, which aborts the request itself."""
    return _nothing


def _nothing() -> None:
    return None


def _headers(context: Context) -> Headers:
    """The call's metadata as HTTP headers (lower-case names, as gRPC sends them)."""
    headers: Headers = []
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            headers.append((key.encode(), value.encode("latin-1", "replace")))
    return headers


async def _streamed(call: Call[GrpcGenerateBody]) -> AsyncIterator[pb.GenerateResponse]:
    """One chunk per token as the engine releases it, then the closing message."""
    stream = call.stream
    seq = stream.sequences[0]
    logprobs = _Logprobs(call) if call.options.logprobs is not None else None
    while True:
        if not stream.has_news():
            await stream.notification()
            continue
        _raise_failure(stream)
        ids = seq.output_ids
        while seq.sent < seq.emitted:
            index = seq.sent
            seq.sent += 1
            chunk = pb.GenerateStreamChunk(
                token_ids=[ids[index]],
                prompt_tokens=seq.prompt_tokens,
                completion_tokens=1,
                cached_tokens=seq.cached_tokens,
            )
            if logprobs is not None:
                chunk.output_logprobs.CopyFrom(logprobs.of(seq, index, index + 1))
            yield pb.GenerateResponse(chunk=chunk)
        if stream.done:
            _raise_failure(stream)
            yield _complete(call, whole=False)
            return


def _complete(call: Call[GrpcGenerateBody], whole: bool) -> pb.GenerateResponse:
    """The closing message: every output id when nothing was streamed, else none (the
    chunks carried them); why it stopped, and where a prefill node's KV can be fetched."""
    seq = call.stream.sequences[0]
    ids = seq.output_ids[: seq.emitted] if whole else []
    complete = pb.GenerateComplete(
        output_ids=ids,
        finish_reason=str(seq.finish_reason or "stop"),
        prompt_tokens=seq.prompt_tokens,
        completion_tokens=len(ids),
        cached_tokens=seq.cached_tokens,
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


def _raise_failure(stream: RequestStream) -> None:
    error = stream.error
    if error is None:
        return
    if isinstance(error, RequestAborted):
        raise error
    raise as_request_error(error)
