"""MetricsRecorder on a real engine (virtual time): the families vLLM 0.32 added, and those
the recorder derives at scrape time from what the request path keeps."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.virtual_time import LoopClockScheduler, run_virtual
from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.kvcache.cache import BlockCache
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.latency import LatencySettings
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import Sequence
from vllm_sim.engine.tokenizer import SimulatedTokenizer
from vllm_sim.metrics import catalogue as names
from vllm_sim.metrics.catalogue import SchedulerView, VllmMetrics, fake_scheduler
from vllm_sim.metrics.exposition import render
from vllm_sim.metrics.recorder import MetricsRecorder

MS = 1_000_000
BLOCK = 4


class Lengths(ContentSource):
    """Choice i of a request says 2 + i tokens (i: its index in the answer)."""

    def __init__(self) -> None:
        super().__init__("random", SimulatedTokenizer(), random.Random(0))

    def generate(self, seq: Sequence, max_model_len: int) -> None:
        length = 2 + seq.index
        seq.output_ids = list(range(length))
        seq.output_pieces = [f"t{i} " for i in range(length)]
        seq.finish_reason = Finish.LENGTH


class Recorded:
    """An engine whose metrics a recorder keeps, as a real-mode server has them."""

    def __init__(
        self,
        *,
        seqs: int = 8,
        queue: int = 100,
        ttft_ms: int = 0,
        itl_ms: int = 0,
        kv: bool = False,
        output_limit: int = 0,
    ) -> None:
        self.metrics = VllmMetrics("m", 1000)
        self.metrics.register(SchedulerView(*fake_scheduler()))
        self.metrics.precreate_series()
        self.recorder = MetricsRecorder(self.metrics)
        cache = KvCacheManager(BlockCache(64, BLOCK), "seed", 0.0) if kv else None
        self.engine = Engine(
            EngineLimits(seqs, queue, 1000, BLOCK, max_request_output_tokens=output_limit),
            LatencySettings(ttft=ttft_ms * MS, itl=itl_ms * MS, max_num_seqs=seqs),
            Lengths(),
            random.Random(1),
            scheduler=LoopClockScheduler(),
            observer=self.recorder,
            kv=cache,
        )

    async def run(self, *requests: GenerationRequest) -> None:
        streams = [self.engine.submit(r) for r in requests]
        for stream in streams:
            await stream.wait_done()

    def hist(self, name: str) -> tuple[dict[str, float], float, float]:
        """(cumulative buckets by le, count, sum) of the one series of a histogram."""
        found = self._samples()
        buckets = {lbl["le"]: v for n, lbl, v in found if n == name + "_bucket"}
        [count] = [v for n, _, v in found if n == name + "_count"]
        [total] = [v for n, _, v in found if n == name + "_sum"]
        return buckets, count, total

    def value(self, name: str, **labels: str) -> float:
        [found] = [
            v for n, lbl, v in self._samples() if n == name and labels.items() <= lbl.items()
        ]
        return found

    def _samples(self) -> list[tuple[str, dict[str, str], float]]:
        text = render(self.metrics.families)
        return [
            (s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]


_ids = iter(range(1_000_000))


def request(
    prompt: list[int], n: int = 1, prompts: int = 1, max_tokens: int = 20, **extra: object
) -> GenerationRequest:
    return GenerationRequest(
        request_id=f"r{next(_ids)}",
        model="m",
        prompts=[Prompt(list(prompt)) for _ in range(prompts)],
        n=n,
        max_tokens=max_tokens,
        **extra,  # type: ignore[arg-type]
    )


def run(test: Callable[[], Awaitable[None]]) -> None:
    run_virtual(asyncio.wait_for(test(), timeout=20))


def test_n_and_the_longest_choice_once_per_prompt() -> None:
    """Two prompts with n = 3: vLLM's two parents. Choices say 2..7 tokens; each parent
    observes n = 3 and its longest choice (4 and 7) once its last choice ended."""

    async def main() -> None:
        sim = Recorded()
        await sim.run(request([5, 6, 7], n=3, prompts=2), request([1, 2]))
        buckets, count, total = sim.hist(names.PARAMS_N)
        assert (count, total) == (3, 3 + 3 + 1)
        assert (buckets["1.0"], buckets["2.0"], buckets["5.0"]) == (1, 1, 3)
        _, count, total = sim.hist(names.MAX_GENERATION_TOKENS)
        assert (count, total) == (3, 4 + 7 + 2)
        _, count, total = sim.hist(names.GENERATION_TOKENS_HIST)
        assert (count, total) == (7, sum(range(2, 8)) + 2)

    run(main)


def test_a_parent_is_observed_only_when_its_last_choice_ended() -> None:
    async def main() -> None:
        sim = Recorded(itl_ms=10)
        stream = sim.engine.submit(request([1, 2, 3], n=2))
        await asyncio.sleep(0.015)  # the 2-token choice ended, the 3-token one did not
        assert sim.hist(names.GENERATION_TOKENS_HIST)[1] == 1
        assert sim.hist(names.PARAMS_N)[1:] == (0, 0)
        assert sim.hist(names.MAX_GENERATION_TOKENS)[1:] == (0, 0)
        await stream.wait_done()
        assert sim.hist(names.PARAMS_N)[1:] == (1, 2)
        assert sim.hist(names.MAX_GENERATION_TOKENS)[1:] == (1, 3)

    run(main)


def test_a_failed_parent_observes_neither_n_nor_a_longest_choice() -> None:
    """n = 2, one slot: the 2-token choice ends, then the 3-token one passes the request's
    output limit (--max-request-output-tokens 4) and the request fails."""

    async def main() -> None:
        sim = Recorded(seqs=1, output_limit=4)
        stream = sim.engine.submit(request([1], n=2, max_tokens=2))
        await stream.wait_done()
        assert stream.error is not None
        assert sim.hist(names.GENERATION_TOKENS_HIST)[1:] == (1, 2)
        assert sim.hist(names.PARAMS_N)[1:] == (0, 0)
        assert sim.hist(names.MAX_GENERATION_TOKENS)[1:] == (0, 0)

    run(main)


def test_preemptions_count_and_never_preempted_requests_observe_zero() -> None:
    async def main() -> None:
        sim = Recorded(ttft_ms=10)
        first = sim.engine.submit(request([1]))
        await asyncio.sleep(0.001)
        [seq] = first.sequences
        sim.recorder.sequence_preempted(seq)  # what the engine will report
        sim.recorder.sequence_preempted(seq)
        await first.wait_done()
        await sim.run(request([2]), request([3]))
        assert sim.value("vllm:num_preemptions_total") == 2
        buckets, count, total = sim.hist(names.NUM_PREEMPTIONS_HIST)
        assert (count, total) == (3, 2)
        assert (buckets["1.0"], buckets["2.0"]) == (2, 3)

    run(main)


def test_cached_prompt_tokens_by_source_and_kv_computed() -> None:
    """The same 10-token prompt twice: the second finds two 4-token blocks cached."""

    async def main() -> None:
        sim = Recorded(kv=True)
        prompt = list(range(10, 20))
        await sim.run(request(prompt))
        await sim.run(request(prompt))
        hits = sim.value("vllm:prefix_cache_hits_total")
        assert hits == 8
        assert sim.value("vllm:prompt_tokens_cached_total") == hits
        by_source = "vllm:prompt_tokens_by_source_total"
        assert sim.value(by_source, source="local_cache_hit") == hits
        assert sim.value(by_source, source="local_compute") == 20 - hits
        assert sim.value(by_source, source="external_kv_transfer") == 0
        cached_by = "vllm:prompt_tokens_cached_by_source_total"
        assert sim.value(cached_by, source="device") == hits
        assert sim.value(cached_by, source="host") == 0
        buckets, count, total = sim.hist(names.PREFILL_KV_COMPUTED)
        assert (count, total) == (2, 10 + 2)
        assert (buckets["2.0"], buckets["10.0"]) == (1, 2)

    run(main)


def test_a_prefill_nodes_kv_is_an_external_transfer() -> None:
    """The decode leg of a P/D pair gets the prompt's full blocks from its prefill node."""

    async def main() -> None:
        sim = Recorded(kv=True)
        await sim.run(request(list(range(30, 40)), do_remote_prefill=True))
        assert sim.value("vllm:external_prefix_cache_queries_total") == 10
        assert sim.value("vllm:external_prefix_cache_hits_total") == 8
        by_source = "vllm:prompt_tokens_by_source_total"
        assert sim.value(by_source, source="external_kv_transfer") == 8
        assert sim.value(by_source, source="local_compute") == 2
        cached_by = "vllm:prompt_tokens_cached_by_source_total"
        assert sim.value(cached_by, source="p2p") == 8

    run(main)


