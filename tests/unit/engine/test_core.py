"""The engine's scheduler core on its own: admission, the queue, aborts, context length,
the prefix-cache reset, and a bug that costs one request, never the engine.

Each test drives a real `Engine` on a virtual-time event loop with small settings and a
content source that always produces a fixed number of tokens, so timings are exact and
take no real time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest

from tests.support.content import FixedContent
from tests.support.virtual_time import LoopClockScheduler, run_virtual, virtual_now
from vllm_sim.engine.core import QUEUE_FULL, Engine, EngineLimits
from vllm_sim.engine.errors import EngineError, Refusal, RequestAborted
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.events import AllBlocksCleared, BlockStored, KvEvent
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.lora import LoraSlots
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import RequestStream, SeqState, Sequence
from vllm_sim.engine.timing.strategy import TimingStrategy
from vllm_sim.errors import RequestError
from vllm_sim.frontend.errors import refusal_error

MS = 1_000_000


def make_engine(
    *,
    max_num_seqs: int = 1,
    queue: int = 1000,
    max_model_len: int = 1024,
    tokens: int = 1,
    ttft_ms: int = 0,
    itl_ms: int = 0,
    tf: float = 1.0,
    kv: KvCacheManager | None = None,
    timing: TimingStrategy | None = None,
) -> Engine:
    return Engine(
        EngineLimits(max_num_seqs, queue, max_model_len),
        LatencySettings(
            ttft=ttft_ms * MS,
            itl=itl_ms * MS,
            time_factor_under_load=tf,
            max_num_seqs=max_num_seqs,
        ),
        FixedContent(tokens),
        random.Random(1),
        scheduler=LoopClockScheduler(),
        kv=kv,
        timing=timing,
    )


_ids = iter(range(1_000_000))


def request(
    prompt_tokens: int = 3,
    n: int = 1,
    prompts: int = 1,
    max_tokens: int | None = None,
) -> GenerationRequest:
    return GenerationRequest(
        request_id=f"req-{next(_ids)}",
        model="m",
        prompts=[Prompt([7] * prompt_tokens) for _ in range(prompts)],
        n=n,
        max_tokens=max_tokens,
    )


def run(test: Callable[[], Awaitable[None]]) -> None:
    run_virtual(asyncio.wait_for(test(), timeout=20))


def refusal(engine: Engine, req: GenerationRequest, kind: Refusal) -> RequestError:
    """The engine's refusal of `req`, as the API answers it."""
    with pytest.raises(EngineError) as info:
        engine.submit(req)
    assert info.value.refusal is kind
    return refusal_error(info.value)


def queue_full(engine: Engine, req: GenerationRequest) -> RequestError:
    return refusal(engine, req, Refusal.QUEUE_FULL)


def assert_queue_full(error: RequestError) -> None:
    assert error.status == 429
    assert error.message == QUEUE_FULL
    assert error.message == "Failed to enqueue request, waiting requests queue is full"
    assert error.error_type == "RateLimitError"


def assert_never_fits(error: RequestError) -> None:
    assert error.status == 400 and error.param == "n"
    assert error.message.startswith("The request needs ")
    assert "(--max-num-seqs + --max-waiting-queue-length)" in error.message


def started(stream: RequestStream) -> float:
    t = stream.sequences[0].t_started
    assert t is not None
    return t


def finished(stream: RequestStream) -> float:
    t = stream.sequences[0].t_finished
    assert t is not None
    return t


# ----------------------------------------------------------------- admission and queue


def test_fifo_admission() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, ttft_ms=30)
        streams = [engine.submit(request()) for _ in range(4)]
        assert engine.num_running == 1 and engine.num_waiting == 3
        await asyncio.gather(*(s.wait_done() for s in streams))
        for s in streams:
            assert s.error is None and s.sequences[0].finished
        starts = [started(s) for s in streams]
        ends = [finished(s) for s in streams]
        assert starts == sorted(starts) and ends == sorted(ends)
        for prev_end, next_start in zip(ends, starts[1:], strict=False):
            assert next_start >= prev_end  # one slot: strictly one after the other
        assert engine.open_requests == 0

    run(body)


