"""vLLM 0.32's speculative-decoding counters: registered only with speculation, first in
vLLM's order, every series at 0 from the start (each draft position's too), and kept by the
recorder from the engine's verifications, consistent with the tokens generated."""

from __future__ import annotations

import random

from prometheus_client.parser import text_string_to_metric_families

from tests.support.content import FixedContent
from tests.support.virtual_time import LoopClockScheduler
from tests.unit.engine.test_core import request, run
from vllm_sim.engine.core import Engine, EngineLimits
from vllm_sim.engine.latency import LatencyModel, LatencySettings
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.engine.timing.speculative import Speculation, SpeculativeTokenClock
from vllm_sim.metrics import catalogue as names
from vllm_sim.metrics.catalogue import SchedulerView, VllmMetrics, fake_scheduler
from vllm_sim.metrics.exposition import render
from vllm_sim.metrics.recorder import MetricsRecorder

SPEC_NAMES = [
    names.SPEC_DRAFTS,
    names.SPEC_DRAFT_TOKENS,
    names.SPEC_ACCEPTED,
    names.SPEC_ACCEPTED_PER_POS,
]


def metrics(k: int) -> VllmMetrics:
    built = VllmMetrics("m", 1000, engine="0", num_speculative_tokens=k)
    built.register(SchedulerView(*fake_scheduler()))
    built.precreate_series()
    return built


def samples(built: VllmMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """sample name and labels -> value, of the spec-decode families."""
    found = {}
    for parsed in text_string_to_metric_families(render(built.families)):
        for sample in parsed.samples:
            if sample.name.startswith("vllm:spec_decode"):
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def registered(built: VllmMetrics) -> list[str]:
    return [metric.name for metric in built.families.collect()]


def labels(**extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"model_name": "m", "engine": "0", **extra}.items()))


def test_the_families_exist_only_with_speculation() -> None:
    assert metrics(0).spec_decode is None
    assert not any(name.startswith("vllm:spec_decode") for name in registered(metrics(0)))


def test_they_come_first_with_vllms_names_and_help() -> None:
    built = metrics(3)
    assert registered(built)[:5] == [*SPEC_NAMES, names.ESTIMATED_FLOPS]
    assert built.spec_decode is not None
    helps = [family.help for family in built.spec_decode.families()]
    assert helps == [
        "Number of spec decoding drafts.",
        "Number of draft tokens.",
        "Number of accepted tokens.",
        "Accepted tokens per draft position.",
    ]


def test_every_series_starts_at_zero_with_its_created_sample() -> None:
    found = samples(metrics(3))
    for name in SPEC_NAMES[:3]:
        assert found[(name + "_total", labels())] == 0.0
        assert (name + "_created", labels()) in found
    for position in ("0", "1", "2"):
        key = (names.SPEC_ACCEPTED_PER_POS + "_total", labels(position=position))
        assert found[key] == 0.0
    assert (names.SPEC_ACCEPTED_PER_POS + "_total", labels(position="3")) not in found


def test_the_recorder_counts_each_draft() -> None:
    built = metrics(3)
    recorder = MetricsRecorder(built)
    req = request()
    latency = LatencyModel(LatencySettings(), random.Random(0))
    seq = Sequence(1, req, RequestStream(req), 0, 0, 0.0, latency)
    for drafts, accepted in ((3, 3), (3, 0), (3, 1), (2, 2)):
        recorder.drafts_verified(seq, drafts, accepted)
    found = samples(built)
    assert found[(names.SPEC_DRAFTS + "_total", labels())] == 4
    assert found[(names.SPEC_DRAFT_TOKENS + "_total", labels())] == 11
    assert found[(names.SPEC_ACCEPTED + "_total", labels())] == 6
    per_position = [
        found[(names.SPEC_ACCEPTED_PER_POS + "_total", labels(position=str(p)))] for p in range(3)
    ]
    assert per_position == [3, 2, 1]


def test_the_counts_add_up_to_the_generated_tokens() -> None:
    """Answers of 50 tokens at acceptance 0.6: every token after the prefill's comes from a
    verification, so generated = requests + drafts + accepted - the tokens past each end."""

    async def scenario() -> None:
        built = metrics(3)
        recorder = MetricsRecorder(built)
        engine = Engine(
            EngineLimits(8, 100, 1000, 16),
            LatencySettings(itl=5_000_000, max_num_seqs=8),
            FixedContent(50),
            random.Random(1),
            scheduler=LoopClockScheduler(),
            observer=recorder,
            timing=SpeculativeTokenClock(Speculation(3, 0.6, random.Random(2))),
        )
        streams = [engine.submit(request(prompt_tokens=5)) for _ in range(6)]
        for stream in streams:
            await stream.wait_done()
        found = samples(built)
        drafts = found[(names.SPEC_DRAFTS + "_total", labels())]
        accepted = found[(names.SPEC_ACCEPTED + "_total", labels())]
        assert found[(names.SPEC_DRAFT_TOKENS + "_total", labels())] == 3 * drafts
        generated = built.generation_tokens.labels("m", "0").value
        assert generated == 6 * 50
        cut = 6 + drafts + accepted - generated
        assert 0 <= cut <= 6 * 3
        per_sequence = sum(s.sequences[0].spec_accepted_tokens for s in streams)
        assert per_sequence == accepted

    run(scenario)
