"""The state a port's listener and connections share: the count of held connections, the
shedding past the cap, and the hand-over of a connection to a splice."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from vllm_sim.http.state import ServerState


class Conn:
    def __init__(self, idle: bool = True) -> None:
        self.open = True
        self.idle = idle
        self.aborted = False

    def is_idle(self) -> bool:
        return self.idle

    def timed_out(self, now: float) -> bool:
        return False

    def shutdown(self) -> None:
        pass

    def abort(self) -> None:
        self.aborted = True


async def _nothing(exchange: object) -> None:
    return None


def with_state(test: Callable[[ServerState], Awaitable[None]], cap: int = 2) -> None:
    async def run() -> None:
        await test(ServerState(_nothing, 100, max_connections=cap))

    asyncio.run(run())


def test_past_the_cap_the_oldest_idle_connection_makes_room() -> None:
    async def test(state: ServerState) -> None:
        busy, idle, new = Conn(idle=False), Conn(), Conn()
        for conn in (busy, idle, new):
            state.connection_opened(conn)
        assert idle.aborted and not busy.aborted and not new.aborted
        assert list(state.connections) == [busy, new] and state.shed == 1

    with_state(test)


def test_with_every_connection_busy_the_newcomer_is_refused() -> None:
    async def test(state: ServerState) -> None:
        held = [Conn(idle=False), Conn(idle=False)]
        for conn in held:
            state.connection_opened(conn)
        new = Conn()
        state.connection_opened(new)
        assert new.aborted and new not in state.connections and state.shed == 1

    with_state(test)


def test_a_splice_counts_as_two_descriptors_once_handed_over() -> None:
    async def test(state: ServerState) -> None:
        first, second = Conn(), Conn()
        state.connection_opened(first)
        splice = Conn()
        state.connection_handed_over(first, splice)
        assert not state.connections and state.splices == {splice}
        state.connection_opened(second)  # 1 + 2 for the splice: over a cap of 2
        assert second.aborted
        state.splice_closed(splice)
        assert not state.splices

    with_state(test)


def test_the_last_close_wakes_a_shutdown_waiting_for_it() -> None:
    async def test(state: ServerState) -> None:
        conn = Conn()
        state.connection_opened(conn)
        state.all_closed = state.loop.create_future()
        state.connection_closed(conn)
        assert state.all_closed.done()

    with_state(test)
