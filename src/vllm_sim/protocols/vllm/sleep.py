"""vLLM's sleep mode endpoints: /sleep, /wake_up, /is_sleeping (dev mode only, as in vLLM).

Sleeping frees the weights and the KV cache: the prefix cache is cleared (one
AllBlocksCleared event) and stays off until the KV cache is woken. While any part sleeps,
generation requests get a 503 naming /wake_up: real vLLM has no defined answer there (older
versions crash on the GPU, newer ones are being taught to refuse), and a simulator should
show the refusal rather than hang.

Each sleep and wake is timed into vLLM's sleep-mode families (`SleepMode`), whether an
endpoint or a sleep phase of the schedule asked for it: a phase sleeps exactly as /sleep.
The answers stay the reference's (200, empty body): the facts recorded of vLLM 0.32 say
only that it answers 200.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from vllm_sim.engine.core import Engine
from vllm_sim.engine.lifecycle import Asleep
from vllm_sim.errors import RequestError
from vllm_sim.http.messages import AnyResponse, Handler, HttpRequest, Response
from vllm_sim.metrics.sleep_mode import SleepModeMetrics
from vllm_sim.protocols.common.answers import json_response

_TAGS = {part.value: part for part in Asleep}


def _wake_parts(tags: list[str]) -> frozenset[Asleep]:
    """The parts `?tags=` names (all of them when none is named)."""
    for tag in tags:
        if tag not in _TAGS:
            raise RequestError(400, f"unknown wake_up tag {tag!r}: use weights or kv_cache")
    return frozenset(_TAGS[tag] for tag in tags) if tags else frozenset(Asleep)


class SleepMode:
    """The engine's sleep and wake, each timed into the sleep-mode families; `enabled`:
    whether POST /sleep may put it to sleep (--enable-sleep-mode)."""

    def __init__(self, engine: Engine, metrics: SleepModeMetrics, enabled: bool) -> None:
        self._engine = engine
        self._metrics = metrics
        self.enabled = enabled

    @property
    def asleep(self) -> bool:
        return bool(self._engine.view.asleep)

    def sleep(self, level: int) -> None:
        """Frees the weights and the KV cache at vLLM's `level` (1 or 2)."""
        with self._metrics.operation("sleep"):
            self._engine.sleep(level)

    def wake(self, parts: frozenset[Asleep] = frozenset(Asleep)) -> None:
        """Brings `parts` back (all of them by default)."""
        with self._metrics.operation("wake"):
            self._engine.wake(parts)


def sleep_handlers(mode: SleepMode) -> tuple[Handler, Handler, Handler]:
    """(POST /sleep, POST /wake_up, GET /is_sleeping)."""

    async def sleep(request: HttpRequest) -> AnyResponse:
        if not mode.enabled:
            raise RequestError(
                400, "Sleep mode is not enabled: start the server with --enable-sleep-mode"
            )
        levels = parse_qs(request.query.decode("latin-1")).get("level", [])
        # vLLM's levels: 1 offloads the weights, 2 discards them; both free the KV cache.
        # The simulator frees the same either way and reports the level (engine_sleep_state).
        mode.sleep(2 if levels[-1:] == ["2"] else 1)
        return Response(200, b"", b"")

    async def wake_up(request: HttpRequest) -> AnyResponse:
        tags = parse_qs(request.query.decode("latin-1")).get("tags", [])
        mode.wake(_wake_parts(tags))
        return Response(200, b"", b"")

    async def is_sleeping(request: HttpRequest) -> AnyResponse:
        return json_response({"is_sleeping": mode.asleep})

    return sleep, wake_up, is_sleeping
