"""Generation over HTTP: the pipeline's answer as a JSON body or a server-sent-events
stream, its refusals in the endpoint's error envelope, with the pod and request-id
headers on both."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from vllm_sim.engine.errors import RequestAborted
from vllm_sim.engine.sequence import RequestStream
from vllm_sim.errors import RequestError
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.driver import ChunkEncoder, Sink, answer_written, drive
from vllm_sim.frontend.endpoint import Endpoint
from vllm_sim.frontend.pipeline import serve
from vllm_sim.http.messages import (
    READY,
    AnyResponse,
    BodyWriter,
    Handler,
    HttpRequest,
    Response,
    StreamingResponse,
)


def generation_handler(ctx: ApiContext, endpoint: Endpoint[Any]) -> Handler:
    """The HTTP handler of one generation endpoint. An error answer carries the request id
    and pod headers too, in the envelope of the endpoint's API."""

    async def handle(request: HttpRequest) -> AnyResponse:
        try:
            call, answer = await serve(ctx, endpoint, request, request.body)
        except RequestError as error:
            headers = ctx.response_headers(ctx.request_id(request))
            return Response(error.status, endpoint.error_body(error), headers=headers)
        except RequestAborted:
            # The client is gone; nginx's 499 names that, and nobody will read it.
            return Response(499, b"")
        headers = ctx.response_headers(call.request_id)
        if isinstance(answer, bytes):
            # Written as this returns, in the same turn of the loop: its end, for /metrics.
            answer_written(call.stream)
            call.stream.release()  # answered: nothing reads its sequences any more
            return Response(200, answer, headers=headers)
        return StreamingResponse(sse_events(call.stream, request, answer), headers=headers)

    return handle


def sse_events(
    stream: RequestStream, request: HttpRequest, encoder: ChunkEncoder[bytes]
) -> Callable[[BodyWriter], Awaitable[None]]:
    """The body producer of a streamed request (see StreamingResponse)."""

    def produce(write: BodyWriter) -> Awaitable[None]:
        return drive(stream, request, encoder, body_sink(write))

    return produce


def body_sink(write: BodyWriter) -> Sink[bytes]:
    """The pieces of one pass as one chunk of the body."""

    def sink(parts: list[bytes]) -> Awaitable[None] | None:
        written = write(b"".join(parts))
        return None if written is READY else written

    return sink
