"""vLLM's development endpoints (served only with VLLM_SERVER_DEV_MODE=1, as in vLLM):
POST /reset_prefix_cache, and POST /pause, POST /resume, GET /is_paused, which RL
trainers use to stop generation around a weight update.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from vllm_sim.engine.core import Engine
from vllm_sim.engine.lifecycle import PauseMode
from vllm_sim.errors import RequestError
from vllm_sim.http.messages import AnyResponse, Handler, HttpRequest, Response
from vllm_sim.protocols.common.answers import json_response

_PAUSE_MODES: dict[str, PauseMode] = {"abort": "abort", "wait": "wait", "keep": "keep"}
# Query booleans as vLLM's parameter parsing reads them.
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})
# How often POST /pause?mode=wait looks whether the running requests are done.
DRAIN_POLL_SECONDS = 0.01


def _query(request: HttpRequest) -> dict[str, list[str]]:
    return parse_qs(request.query.decode("latin-1"))


def _flag(query: dict[str, list[str]], name: str, default: bool) -> bool:
    values = query.get(name)
    if not values:
        return default
    value = values[-1].strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise RequestError(400, f"{name} must be a boolean, got {values[-1]!r}", param=name)


def _pause_mode(query: dict[str, list[str]]) -> PauseMode:
    values = query.get("mode")
    given = values[-1] if values else "abort"
    mode = _PAUSE_MODES.get(given)
    if mode is None:
        choices = ", ".join(_PAUSE_MODES)
        raise RequestError(400, f"mode must be one of {choices}, got {given!r}", param="mode")
    return mode


def reset_prefix_cache_handler(engine: Engine) -> Handler:
    async def reset_prefix_cache(request: HttpRequest) -> AnyResponse:
        query = _query(request)
        reset_running = _flag(query, "reset_running_requests", False)
        _flag(query, "reset_external", False)  # no KV connector: nothing external to reset
        # Like vLLM, 200 even when running requests kept the cache from being reset.
        engine.reset_prefix_cache(reset_running)
        return Response(200, b"", b"")

    return reset_prefix_cache


def pause_handlers(engine: Engine) -> tuple[Handler, Handler, Handler]:
    """(POST /pause, POST /resume, GET /is_paused)."""

    async def pause(request: HttpRequest) -> AnyResponse:
        query = _query(request)
        mode = _pause_mode(query)
        if _flag(query, "wait_for_inflight_requests", False):  # vLLM's older spelling
            mode = "wait"
        clear_cache = _flag(query, "clear_cache", True)
        engine.pause(mode)
        if mode == "wait":
            await _running_drained(engine)
        if clear_cache and mode != "keep":  # vLLM ignores clear_cache for `keep`
            engine.reset_prefix_cache()
        return json_response({"status": "paused"})

    async def resume(request: HttpRequest) -> AnyResponse:
        engine.resume()
        return json_response({"status": "resumed"})

    async def is_paused(request: HttpRequest) -> AnyResponse:
        return json_response({"is_paused": engine.view.paused is not None})

    return pause, resume, is_paused


async def _running_drained(engine: Engine) -> None:
    """Returns once no request runs (queued ones wait for /resume), or the pause ended."""
    view = engine.view
    while view.num_running and view.paused == "wait":
        await asyncio.sleep(DRAIN_POLL_SECONDS)
