"""What an engine shows of itself through its view, read as its state changes."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.engine.test_core import make_engine, request, run
from vllm_sim.engine.core import EngineLimits
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.lifecycle import Asleep, PauseMode
from vllm_sim.engine.view import EngineView, KvFigures


def test_counts_follow_the_queue_and_the_slots() -> None:
    async def scenario() -> None:
        engine = make_engine(max_num_seqs=1, ttft_ms=10)
        view = engine.view
        assert (view.num_running, view.num_waiting, view.open_requests) == (0, 0, 0)
        first, second = engine.submit(request()), engine.submit(request(n=2))
        assert (view.num_running, view.num_waiting, view.open_requests) == (1, 2, 3)
        assert view.waiting_by_reason() == (2, 0)
        await asyncio.gather(first.wait_done(), second.wait_done())
        assert view.open_requests == 0

    run(scenario)


def test_a_sequence_whose_adapter_cannot_load_is_deferred() -> None:
    async def scenario() -> None:
        engine = make_engine(max_num_seqs=2, ttft_ms=10)
        engine.load_lora("a", "/a")
        engine.load_lora("b", "/b")
        streams = []
        for model in ("a", "b", "m"):
            req = request()
            req.model = model
            streams.append(engine.submit(req))
        # "a" runs and holds the one adapter slot: "b" is deferred, "m" waits for a slot.
        assert engine.view.waiting_by_reason() == (0, 1)
        for stream in streams:
            stream.abort()

    run(scenario)


def pause_of(view: EngineView) -> PauseMode | None:
    """The view's pause state, read anew (not narrowed by an earlier assert)."""
    return view.paused


def test_pause_and_sleep_show_as_they_are() -> None:
    async def scenario() -> None:
        engine = make_engine()
        view = engine.view
        assert not view.asleep and view.sleep_level == 0
        assert pause_of(view) is None
        engine.pause("keep")
        assert pause_of(view) == "keep"
        engine.resume()
        engine.sleep(2)
        assert view.asleep == frozenset(Asleep) and view.sleep_level == 2

    run(scenario)


def test_kv_figures_with_and_without_a_cache() -> None:
    async def scenario() -> None:
        bare = make_engine()
        assert bare.view.kv_figures() is None and bare.view.kv_usage == 0.0
        engine = make_engine(ttft_ms=10, kv=KvCacheManager(BlockCache(10, 4), "", 0.0))
        stream = engine.submit(request(prompt_tokens=8))
        assert engine.view.kv_figures() == KvFigures(2, 10, 4, 0.2)
        assert engine.view.kv_usage == pytest.approx(0.2)
        await stream.wait_done()
        assert engine.view.kv_figures() == KvFigures(0, 10, 4, 0.0)

    run(scenario)


def test_loras_limits_and_synthesis_are_read_only_figures() -> None:
    async def scenario() -> None:
        engine = make_engine()
        view = engine.view
        engine.load_lora("a", "/adapters/a")
        assert dict(view.loras) == {"a": "/adapters/a"}
        with pytest.raises(TypeError):
            view.loras["b"] = "/b"  # type: ignore[index]
        engine.unload_lora("a")
        assert not view.loras
        assert view.limits is engine.limits
        engine.reconfigure(EngineLimits(max_num_seqs=3), engine.latency.settings)
        assert view.limits.max_num_seqs == 3
        assert view.synthesis is engine.content.synthesis

    run(scenario)