def test_running_never_exceeds_max_num_seqs() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=2, ttft_ms=20, itl_ms=10, tokens=3)
        streams = [engine.submit(request()) for _ in range(7)]
        assert (engine.num_running, engine.num_waiting, engine.open_requests) == (2, 5, 7)
        seen: list[tuple[int, int]] = []
        while not all(s.done for s in streams):
            seen.append((engine.num_running, engine.num_waiting))
            await asyncio.sleep(0.002)
        assert max(r for r, _ in seen) == 2
        assert all(r == 2 for r, w in seen if w > 0)  # no idle slot while someone waits
        waits = [w for _, w in seen]
        assert waits == sorted(waits, reverse=True)  # the queue only drains
        assert (engine.num_running, engine.num_waiting) == (0, 0)

    run(body)


def test_queue_full_is_429_and_changes_nothing() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, queue=1, ttft_ms=100)
        a = engine.submit(request())
        b = engine.submit(request())
        assert (engine.num_running, engine.num_waiting, engine.open_requests) == (1, 1, 2)
        assert_queue_full(queue_full(engine, request()))
        assert (engine.num_running, engine.num_waiting, engine.open_requests) == (1, 1, 2)
        await a.wait_done()
        # A finished: B runs, the queue place is free again.
        assert (engine.num_running, engine.num_waiting) == (1, 0)
        c = engine.submit(request())
        assert engine.num_waiting == 1
        await asyncio.gather(b.wait_done(), c.wait_done())
        assert b.error is None and c.error is None
        assert engine.open_requests == 0

    run(body)


def test_multi_sequence_request_is_queued_whole_or_refused_whole() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, queue=2, ttft_ms=50)
        a = engine.submit(request())
        assert_queue_full(queue_full(engine, request(n=3)))
        assert_queue_full(queue_full(engine, request(prompts=3)))
        assert (engine.num_running, engine.num_waiting) == (1, 0)  # nothing partly queued
        b = engine.submit(request(n=2))
        assert (engine.num_running, engine.num_waiting, engine.open_requests) == (1, 2, 3)
        assert_queue_full(queue_full(engine, request()))
        await asyncio.gather(a.wait_done(), b.wait_done())
        assert b.error is None and len(b.sequences) == 2
        assert all(s.finished for s in b.sequences)

    run(body)


def test_multi_sequence_request_uses_free_slots_then_the_queue() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=2, queue=1, ttft_ms=50)
        # 4 sequences can never fit 2 slots and 1 queue place: a 400, not a retryable 429.
        assert_never_fits(refusal(engine, request(n=4), Refusal.INVALID))
        assert (engine.num_running, engine.num_waiting) == (0, 0)  # none of it started
        a = engine.submit(request(n=3))
        assert (engine.num_running, engine.num_waiting) == (2, 1)
        assert_queue_full(queue_full(engine, request()))
        await a.wait_done()
        assert a.error is None and all(s.finished for s in a.sequences)

    run(body)


def test_zero_queue_length_refuses_when_all_slots_busy() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, queue=0, ttft_ms=50)
        a = engine.submit(request())
        assert_queue_full(queue_full(engine, request()))
        assert engine.num_waiting == 0
        await a.wait_done()
        b = engine.submit(request())  # a free slot again: accepted
        never = refusal(make_engine(max_num_seqs=1, queue=0), request(n=2), Refusal.INVALID)
        assert_never_fits(never)
        await b.wait_done()
        assert b.error is None

    run(body)


def test_open_requests_counts_queued_and_running() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, queue=5, ttft_ms=40)
        assert engine.open_requests == 0
        a = engine.submit(request())
        b = engine.submit(request())
        assert engine.open_requests == 2
        c = engine.submit(request(n=3))
        assert engine.open_requests == 5
        await a.wait_done()
        assert engine.open_requests == 4
        await asyncio.gather(b.wait_done(), c.wait_done())
        assert engine.open_requests == 0

    run(body)


