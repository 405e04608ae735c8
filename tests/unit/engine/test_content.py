"""Random answers end by their end-of-sequence token, counted as one more token within
max_tokens, unless their text filled max_tokens first (then by length, with no end)."""

from __future__ import annotations

import random

from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.latency import LatencyModel, LatencySettings
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.engine.tokenizer import SimulatedTokenizer

TOKENIZER = SimulatedTokenizer()
LATENCY = LatencyModel(LatencySettings(), random.Random(0))


def answer(seed: int, max_tokens: int | None, max_model_len: int = 100) -> Sequence:
    request = GenerationRequest("r", "m", [Prompt([1, 2, 3])], max_tokens=max_tokens)
    seq = Sequence(1, request, RequestStream(request), 0, 0, 0.0, LATENCY)
    ContentSource("random", TOKENIZER, random.Random(seed)).generate(seq, max_model_len)
    return seq


def test_the_finish_is_length_exactly_when_the_text_fills_max_tokens() -> None:
    eos_at_the_limit = cut = 0
    for seed in range(300):
        seq = answer(seed, max_tokens=3)
        count = len(seq.output_ids)
        assert 1 <= count <= 3
        assert (seq.finish_reason == Finish.LENGTH) == (count == 3 and not seq.eos)
        assert seq.eos == (seq.finish_reason == Finish.STOP)
        eos_at_the_limit += seq.eos and count == 3
        cut += seq.finish_reason == Finish.LENGTH
    assert eos_at_the_limit and cut  # both ends were drawn


def test_without_max_tokens_the_context_is_the_limit() -> None:
    for seed in range(100):
        seq = answer(seed, max_tokens=None, max_model_len=6)  # room for 3 output tokens
        assert len(seq.output_ids) <= 3
        assert seq.eos == (seq.finish_reason == Finish.STOP)
