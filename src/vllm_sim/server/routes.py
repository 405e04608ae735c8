"""The route table: every endpoint, bound to the API context it serves from."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from vllm_sim.api import chat, completions, models
from vllm_sim.api.common import ApiContext
from vllm_sim.api.health import Readiness, health, metrics_handler, readiness_handler
from vllm_sim.metrics.exposition import Registry
from vllm_sim.server.app import Route
from vllm_sim.server.http import AnyResponse, Handler, HttpRequest

ApiHandler = Callable[[ApiContext, HttpRequest], Awaitable[AnyResponse]]


def _bind(ctx: ApiContext, handler: ApiHandler) -> Handler:
    async def bound(request: HttpRequest) -> AnyResponse:
        return await handler(ctx, request)

    return bound


def build_routes(ctx: ApiContext, registry: Registry, readiness: Readiness) -> list[Route]:
    return [
        Route("/v1/chat/completions", {"POST": _bind(ctx, chat.handle)}, True),
        Route("/v1/completions", {"POST": _bind(ctx, completions.handle)}, True),
        Route("/v1/models", {"GET": _bind(ctx, models.handle)}),
        Route("/health", {"GET": health}),
        Route("/health/ready", {"GET": readiness_handler(readiness)}),
        Route("/metrics", {"GET": metrics_handler(registry)}),
    ]
