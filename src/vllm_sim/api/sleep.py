"""vLLM's sleep mode endpoints: /sleep, /wake_up, /is_sleeping (dev mode only, as in vLLM).

Sleeping frees the weights and the KV cache: the prefix cache is cleared (one
AllBlocksCleared event) and stays off until the KV cache is woken. While any part sleeps,
generation requests get a 503 naming /wake_up: real vLLM has no defined answer there (older
versions crash on the GPU, newer ones are being taught to refuse), and a simulator should
show the refusal rather than hang.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from vllm_sim.engine.core import Engine
from vllm_sim.engine.errors import RequestError
from vllm_sim.server.http import AnyResponse, Handler, HttpRequest, Response, json_response

WEIGHTS = "weights"
KV_CACHE = "kv_cache"


class SleepState:
    def __init__(self, engine: Engine, enabled: bool) -> None:
        self._engine = engine
        self.enabled = enabled
        self.asleep: set[str] = set()

    def sleep(self) -> None:
        if not self.enabled:
            raise RequestError(
                400, "Sleep mode is not enabled: start the server with --enable-sleep-mode"
            )
        self.asleep = {WEIGHTS, KV_CACHE}
        kv = self._engine.kv
        if kv is not None:
            kv.cache.clear()
            kv.cache.disabled = True
        self._engine.sleeping = True

    def wake(self, tags: list[str]) -> None:
        for tag in tags:
            if tag not in (WEIGHTS, KV_CACHE):
                raise RequestError(400, f"unknown wake_up tag {tag!r}: use weights or kv_cache")
        self.asleep -= set(tags) if tags else {WEIGHTS, KV_CACHE}
        kv = self._engine.kv
        if kv is not None and KV_CACHE not in self.asleep:
            kv.cache.disabled = False
        self._engine.sleeping = bool(self.asleep)


def sleep_handlers(state: SleepState) -> tuple[Handler, Handler, Handler]:
    """(POST /sleep, POST /wake_up, GET /is_sleeping)."""

    async def sleep(request: HttpRequest) -> AnyResponse:
        state.sleep()
        return Response(200, b"", b"")

    async def wake_up(request: HttpRequest) -> AnyResponse:
        tags = parse_qs(request.query.decode("latin-1")).get("tags", [])
        state.wake(tags)
        return Response(200, b"", b"")

    async def is_sleeping(request: HttpRequest) -> AnyResponse:
        return json_response({"is_sleeping": bool(state.asleep)})

    return sleep, wake_up, is_sleeping
