"""The one token driver: what it hands the sink, in which order, for one choice or
several, with a sink that takes pieces at once or one that makes it wait, and how a
failure, an abort and a caller that leaves end a stream.

A real engine on a virtual-time loop releases the tokens; the encoder records each piece
as a string, so the order is the assertion.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from tests.support.content import FixedContent
from tests.support.virtual_time import LoopClockScheduler, run_virtual
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.errors import RequestError
from vllm_sim.frontend.driver import TOKENS_PER_WRITE, drive, wait_for_result

MS = 1_000_000


class Recording:
    """A ChunkEncoder whose pieces name what they frame."""

    def opening(self, seq: Sequence) -> str:
        return f"open{seq.index}"

    def tokens(self, seq: Sequence, start: int, end: int) -> str:
        return f"tok{seq.index}:{start}-{end}"

    def finish(self, seq: Sequence) -> str:
        return f"fin{seq.index}"

    def closing(self, stream: RequestStream) -> str:
        return "close"

    def error(self, error: RequestError) -> str:
        return f"error {error.status}"


class Caller:
    """A caller that can leave: `leave()` runs what the driver asked to be told."""

    received = 0.0
    request_id: str | None = None

    def __init__(self) -> None:
        self.watchers: list[Callable[[], None]] = []

    def header(self, name: bytes) -> str | None:
        return None

    def on_disconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        self.watchers.append(callback)
        return lambda: self.watchers.remove(callback)

    def leave(self) -> None:
        for callback in list(self.watchers):
            callback()


def engine(tokens: int, itl_ms: int = 10, seqs: int = 4) -> Engine:
    return Engine(
        EngineLimits(max_num_seqs=seqs),
        LatencySettings(ttft=20 * MS, itl=itl_ms * MS, max_num_seqs=seqs),
        FixedContent(tokens),
        random.Random(1),
        scheduler=LoopClockScheduler(),
    )


def request(n: int = 1) -> GenerationRequest:
    return GenerationRequest(request_id="r", model="m", prompts=[Prompt([7, 7, 7])], n=n)


def run(test: Callable[[], Awaitable[None]]) -> None:
    run_virtual(asyncio.wait_for(test(), timeout=20))


def collect(written: list[list[str]]) -> Callable[[list[str]], None]:
    def sink(parts: list[str]) -> None:
        written.append(list(parts))

    return sink


def test_one_choice_goes_out_open_tokens_finish_close_whether_pushed_or_not() -> None:
    async def body() -> None:
        for push in (True, False):
            written: list[list[str]] = []
            stream = engine(3).submit(request())
            await drive(stream, Caller(), Recording(), collect(written), push)
            flat = [piece for batch in written for piece in batch]
            assert flat == ["open0", "tok0:0-1", "tok0:1-2", "tok0:2-3", "fin0", "close"]
            # Each token is written in the tick that released it.
            assert len(written) >= 3

    run(body)


def test_several_choices_open_first_then_take_turns() -> None:
    async def body() -> None:
        written: list[list[str]] = []
        stream = engine(2, itl_ms=0).submit(request(n=2))
        await drive(stream, Caller(), Recording(), collect(written))
        flat = [piece for batch in written for piece in batch]
        # A choice's finish follows its last token at once.
        assert flat == [
            "open0",
            "open1",
            "tok0:0-1",
            "tok1:0-1",
            "tok0:1-2",
            "fin0",
            "tok1:1-2",
            "fin1",
            "close",
        ]

    run(body)


def test_a_sink_that_makes_the_driver_wait_is_awaited_before_the_next_write() -> None:
    async def body() -> None:
        written: list[list[str]] = []
        waits = 0

        def slow(parts: list[str]) -> Awaitable[None]:
            written.append(list(parts))

            async def drained() -> None:
                nonlocal waits
                waits += 1
                await asyncio.sleep(0.001)

            return drained()

        stream = engine(4).submit(request())
        await drive(stream, Caller(), Recording(), slow)
        assert waits == len(written)
        assert [p for batch in written for p in batch][-2:] == ["fin0", "close"]

    run(body)


def test_a_burst_is_written_in_slices() -> None:
    async def body() -> None:
        written: list[list[str]] = []
        tokens = TOKENS_PER_WRITE * 2 + 5
        stream = engine(tokens, itl_ms=0).submit(request())
        await drive(stream, Caller(), Recording(), collect(written))
        slices = [p for batch in written for p in batch if p.startswith("tok")]
        assert slices[0] == f"tok0:0-{TOKENS_PER_WRITE}"
        assert slices[-1] == f"tok0:{TOKENS_PER_WRITE * 2}-{tokens}"

    run(body)


def test_a_caller_that_leaves_aborts_the_request_and_nothing_closes_it() -> None:
    async def body() -> None:
        written: list[list[str]] = []
        caller = Caller()
        sim = engine(50)
        stream = sim.submit(request())
        asyncio.get_running_loop().call_later(0.1, caller.leave)
        await drive(stream, caller, Recording(), collect(written))
        assert stream.done and sim.num_running == 0
        assert "close" not in [p for batch in written for p in batch]
        assert not caller.watchers  # it stopped watching

    run(body)


def test_a_request_that_fails_mid_stream_ends_with_the_error_piece() -> None:
    async def body() -> None:
        written: list[list[str]] = []
        sim = engine(50)
        stream = sim.submit(request())
        asyncio.get_running_loop().call_later(0.1, sim.stop_all, "stopping")
        await drive(stream, Caller(), Recording(), collect(written))
        assert written[-1][-1] == "error 503"

    run(body)


def test_waiting_for_a_whole_answer_raises_the_refusal_as_a_request_error() -> None:
    async def body() -> None:
        sim = engine(50)
        stream = sim.submit(request())
        asyncio.get_running_loop().call_later(0.05, sim.stop_all, "stopping")
        try:
            await wait_for_result(stream, Caller())
        except RequestError as error:
            assert error.status == 503 and error.message == "stopping"
        else:
            raise AssertionError("the failure was not raised")

    run(body)