# ----------------------------------------------------------------- abort


def test_abort_waiting_request_frees_its_queue_place() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, queue=1, ttft_ms=150)
        a = engine.submit(request())
        b = engine.submit(request())
        b.abort()
        assert (engine.num_running, engine.num_waiting, engine.open_requests) == (1, 0, 1)
        assert b.done and isinstance(b.error, RequestAborted)
        assert b.sequences[0].state is SeqState.ABORTED
        c = engine.submit(request())  # the freed queue place is usable at once
        assert engine.num_waiting == 1
        await asyncio.gather(a.wait_done(), c.wait_done())
        assert a.error is None and c.error is None
        assert b.sequences[0].t_started is None  # never ran
        assert engine.open_requests == 0

    run(body)


def test_abort_running_request_admits_the_next_at_once() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, ttft_ms=5000)
        a = engine.submit(request())
        b = engine.submit(request())
        await asyncio.sleep(0.05)
        t_abort = virtual_now()
        a.abort()
        assert a.done and isinstance(a.error, RequestAborted)
        assert (engine.num_running, engine.num_waiting) == (1, 0)
        assert b.sequences[0].state is SeqState.RUNNING
        assert started(b) == t_abort
        b.abort()
        assert (engine.num_running, engine.num_waiting, engine.open_requests) == (0, 0, 0)
        a.abort()  # idempotent
        assert engine.open_requests == 0

    run(body)


def test_abort_mid_decode_stops_the_token_clock() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, itl_ms=20, tokens=50)
        a = engine.submit(request())
        await asyncio.sleep(0.1)
        a.abort()
        emitted = a.sequences[0].emitted
        assert 0 < emitted < 50
        assert engine.num_running == 0
        await asyncio.sleep(0.1)
        assert a.sequences[0].emitted == emitted
        assert engine.open_requests == 0

    run(body)


def test_abort_of_multi_sequence_request_frees_every_slot_and_place() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=2, queue=5, ttft_ms=5000)
        a = engine.submit(request(n=4))
        assert (engine.num_running, engine.num_waiting) == (2, 2)
        b = engine.submit(request())
        a.abort()
        assert (engine.num_running, engine.num_waiting) == (1, 0)
        assert b.sequences[0].state is SeqState.RUNNING
        b.abort()
        assert engine.open_requests == 0

    run(body)


# ----------------------------------------------------------------- context length


def context_error(engine: Engine, req: GenerationRequest) -> RequestError:
    return refusal(engine, req, Refusal.INVALID)


def test_context_length_error_is_raised_at_submit() -> None:
    async def body() -> None:
        engine = make_engine(max_model_len=20)
        # vLLM counts the prompt only until it overflows: 20 - 10 + 1 = 11 of its 15 tokens.
        error = context_error(engine, request(prompt_tokens=15, max_tokens=10))
        assert error.status == 400
        assert error.message == (
            "This model's maximum context length is 20 tokens. However, you requested 10 "
            "output tokens and your prompt contains at least 11 input tokens, for a total of "
            "at least 21 tokens. Please reduce the length of the input prompt or the number "
            "of requested output tokens. (parameter=input_tokens, value=11)"
        )
        assert error.param == "input_tokens"
        assert engine.open_requests == 0
        # Without max_tokens the prompt must still leave room for one token.
        error = context_error(engine, request(prompt_tokens=20))
        assert error.message == (
            "This model's maximum context length is 20 tokens. However, you requested 0 "
            "output tokens and your prompt contains at least 21 input tokens, for a total of "
            "at least 21 tokens. Please reduce the length of the input prompt or the number "
            "of requested output tokens. (parameter=input_tokens, value=21)"
        )
        assert error.param == "input_tokens"
        # More output than the whole context is refused as such, whatever the prompt.
        error = context_error(engine, request(prompt_tokens=1, max_tokens=21))
        assert error.message == (
            "max_tokens=21 cannot be greater than max_model_len=20. Please request fewer "
            "output tokens. (parameter=max_tokens, value=21)"
        )
        assert error.param == "max_tokens"
        ok = engine.submit(request(prompt_tokens=15, max_tokens=5))  # exactly the limit
        await ok.wait_done()
        assert ok.error is None

    run(body)