def test_iteration_tokens_per_token_clock_tick() -> None:
    """Two 3-token prompts started together, choices of 2 and 3 tokens, TTFT and ITL 10 ms:
    the first tick ends both prefills (3 + 3) with a token each, then one tick per step."""

    async def main() -> None:
        sim = Recorded(ttft_ms=10, itl_ms=10)
        await sim.run(request([1, 2, 3], n=2))
        buckets, count, total = sim.hist(names.ITERATION_TOKENS)
        assert (count, total) == (3, (3 + 3 + 2) + 2 + 1)
        assert (buckets["1.0"], buckets["8.0"]) == (1, 3)

    run(main)


def test_without_latency_an_admission_is_one_step() -> None:
    async def main() -> None:
        sim = Recorded()
        await sim.run(request([1, 2, 3], n=2))
        assert sim.hist(names.ITERATION_TOKENS)[1:] == (1, 3 + 3 + 2 + 3)

    run(main)


def test_a_full_queue_is_an_admission_rejection_per_request() -> None:
    async def main() -> None:
        sim = Recorded(seqs=1, queue=1, ttft_ms=10)
        running = sim.engine.submit(request([1]))
        for _ in range(2):  # its two sequences cannot both wait in the one queue place
            with pytest.raises(EngineError) as refused:
                sim.engine.submit(request([2], n=2))
            assert refused.value.refusal is Refusal.QUEUE_FULL
        await running.wait_done()
        rejected = "vllm:admission_rejections_total"
        assert sim.value(rejected, reason="max_num_queued_reqs") == 2
        assert sim.value(rejected, reason="max_num_queued_tokens") == 0

    run(main)
