"""Response content: lengths, random sentences, echo and synthetic logprobs."""

from vllm_sim.engine.generation.echo import echo_token_ids, echo_tokens
from vllm_sim.engine.generation.lengths import (
    histogram_buckets,
    response_length,
    round_half_away_from_zero,
)
from vllm_sim.engine.generation.logprobs import token_logprob, top_alternatives
from vllm_sim.engine.generation.sentences import SENTENCES, SentenceBank

__all__ = [
    "SENTENCES",
    "SentenceBank",
    "echo_token_ids",
    "echo_tokens",
    "histogram_buckets",
    "response_length",
    "round_half_away_from_zero",
    "token_logprob",
    "top_alternatives",
]
