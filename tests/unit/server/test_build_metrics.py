"""An instance's /metrics wired to its engine, driven in-process through its ASGI app: the
waiting requests by reason, the engine's sleep state (and /sleep's level), the engine label
of a data-parallel rank."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from tests.support.exchange import exchange
from vllm_sim.config import load_config
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.metrics.lag import LAG, LAG_MAX
from vllm_sim.server.build import Instance, build_instance

ENV = {"VLLM_SERVER_DEV_MODE": "1"}  # the sleep routes are development routes, as in vLLM


def instance(*args: str, rank: int = 0) -> Instance:
    cfg = load_config(["--model", "m", *args], ENV)
    return build_instance(cfg, 8000, rank)


async def call(inst: Instance, method: str, path: str, query: bytes = b"") -> tuple[int, bytes]:
    answer = await exchange(inst.app, method, path, query=query)
    return answer.status, answer.body


async def series(inst: Instance, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    status, body = await call(inst, "GET", "/metrics")
    assert status == 200
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name == name
    }


def request(model: str) -> GenerationRequest:
    return GenerationRequest(request_id=model, model=model, prompts=[Prompt([1, 2])], max_tokens=2)


def by(values: dict[tuple[tuple[str, str], ...], float], label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for labels, value in values.items()}


def test_waiting_requests_by_reason() -> None:
    """One LoRA slot: a second adapter's request is deferred; a base-model request that finds
    every running slot taken waits for capacity. The two sum to num_requests_waiting."""

    async def main() -> None:
        loras = ['{"name":"a","path":"/a"}', '{"name":"b","path":"/b"}']
        inst = instance(
            "--max-num-seqs", "2", "--max-loras", "1", "--time-to-first-token", "10s",
            "--lora-modules", *loras,
        )  # fmt: skip
        streams = [inst.engine.submit(request(m)) for m in ("a", "m", "b", "m")]
        waiting = by(await series(inst, "vllm:num_requests_waiting_by_reason"), "reason")
        assert waiting == {"capacity": 1.0, "deferred": 1.0}
        total = await series(inst, "vllm:num_requests_waiting")
        assert list(total.values()) == [2.0]
        for stream in streams:
            stream.abort()

    asyncio.run(main())


def test_sleep_state_follows_sleep_level_and_wake_up() -> None:
    async def main() -> None:
        inst = instance("--enable-sleep-mode")
        name = "vllm:engine_sleep_state"
        states = by(await series(inst, name), "sleep_state")
        assert states == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
        assert (await call(inst, "POST", "/sleep", b"level=2"))[0] == 200
        states = by(await series(inst, name), "sleep_state")
        assert states == {"awake": 0.0, "weights_offloaded": 0.0, "discard_all": 1.0}
        assert (await call(inst, "POST", "/wake_up"))[0] == 200
        assert (await call(inst, "POST", "/sleep"))[0] == 200  # vLLM's default: level 1
        states = by(await series(inst, name), "sleep_state")
        assert states == {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 0.0}

    asyncio.run(main())


def test_a_data_parallel_rank_is_the_engine_label() -> None:
    async def main() -> None:
        inst = instance(rank=2)
        running = await series(inst, "vllm:num_requests_running")
        assert [dict(labels)["engine"] for labels in running] == ["2"]
        info = await series(inst, "vllm:cache_config_info")
        assert [dict(labels)["engine"] for labels in info] == ["2"]

    asyncio.run(main())


def test_the_output_lag_is_shown_whatever_the_metrics_mode() -> None:
    """The simulator's own lag gauges, last on the page, with the engine's labels: with
    vLLM's request metrics, without them (--disable-log-stats) and under fake metrics; a
    streamed answer's writes are what they measure."""

    async def main() -> None:
        for args in ((), ("--disable-log-stats",), ("--fake-metrics", "{}")):
            inst = instance(*args, rank=1)
            status, _ = await chat_stream(inst)
            assert status == 200
            _, body = await call(inst, "GET", "/metrics")
            names = [f.name for f in text_string_to_metric_families(body.decode())]
            assert names[-2:] == [LAG, LAG_MAX], args
            lag = await series(inst, LAG)
            assert list(lag) == [(("engine", "1"), ("model_name", "m"))], args
            [value] = lag.values()
            assert 0.0 <= value < 1.0, args  # written in the tick that released it
            [longest] = (await series(inst, LAG_MAX)).values()
            assert 0.0 < longest < 1.0, args  # its writes were measured

    asyncio.run(main())


async def chat_stream(inst: Instance) -> tuple[int, bytes]:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'
    headers = [(b"content-type", b"application/json")]
    answer = await exchange(inst.app, "POST", "/v1/chat/completions", body, headers)
    return answer.status, answer.body