def test_context_length_checked_for_every_prompt_before_anything_runs() -> None:
    async def body() -> None:
        engine = make_engine(max_model_len=20, ttft_ms=10)
        req = request(prompt_tokens=3, prompts=2, max_tokens=5)
        req.prompts[1] = Prompt([7] * 18)
        error = context_error(engine, req)  # the first prompt fits, the second does not
        assert error.status == 400 and error.param == "input_tokens"
        assert "requested 5 output tokens" in error.message
        assert (engine.num_running, engine.num_waiting) == (0, 0)

    run(body)


def test_context_length_wins_over_a_full_queue() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, queue=0, max_model_len=20, ttft_ms=50)
        a = engine.submit(request())
        error = context_error(engine, request(prompt_tokens=30))
        assert error.status == 400
        a.abort()

    run(body)


# ----------------------------------------------------------------- the prefix-cache reset


def _kv_engine(events: list[KvEvent]) -> Engine:
    cache = BlockCache(64, 4, events.append)
    cache.loaded_models.add("m")
    return make_engine(tokens=3, itl_ms=10, max_num_seqs=2, kv=KvCacheManager(cache, "", 0.0))


def test_reset_prefix_cache_refuses_while_blocks_are_held() -> None:
    async def scenario() -> None:
        events: list[KvEvent] = []
        engine = _kv_engine(events)
        assert engine.kv is not None
        stream = engine.submit(request(prompt_tokens=8))
        await asyncio.sleep(0)
        assert engine.kv.cache.used
        assert engine.reset_prefix_cache() is False
        assert not any(isinstance(e, AllBlocksCleared) for e in events)
        await stream.wait_done()
        assert engine.kv.cache.unused and engine.reset_prefix_cache() is True
        assert isinstance(events[-1], AllBlocksCleared)
        assert not engine.kv.cache.unused
        running = engine.submit(request(prompt_tokens=8))
        seq = running.sequences[0]
        assert engine.reset_prefix_cache(reset_running=True) is True
        # Preempted, the cache cleared, then recomputed at once: its blocks stored again.
        assert isinstance(events[-2], AllBlocksCleared) and isinstance(events[-1], BlockStored)
        assert seq.preemptions == 1 and engine.num_running == 1
        await running.wait_done()
        assert seq.finished and len(seq.output_ids) == 3 and seq.emitted == 3

    run(scenario)


def test_reset_prefix_cache_without_a_cache() -> None:
    assert make_engine().reset_prefix_cache() is True


# ----------------------------------------------------------------- a bug costs one request


class Boom(RuntimeError):
    pass


class FaultyObserver(EngineObserver):
    """Raises at the named events, for the first `times` calls of each (always when -1)."""

    def __init__(self, *events: str, times: int = -1) -> None:
        self.left = dict.fromkeys(events, times)

    def _maybe_raise(self, event: str) -> None:
        if self.left.get(event, 0) != 0:
            self.left[event] -= 1
            raise Boom(event)

    def sequence_queued(self, seq: Sequence) -> None:
        self._maybe_raise("sequence_queued")

    def sequence_started(self, seq: Sequence) -> None:
        self._maybe_raise("sequence_started")

    def first_token(self, seq: Sequence) -> None:
        self._maybe_raise("first_token")

    def inter_tokens(self, seq: Sequence, delay: float, count: int) -> None:
        self._maybe_raise("inter_tokens")

    def sequence_finished(self, seq: Sequence) -> None:
        self._maybe_raise("sequence_finished")

    def sequence_aborted(self, seq: Sequence) -> None:
        self._maybe_raise("sequence_aborted")

    def sequence_failed(self, seq: Sequence) -> None:
        self._maybe_raise("sequence_failed")


