"""The route table: every endpoint, bound to the API context it serves from."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from vllm_sim.api import (
    anthropic,
    chat,
    completions,
    embeddings,
    generate,
    lora,
    models,
    render,
    responses,
    tokenize,
)
from vllm_sim.api.admin import RuntimeControl, admin_handlers
from vllm_sim.api.common import ApiContext
from vllm_sim.api.health import Readiness, health, metrics_handler, readiness_handler
from vllm_sim.api.sleep import SleepState, sleep_handlers
from vllm_sim.engine.errors import RequestError
from vllm_sim.metrics.exposition import Registry
from vllm_sim.server.app import Route
from vllm_sim.server.http import AnyResponse, Handler, HttpRequest, Response
from vllm_sim.server.http import error_body as http_error_body

ApiHandler = Callable[[ApiContext, HttpRequest], Awaitable[AnyResponse]]


def _bind(ctx: ApiContext, handler: ApiHandler) -> Handler:
    async def bound(request: HttpRequest) -> AnyResponse:
        return await handler(ctx, request)

    return bound


def _bind_generation(
    ctx: ApiContext,
    handler: ApiHandler,
    error_body: Callable[[RequestError], bytes] = http_error_body,
) -> Handler:
    """Like _bind, and an error answer carries the request id and pod headers too,
    in the envelope of the endpoint's API (`error_body`)."""

    async def bound(request: HttpRequest) -> AnyResponse:
        try:
            return await handler(ctx, request)
        except RequestError as error:
            headers = ctx.response_headers(ctx.request_id(request))
            return Response(error.status, error_body(error), headers=headers)

    return bound


def build_routes(
    ctx: ApiContext,
    registry: Registry,
    readiness: Readiness,
    control: RuntimeControl,
    sleep: SleepState | None = None,
) -> list[Route]:
    show_config, update_config, update_fake_metrics = admin_handlers(control)
    routes = [
        *_generation_routes(ctx),
        Route("/v1/completions/render", {"POST": _bind(ctx, render.render_completion)}),
        Route("/v1/chat/completions/render", {"POST": _bind(ctx, render.render_chat)}),
        Route("/tokenize", {"POST": _bind(ctx, tokenize.tokenize)}),
        Route("/detokenize", {"POST": _bind(ctx, tokenize.detokenize)}),
        Route("/v1/models", {"GET": _bind(ctx, models.handle)}),
        Route("/v1/load_lora_adapter", {"POST": _bind(ctx, lora.load)}),
        Route("/v1/unload_lora_adapter", {"POST": _bind(ctx, lora.unload)}),
        Route("/health", {"GET": health}),
        Route("/health/ready", {"GET": readiness_handler(readiness)}),
        Route("/metrics", {"GET": metrics_handler(registry)}),
        Route("/admin/config", {"GET": show_config, "POST": update_config}),
        Route("/fake_metrics", {"POST": update_fake_metrics}),
    ]
    if not ctx.mm_encoder_only:  # an encoder-only node embeds images, not text
        routes.append(Route("/v1/embeddings", {"POST": _bind(ctx, embeddings.handle)}))
    if sleep is not None:  # vLLM serves these in dev mode only (VLLM_SERVER_DEV_MODE=1)
        to_sleep, wake_up, is_sleeping = sleep_handlers(sleep)
        routes += [
            Route("/sleep", {"POST": to_sleep}),
            Route("/wake_up", {"POST": wake_up}),
            Route("/is_sleeping", {"GET": is_sleeping}),
        ]
    return routes


def _generation_routes(ctx: ApiContext) -> list[Route]:
    """The endpoints that run the engine (refused with 503 while draining)."""
    return [
        Route("/v1/chat/completions", {"POST": _bind_generation(ctx, chat.handle)}, True),
        Route("/v1/completions", {"POST": _bind_generation(ctx, completions.handle)}, True),
        Route("/v1/responses", {"POST": _bind_generation(ctx, responses.handle)}, True),
        Route("/inference/v1/generate", {"POST": _bind_generation(ctx, generate.handle)}, True),
        Route(
            "/v1/messages",
            {"POST": _bind_generation(ctx, anthropic.handle, anthropic.error_body)},
            True,
        ),
    ]
