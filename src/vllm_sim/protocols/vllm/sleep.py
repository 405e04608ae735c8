"""vLLM's sleep mode endpoints: /sleep, /wake_up, /is_sleeping (dev mode only, as in vLLM).

Sleeping frees the weights and the KV cache: the prefix cache is cleared (one
AllBlocksCleared event) and stays off until the KV cache is woken. While any part sleeps,
generation requests get a 503 naming /wake_up: real vLLM has no defined answer there (older
versions crash on the GPU, newer ones are being taught to refuse), and a simulator should
show the refusal rather than hang.

Each sleep and wake is timed into vLLM's sleep-mode families (`SleepMode`), whether an
endpoint or a sleep phase of the schedule asked for it: a phase sleeps exactly as /sleep.
The answers are vLLM 0.32's: `{"status": "sleeping", "level": N}` and `{"status": "awake"
| "sleeping", "tags": [...] | null}` (sleeping while a part named by no tag still sleeps),
where the reference answers with an empty body.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from vllm_sim.engine.core import Engine
from vllm_sim.engine.lifecycle import Asleep
from vllm_sim.errors import RequestError
from vllm_sim.http.messages import AnyResponse, Handler, HttpRequest
from vllm_sim.metrics.sleep_mode import SleepModeMetrics
from vllm_sim.protocols.common.answers import json_response

_TAGS = {part.value: part for part in Asleep}


def _wake_parts(tags: list[str]) -> frozenset[Asleep]:
    """The parts `?tags=` names (all of them when none is named)."""
    for tag in tags:
        if tag not in _TAGS:
            raise RequestError(400, f"unknown wake_up tag {tag!r}: use weights or kv_cache")
    return frozenset(_TAGS[tag] for tag in tags) if tags else frozenset(Asleep)


SLEEP_LEVELS = (0, 1, 2)  # vLLM's query bounds for /sleep's level


def _level(values: list[str]) -> int:
    """`?level=` (the last one given; 1 when none is), one of vLLM's levels."""
    if not values:
        return 1
    try:
        level = int(values[-1])
    except ValueError:
        level = -1
    if level not in SLEEP_LEVELS:
        raise RequestError(400, "level must be 0, 1 or 2", "level")
    return level


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

    @property
    def paused(self) -> bool:
        return self._engine.view.paused is not None

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
        level = _level(parse_qs(request.query.decode("latin-1")).get("level", []))
        # vLLM's levels: 1 offloads the weights, 2 discards them; both free the KV cache
        # (0 only pauses the engine). The simulator frees the same for each and reports
        # the level (engine_sleep_state).
        mode.sleep(2 if level == 2 else 1)
        return json_response({"status": "sleeping", "level": level})

    async def wake_up(request: HttpRequest) -> AnyResponse:
        tags = parse_qs(request.query.decode("latin-1")).get("tags", [])
        mode.wake(_wake_parts(tags))
        status = "sleeping" if mode.asleep else "awake"
        return json_response({"status": status, "tags": tags or None})

    async def is_sleeping(request: HttpRequest) -> AnyResponse:
        # vLLM 0.32's engine counts a paused scheduler (POST /pause) as sleeping too.
        return json_response({"is_sleeping": mode.asleep or mode.paused})

    return sleep, wake_up, is_sleeping
