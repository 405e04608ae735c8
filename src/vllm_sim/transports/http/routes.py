"""The route table: every endpoint, bound to the API context it serves from."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from vllm_sim.frontend import capabilities
from vllm_sim.frontend.access import AdmissionGate, Drain, KeyRing, key_guard
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.endpoint import Endpoint
from vllm_sim.http.app import Guard, Route
from vllm_sim.http.messages import AnyResponse, Handler, HttpRequest
from vllm_sim.metrics.exposition import Exposition
from vllm_sim.metrics.sleep_mode import SleepModeMetrics
from vllm_sim.protocols.anthropic.messages import MessagesEndpoint, count_tokens
from vllm_sim.protocols.openai import embeddings, models, render
from vllm_sim.protocols.openai.chat import ChatEndpoint
from vllm_sim.protocols.openai.completions import CompletionsEndpoint
from vllm_sim.protocols.openai.response_store import (
    CANCEL_PATH,
    RETRIEVE_PATH,
    ResponseStore,
    store_handlers,
)
from vllm_sim.protocols.openai.responses import ResponsesEndpoint
from vllm_sim.protocols.ops.admin import RuntimeControl, admin_handlers
from vllm_sim.protocols.ops.health import Readiness, health, metrics_handler, readiness_handler
from vllm_sim.protocols.ops.invocations import invocations_handler
from vllm_sim.protocols.vllm import lora, tokenize
from vllm_sim.protocols.vllm.dev import pause_handlers, reset_prefix_cache_handler
from vllm_sim.protocols.vllm.generate import GenerateEndpoint
from vllm_sim.protocols.vllm.server_info import ServerLoad, version
from vllm_sim.protocols.vllm.sleep import SleepMode, sleep_handlers
from vllm_sim.transports.http.access import control_guard, cross_origin
from vllm_sim.transports.http.conventions import require_json
from vllm_sim.transports.http.generation import generation_handler

ApiHandler = Callable[[ApiContext, HttpRequest], Awaitable[AnyResponse]]
SyncApiHandler = Callable[[ApiContext, HttpRequest], AnyResponse]

# Open to anyone whatever the keys, as in vLLM: probes, scrapers and load balancers carry
# no key (SageMaker's /ping is its health check).
OPEN_PATHS = frozenset({"/health", "/health/ready", "/metrics", "/ping", "/version", "/load"})
# What changes the server rather than asks it something.
CONTROL_PATHS = frozenset(
    {
        "/admin/config",
        "/fake_metrics",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
        "/sleep",
        "/wake_up",
        "/is_sleeping",
        "/reset_prefix_cache",
        "/pause",
        "/resume",
        "/is_paused",
    }
)
ADMIN_PATHS = frozenset({"/admin/config", "/fake_metrics"})  # gone with --disable-admin
# POST routes that read no JSON body, so take any Content-Type, as in vLLM.
NO_JSON_PATHS = frozenset({"/ping", CANCEL_PATH})


@dataclass(frozen=True, slots=True)
class Access:
    """Who may call what: `api_keys` (--api-key, VLLM_API_KEY) guard every route but the
    open ones; `admin_key` (--admin-api-key) replaces them on the control routes;
    `disable_admin` removes /admin/config and /fake_metrics."""

    api_keys: tuple[str, ...] = ()
    admin_key: str = ""
    disable_admin: bool = False

    def guard(self, path: str, x_api_key: bool = False) -> Guard | None:
        """The guard of one route, decided once at start-up."""
        if path in OPEN_PATHS:
            return None
        if path in CONTROL_PATHS:
            keys = (self.admin_key,) if self.admin_key else self.api_keys
            return control_guard(KeyRing(keys) if keys else None)
        return key_guard(KeyRing(self.api_keys), x_api_key) if self.api_keys else None

    def gate(self, drain: Drain, path: str) -> AdmissionGate:
        """The check every generation request passes first, on any transport: its key,
        then whether the server still takes work."""
        return AdmissionGate(drain, self.guard(path, _anthropic(path)))

    def secure(self, route: Route) -> Route:
        if route.guard is not None:
            return route  # the admission gate, which checks the keys itself
        guard = self.guard(route.path, _anthropic(route.path))
        if guard is None:
            return route
        if route.path in CONTROL_PATHS:
            # Their guard refuses every cross-origin browser request: no preflight may
            # promise one.
            return dataclasses.replace(route, guard=guard, refuses_preflight=cross_origin)
        return dataclasses.replace(route, guard=guard)


def _anthropic(path: str) -> bool:
    """Anthropic's SDK sends its key as x-api-key, on every route of its API."""
    return path.startswith("/v1/messages")


def json_bodies(route: Route) -> Route:
    """vLLM refuses a POST body that is not JSON, before reading it, on every route that
    reads one (the control routes' guard words its own refusal)."""
    if route.path in NO_JSON_PATHS or route.path in CONTROL_PATHS:
        return route
    return dataclasses.replace(route, content_check=require_json)


def generation_endpoints(responses: ResponseStore | None = None) -> list[Endpoint[Any]]:
    """Every endpoint that runs the engine; each is served by the one pipeline. The
    Responses API keeps its finished answers in `responses` (none kept without one)."""
    store = ResponseStore() if responses is None else responses
    return [
        ChatEndpoint("/v1/chat/completions", capabilities.CHAT),
        CompletionsEndpoint("/v1/completions", capabilities.COMPLETIONS),
        ResponsesEndpoint("/v1/responses", capabilities.RESPONSES, store),
        MessagesEndpoint("/v1/messages", capabilities.MESSAGES),
        GenerateEndpoint("/inference/v1/generate", capabilities.GENERATE),
    ]


