"""Prompts given as token ids, which completions, generate and gRPC all accept."""

from __future__ import annotations

from vllm_sim.engine.tokenizer import Tokenizer
from vllm_sim.errors import RequestError


def in_vocabulary(ids: list[int], tokenizer: Tokenizer, param: str = "prompt") -> list[int]:
    """A copy of `ids`, which the tokenizer must know (vLLM's check and message); `param`
    names the field that carried them."""
    largest = max(ids)
    if largest > tokenizer.max_token_id:
        raise RequestError(400, f"Token id {largest} is out of vocabulary", param)
    return list(ids)
