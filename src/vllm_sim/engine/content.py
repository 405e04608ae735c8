"""What a sequence says: echo of its prompt, or random sentences of a sampled length."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from vllm_sim.engine.generation.echo import echo_token_ids, echo_tokens
from vllm_sim.engine.generation.lengths import response_length
from vllm_sim.engine.generation.sentences import SentenceBank
from vllm_sim.engine.tokenizer import Tokenizer

if TYPE_CHECKING:
    from vllm_sim.engine.sequence import Sequence

ECHO = "echo"
RANDOM = "random"

FINISH_STOP = "stop"
FINISH_LENGTH = "length"


class ContentSource:
    """Fills a sequence's output tokens and finish reason when it starts running."""

    def __init__(self, mode: str, tokenizer: Tokenizer, rng: random.Random) -> None:
        self.mode = mode
        self.tokenizer = tokenizer
        self._rng = rng
        # Tokenized once at startup: random text is then only list slicing per request.
        self._bank = SentenceBank(tokenizer)

    def generate(self, seq: Sequence, max_model_len: int) -> None:
        request = seq.request
        if self.mode == ECHO:
            self._echo(seq)
            return
        limit = max_model_len - seq.prompt_tokens
        length = response_length(
            self._rng, max_tokens=request.max_tokens, limit=limit, ignore_eos=request.ignore_eos
        )
        seq.output_ids, seq.output_pieces = self._bank.generate(self._rng, length)
        max_len = request.max_tokens if request.max_tokens is not None else limit
        seq.finish_reason = FINISH_LENGTH if length >= max_len else FINISH_STOP

    def _echo(self, seq: Sequence) -> None:
        prompt = seq.prompt
        if prompt.echo_text is None:
            seq.output_ids, seq.output_pieces = echo_token_ids(prompt.token_ids)
        else:
            seq.output_ids, seq.output_pieces = echo_tokens(self.tokenizer, prompt.echo_text)
        # Echo repeats the whole prompt; max_tokens only decides the finish reason.
        max_tokens = seq.request.max_tokens
        long_enough = max_tokens is not None and len(seq.output_ids) >= max_tokens
        seq.finish_reason = FINISH_LENGTH if long_enough else FINISH_STOP
