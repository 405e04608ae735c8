"""GET /version and GET /load: what vLLM tells routers about itself.

The simulator answers as the vLLM release VLLM_VERSION: /version reports it, and the
routes and shapes it serves are that release's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from vllm_sim.http.messages import AnyResponse, BodyWriter, Handler, HttpRequest, StreamingResponse
from vllm_sim.protocols.common.answers import json_response

# The vLLM release whose answers the simulator gives (its /version, system_fingerprint).
VLLM_VERSION = "0.32.0"

StreamProducer = Callable[[BodyWriter], Awaitable[None]]


async def version(request: HttpRequest) -> AnyResponse:
    return json_response({"version": VLLM_VERSION})


class ServerLoad:
    """vLLM's --enable-server-load-tracking: the requests to its load-aware endpoints
    (generation, embeddings, token counting) from arrival until their answer is out, errors
    included. Off, GET /load says 0 and nothing is counted."""

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled
        self.in_flight = 0

    def track(self, handler: Handler) -> Handler:
        """`handler`, counted while it runs and, for a stream, until the stream ends."""
        if not self.enabled:
            return handler

        async def tracked(request: HttpRequest) -> AnyResponse:
            self.in_flight += 1
            try:
                response = await handler(request)
            except BaseException:
                self.in_flight -= 1
                raise
            if isinstance(response, StreamingResponse):
                response.produce = self._released_after(response.produce)
            else:
                self.in_flight -= 1
            return response

        return tracked

    def _released_after(self, produce: StreamProducer) -> StreamProducer:
        async def produce_then_release(write: BodyWriter) -> None:
            try:
                await produce(write)
            finally:
                self.in_flight -= 1

        return produce_then_release

    async def load(self, request: HttpRequest) -> AnyResponse:
        return json_response({"server_load": self.in_flight})
