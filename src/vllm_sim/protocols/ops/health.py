"""GET /health and /health/ready, and GET /metrics."""

from __future__ import annotations

import time

from vllm_sim.http.messages import AnyResponse, Handler, HttpRequest, Response
from vllm_sim.metrics.exposition import CONTENT_TYPE, Exposition


class Readiness:
    """Ready once `startup_duration` has passed since the server started listening."""

    def __init__(self, startup_duration: float) -> None:
        self._duration = startup_duration
        self._ready_at = time.monotonic() + startup_duration

    def start(self) -> None:
        """Starts the clock: called once the server is listening."""
        self._ready_at = time.monotonic() + self._duration

    @property
    def ready(self) -> bool:
        return time.monotonic() >= self._ready_at


async def health(request: HttpRequest) -> AnyResponse:
    return Response(200, b"", b"")  # vLLM's: an empty body with no content type


def readiness_handler(readiness: Readiness) -> Handler:
    async def ready(request: HttpRequest) -> AnyResponse:
        return Response(200 if readiness.ready else 503, b"")

    return ready


def metrics_handler(exposition: Exposition) -> Handler:
    async def metrics(request: HttpRequest) -> AnyResponse:
        return Response(200, exposition.scrape(), CONTENT_TYPE)

    return metrics
