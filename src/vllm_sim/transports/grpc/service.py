"""The vLLM gRPC engine service (`vllm.grpc.engine.VllmEngine`): each RPC over one
instance. Generate's messages are parsed and encoded by grpc_generate.py and its requests
run through the one pipeline; the other RPCs answer from the engine's state.

Gateways that tokenize themselves (the SGLang router, now the Shepherd Model Gateway) call
`Generate` with token ids and read one message per token. The requests share everything
with the HTTP ones: queue, timing, KV cache and events, metrics, failure injection, API
keys (from the call's metadata), request ids, and aborting (a cancelled call, or `Abort`
by id, frees its slot at once).
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from vllm_sim.engine.errors import RequestAborted
from vllm_sim.engine.sequence import RequestStream
from vllm_sim.errors import RequestError
from vllm_sim.frontend.access import SHUTTING_DOWN, Check, Drain
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.driver import Sink, answer_written, drive, wait_for_result
from vllm_sim.frontend.endpoint import Call
from vllm_sim.frontend.pipeline import admit
from vllm_sim.proto import engine_pb2 as pb
from vllm_sim.protocols.openai.embeddings import embedding_vector
from vllm_sim.protocols.openai.embeddings import prefill as prefill_embedding
from vllm_sim.protocols.vllm.grpc_generate import (
    GrpcGenerateBody,
    GrpcGenerateEndpoint,
    body_of,
    complete,
)
from vllm_sim.transports.grpc.caller import Context, GrpcCaller
from vllm_sim.transports.grpc.feeds import MAX_PENDING_EVENTS, KvEventFeed, tokenizer_archive

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


def grpc_status(http_status: int) -> grpc.StatusCode:
    return _STATUS.get(http_status, grpc.StatusCode.UNKNOWN)


@dataclass(slots=True)
class GrpcState:
    """What the servicer reads of the server beyond the pipeline's context."""

    gate: Check  # the admission gate of generation: API keys, then the drain
    drain: Drain
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

    async def Generate(self, request: pb.GenerateRequest, context: Context) -> None:
        self._last_receive = time.time()
        try:
            caller = self._gated(context, request.request_id)
            call = await self._admit(request, caller)
        except RequestError as error:
            await context.abort(grpc_status(error.status), error.message)
        stream, request_id = call.stream, call.request_id
        self._running[request_id] = stream
        try:
            if call.options.stream:
                chunks = self._endpoint.chunks(call)
                # A message is written when its write is awaited (grpcio's flow control).
                sink = _message_sink(context)
                await drive(stream, caller, chunks, sink, push=False, written_when_awaited=True)
                if isinstance(stream.error, RequestAborted):
                    raise stream.error
            else:
                await wait_for_result(stream, caller)
                await context.write(complete(call, whole=True))
                answer_written(stream)
        except RequestError as error:
            await context.abort(grpc_status(error.status), error.message)
        except RequestAborted:
            await context.abort(grpc.StatusCode.CANCELLED, "the request was aborted")
        finally:
            if self._running.get(request_id) is stream:
                del self._running[request_id]
            stream.abort()  # a cancelled call frees its slot at once; a no-op once done

    def _gated(self, context: Context, request_id: str) -> GrpcCaller:
        """The call as a caller, once past the gate every generation request passes (API
        keys, then the drain); raises its refusal."""
        caller = GrpcCaller(context, request_id)
        refusal = self._state.gate("POST", caller.headers)
        if refusal is not None:
            raise refusal
        return caller

    async def _admit(
        self, request: pb.GenerateRequest, caller: GrpcCaller
    ) -> Call[GrpcGenerateBody]:
        state = self._state
        if request.HasField("data_parallel_rank") and request.data_parallel_rank != state.rank:
            message = (
                f"data_parallel_rank {request.data_parallel_rank} is not served here "
                f"(this port serves rank {state.rank})"
            )
            raise RequestError(400, message, "data_parallel_rank")
        body = body_of(request)
        if request.request_id in self._running:
            raise RequestError(409, f"request already exists for id {request.request_id}")
        call, _ = await admit(self._ctx, self._endpoint, caller, body, request.ByteSize())
        return call

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
        if self._state.drain.active:
            return pb.HealthCheckResponse(healthy=False, message=SHUTTING_DOWN)
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
        view = self._ctx.engine.view
        return pb.GetServerInfoResponse(
            active_requests=view.open_requests,
            is_paused=view.paused is not None,
            last_receive_timestamp=self._last_receive,
            uptime_seconds=time.monotonic() - self._state.started,
            server_type=SERVER_TYPE,
            data_parallel_size=self._state.ranks,
            block_size=self._ctx.settings.block_size,
            max_num_seqs=view.limits.max_num_seqs,
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
        view = self._ctx.engine.view
        running, waiting = view.num_running, view.num_waiting
        cap = view.limits.max_num_seqs
        load = pb.SchedulerLoad(
            dp_rank=rank,
            num_running_reqs=running,
            num_waiting_reqs=waiting,
            num_total_reqs=running + waiting,
            utilization=running / cap if cap else 0.0,
            max_running_requests=cap,
        )
        kv = view.kv_figures()
        if kv is not None:
            load.num_used_tokens = kv.held_blocks * kv.block_size
            load.max_total_num_tokens = kv.capacity * kv.block_size
            load.token_usage = kv.usage
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
            caller = self._gated(context, request.request_id)
            ids = list(request.tokenized.input_ids)
            if not ids:
                raise RequestError(400, "The decoder prompt cannot be empty", "tokenized")
            model = ctx.resolve_model(None)
            await prefill_embedding(ctx, caller, ctx.request_id(caller), model, [ids])
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
            parsed = (
                _parsed_stream(implementation, request_type)
                if inspect.isasyncgenfunction(implementation)
                else _parsed_unary(implementation, request_type)  # it writes its messages
            )
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                parsed,
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


def _message_sink(context: Context) -> Sink[list[pb.GenerateResponse]]:
    """Each message of a pass written in turn, as the call's flow control allows."""

    async def write(parts: list[list[pb.GenerateResponse]]) -> None:
        for messages in parts:
            for message in messages:
                await context.write(message)

    return write


def _parsed_stream(
    implementation: Callable[[Any, Context], AsyncIterator[Any]], request_type: Any
) -> Callable[[bytes, Context], AsyncIterator[Any]]:
    async def stream(raw: bytes, context: Context) -> AsyncIterator[Any]:
        async for message in implementation(await _parse(raw, request_type, context), context):
            yield message

    return stream