def assert_internal(stream: RequestStream) -> None:
    assert isinstance(stream.error, EngineError)
    assert stream.error.refusal is Refusal.INTERNAL
    error = refusal_error(stream.error)
    assert error.status == 500


async def served(engine: Engine, count: int = 3, **kwargs: int) -> None:
    """`count` later requests, more than the slots, all run to the end."""
    streams = [engine.submit(request(**kwargs)) for _ in range(count)]
    await asyncio.gather(*(s.wait_done() for s in streams))
    for s in streams:
        assert s.error is None and s.sequences[0].finished
    assert engine.open_requests == 0 and engine.num_running == 0


@pytest.mark.parametrize(
    "event", ["sequence_started", "first_token", "inter_tokens", "sequence_finished"]
)
def test_an_observer_that_raises_fails_only_its_request(
    event: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=2, ttft_ms=10, itl_ms=5, tokens=4)
        engine.observer = FaultyObserver(event, times=2)
        first = [engine.submit(request()) for _ in range(2)]
        await asyncio.gather(*(s.wait_done() for s in first))
        for s in first:
            assert_internal(s)
        assert engine.open_requests == 0 and engine.num_running == 0
        await served(engine)  # the slots came back and the clock still runs

    run(body)
    crashes = [r for r in caplog.records if r.exc_info and "failed while" in r.getMessage()]
    assert len(crashes) == 2  # logged once per failed request


def test_a_raising_queue_observer_refuses_the_request_cleanly() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, ttft_ms=10)
        busy = engine.submit(request())
        engine.observer = FaultyObserver("sequence_queued", times=1)
        error = refusal(engine, request(n=2), Refusal.INTERNAL)
        assert error.status == 500
        assert engine.num_waiting == 0 and engine.num_running == 1
        await busy.wait_done()
        await served(engine)

    run(body)


def test_a_raising_end_observer_still_frees_the_slot() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, ttft_ms=10, itl_ms=10, tokens=5)
        engine.observer = FaultyObserver("sequence_aborted")
        running = engine.submit(request())
        waiting = engine.submit(request())
        running.abort()
        assert engine.num_running == 1 and engine.num_waiting == 0  # the next one started
        await waiting.wait_done()
        assert waiting.error is None
        engine.observer = FaultyObserver("sequence_started", "sequence_failed", times=1)
        failing = engine.submit(request())
        assert_internal(failing)
        assert engine.open_requests == 0
        await served(engine)

    run(body)


def test_a_latency_model_that_cannot_compute_does_not_wedge_the_engine() -> None:
    """The probe's wedge: an infinite time factor made every TTFT NaN, and each request
    that hit it kept its slot until none was left."""

    async def body() -> None:
        engine = make_engine(max_num_seqs=2, ttft_ms=10, tf=float("inf"))
        for _ in range(5):  # more than max-num-seqs
            stream = engine.submit(request())
            await stream.wait_done()
            assert_internal(stream)
            assert engine.open_requests == 0
        engine.reconfigure(engine.limits, LatencySettings(ttft=10 * MS, max_num_seqs=2))
        await served(engine)

    run(body)


class BrokenSlots(LoraSlots):
    """LoRA slots whose admission check fails while `broken`."""

    broken = True

    def can_run(self, name: str) -> bool:
        if self.broken:
            raise Boom(name)
        return super().can_run(name)


def test_a_lora_bookkeeping_bug_releases_the_adapter_and_the_slot() -> None:
    async def body() -> None:
        engine = make_engine(max_num_seqs=1, ttft_ms=10)
        slots = engine.lora_slots
        broken = engine.lora_slots = BrokenSlots(slots.max_loras, slots.max_cpu_loras)
        req = request()
        req.lora = "adapter"
        stream = engine.submit(req)
        await stream.wait_done()
        assert_internal(stream)
        broken.broken = False
        assert engine.open_requests == 0 and not engine.lora_slots.running
        await served(engine)

    run(body)
