"""A content source of a fixed length, for engine tests and the engine benchmarks."""

from __future__ import annotations

import random

from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.sequence import Sequence
from vllm_sim.engine.tokenizer import SimulatedTokenizer


class FixedContent(ContentSource):
    """Every sequence says `tokens` tokens and stops (a benchmark's ignore_eos)."""

    def __init__(self, tokens: int) -> None:
        super().__init__("random", SimulatedTokenizer(), random.Random(0))
        self.tokens = tokens

    def generate(self, seq: Sequence, max_model_len: int) -> None:
        seq.output_ids = list(range(self.tokens))
        seq.output_pieces = [f"t{i} " for i in range(self.tokens)]
        seq.finish_reason = Finish.LENGTH