def _bind(ctx: ApiContext, handler: ApiHandler) -> Handler:
    async def bound(request: HttpRequest) -> AnyResponse:
        return await handler(ctx, request)

    return bound


def _bind_sync(ctx: ApiContext, handler: SyncApiHandler) -> Handler:
    """A handler that does all its work at once: on the worker thread for a large body."""

    async def bound(request: HttpRequest) -> AnyResponse:
        if len(request.body) <= ctx.worker_body_bytes:
            return handler(ctx, request)
        ctx.request_id(request)  # made here: the id counter belongs to the event loop
        return await ctx.off_loop(handler, ctx, request)

    return bound


def build_routes(
    ctx: ApiContext,
    exposition: Exposition,
    readiness: Readiness,
    control: RuntimeControl,
    dev_mode: bool = False,
    sleep_mode: SleepMode | None = None,
    access: Access = Access(),  # frozen: one shared default is safe
    load_tracking: bool = False,
    responses: ResponseStore | None = None,
) -> list[Route]:
    """Every route, guarded as `access` says; `dev_mode` adds vLLM's development endpoints
    (/sleep answers 400 unless `sleep_mode` is enabled, --enable-sleep-mode); `load_tracking`
    (--enable-server-load-tracking) counts the load-aware requests GET /load reports;
    `responses` keeps the Responses API's stored answers."""
    load = ServerLoad(load_tracking)
    routes = [
        *_generation_routes(ctx, load, ResponseStore() if responses is None else responses, access),
        Route("/v1/completions/render", {"POST": _bind_sync(ctx, render.render_completion)}),
        Route("/v1/chat/completions/render", {"POST": _bind_sync(ctx, render.render_chat)}),
        Route("/tokenize", {"POST": _bind_sync(ctx, tokenize.tokenize)}),
        Route("/detokenize", {"POST": _bind_sync(ctx, tokenize.detokenize)}),
        Route("/v1/models", {"GET": _bind(ctx, models.handle)}),
        Route("/v1/load_lora_adapter", {"POST": _bind(ctx, lora.load)}),
        Route("/v1/unload_lora_adapter", {"POST": _bind(ctx, lora.unload)}),
        Route("/health", {"GET": health}),
        Route("/health/ready", {"GET": readiness_handler(readiness)}),
        Route("/metrics", {"GET": metrics_handler(exposition)}),
        Route("/ping", {"GET": health, "POST": health}),  # SageMaker
        Route("/version", {"GET": version}),
        Route("/load", {"GET": load.load}),
    ]
    if not access.disable_admin:
        show_config, update_config, update_fake_metrics = admin_handlers(control)
        routes += [
            Route("/admin/config", {"GET": show_config, "POST": update_config}),
            Route("/fake_metrics", {"POST": update_fake_metrics}),
        ]
    if not ctx.settings.mm_encoder_only:  # an encoder-only node embeds images, not text
        embed = load.track(_bind(ctx, embeddings.handle))
        routes.append(Route("/v1/embeddings", {"POST": embed}))
    if dev_mode:  # vLLM serves these in dev mode only (VLLM_SERVER_DEV_MODE=1)
        if sleep_mode is None:
            sleep_mode = SleepMode(ctx.engine, SleepModeMetrics(), enabled=False)
        routes += _dev_routes(ctx, sleep_mode)
    return [access.secure(json_bodies(route)) for route in routes]


def _generation_routes(
    ctx: ApiContext, load: ServerLoad, responses: ResponseStore, access: Access
) -> list[Route]:
    """The generation endpoints and the routes beside them: SageMaker's /invocations,
    token counting, and stored responses. Generation passes the admission gate before its
    body is read (keys, and no new work while the server drains for shutdown); the
    load-aware routes are counted while they run."""
    endpoints = {endpoint.path: endpoint for endpoint in generation_endpoints(responses)}
    handlers = {
        # vLLM counts every generation endpoint in its load but the Responses API.
        path: generation_handler(ctx, e)
        if path == "/v1/responses"
        else load.track(generation_handler(ctx, e))
        for path, e in endpoints.items()
    }
    dispatch = invocations_handler(handlers["/v1/chat/completions"], handlers["/v1/completions"])
    retrieve, cancel = store_handlers(responses)
    count = load.track(_bind_sync(ctx, count_tokens))
    return [
        *(
            Route(
                path,
                {"POST": handlers[path]},
                guard=access.gate(ctx.drain, path),
                error_body=e.error_body,
            )
            for path, e in endpoints.items()
        ),
        Route("/invocations", {"POST": dispatch}, guard=access.gate(ctx.drain, "/invocations")),
        Route(
            "/v1/messages/count_tokens",
            {"POST": count},
            error_body=endpoints["/v1/messages"].error_body,
        ),
        Route(RETRIEVE_PATH, {"GET": retrieve}),
        Route(CANCEL_PATH, {"POST": cancel}),
    ]


def _dev_routes(ctx: ApiContext, sleep_mode: SleepMode) -> list[Route]:
    to_sleep, wake_up, is_sleeping = sleep_handlers(sleep_mode)
    pause, resume, is_paused = pause_handlers(ctx.engine)
    return [
        Route("/sleep", {"POST": to_sleep}),
        Route("/wake_up", {"POST": wake_up}),
        Route("/is_sleeping", {"GET": is_sleeping}),
        Route("/reset_prefix_cache", {"POST": reset_prefix_cache_handler(ctx.engine)}),
        Route("/pause", {"POST": pause}),
        Route("/resume", {"POST": resume}),
        Route("/is_paused", {"GET": is_paused}),
    ]
