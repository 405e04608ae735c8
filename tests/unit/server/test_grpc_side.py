"""GrpcSide: one start on first use, shared by every caller meanwhile; a failed start
fails every call; stopping what never started does nothing."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from vllm_sim.server.grpc_side import GrpcSide


class FakeServer:
    def __init__(self, started: float) -> None:
        self.started_at = started
        self.target = "\0fake"
        self.starts = 0
        self.stopped: float | None = None

    async def start(self) -> None:
        self.starts += 1
        await asyncio.sleep(0.01)  # callers arrive while it starts

    async def stop(self, grace: float) -> None:
        self.stopped = grace


class Maker:
    def __init__(self, fail: bool = False) -> None:
        self.made: list[FakeServer] = []
        self.fail = fail

    def __call__(self, started: float) -> Any:
        if self.fail:
            raise RuntimeError("port taken")
        server = FakeServer(started)
        self.made.append(server)
        return server


def side(maker: Maker) -> GrpcSide:
    return GrpcSide(cast(Any, maker), 12.5)


async def _concurrent_first_calls_share_one_start() -> None:
    maker = Maker()
    grpc = side(maker)
    targets = await asyncio.gather(*(grpc.target() for _ in range(5)))
    assert targets == ["\0fake"] * 5
    [server] = maker.made
    assert server.starts == 1 and server.started_at == 12.5
    assert grpc.running
    assert await grpc.target() == "\0fake"
    assert server.starts == 1
    await grpc.stop(3.0)
    assert server.stopped == 3.0


async def _a_failed_start_fails_every_call_and_stops_nothing() -> None:
    grpc = side(Maker(fail=True))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="port taken"):
            await grpc.target()
    assert not grpc.running
    await grpc.stop(1.0)


async def _stopping_a_side_never_started_does_nothing() -> None:
    maker = Maker()
    await side(maker).stop(1.0)
    assert maker.made == []


async def _a_caller_that_gives_up_does_not_cancel_the_start() -> None:
    maker = Maker()
    grpc = side(maker)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(grpc.target(), 0.001)
    assert await grpc.target() == "\0fake"
    assert maker.made[0].starts == 1


async def _no_start_after_stop() -> None:
    maker = Maker()
    grpc = side(maker)
    await grpc.stop(1.0)
    with pytest.raises(RuntimeError, match="stopping"):
        await grpc.target()
    assert maker.made == []


def test_no_start_after_stop() -> None:
    asyncio.run(_no_start_after_stop())


def test_concurrent_first_calls_share_one_start() -> None:
    asyncio.run(_concurrent_first_calls_share_one_start())


def test_a_failed_start_fails_every_call_and_stops_nothing() -> None:
    asyncio.run(_a_failed_start_fails_every_call_and_stops_nothing())


def test_stopping_a_side_never_started_does_nothing() -> None:
    asyncio.run(_stopping_a_side_never_started_does_nothing())


def test_a_caller_that_gives_up_does_not_cancel_the_start() -> None:
    asyncio.run(_a_caller_that_gives_up_does_not_cancel_the_start())
