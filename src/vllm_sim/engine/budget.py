"""How much output one request may make (--max-request-output-tokens).

Everything a request costs after admission (generating its tokens, holding them, encoding
its answer) grows with n x prompts x tokens x (1 + logprob alternatives). A request whose
worst case is over the limit is refused before it is admitted; its worst case is its
max_tokens, or, when it sets none, what the server would make for it. Output that comes
out longer than that guess (an echo of a long prompt, a large tool call) is counted as it
is made, and the request fails once it passes the limit.
"""

from __future__ import annotations

from typing import Final

from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.engine.request import GenerationRequest

# Tokens a sequence without max_tokens is counted for before it runs. Random text without
# a max_tokens is drawn around 40 tokens (sd 20), so this is never reached by it.
UNSET_MAX_TOKENS_GUESS: Final = 1000
FLAG: Final = "--max-request-output-tokens"


def check_request(request: GenerationRequest, limit: int, max_model_len: int) -> None:
    """Refuses a request whose worst case is over `limit` (0: no limit)."""
    if not limit:
        return
    asked = request.max_tokens
    listed = request.prompt_logprobs
    if (
        asked is not None
        and request.logprobs is None
        and listed is None
        and request.n * len(request.prompts) * asked <= limit
    ):
        return  # the common case, decided without a walk over the prompts
    tokens = prompt_entries = 0
    for prompt in request.prompts:
        room = max(max_model_len - len(prompt.token_ids), 0)
        tokens += min(room, UNSET_MAX_TOKENS_GUESS if asked is None else asked)
        prompt_entries += len(prompt.token_ids)
    per_token = 1 + (request.logprobs or 0)  # a token, and each alternative listed
    total = request.n * tokens * per_token
    if listed is not None:  # each prompt token with its alternatives, once per prompt
        total += prompt_entries * max(listed, 1)
    if total > limit:
        raise EngineError(
            Refusal.INVALID,
            f"This request could make {total} output tokens and logprob alternatives "
            f"(n={request.n} x {tokens} tokens for {len(request.prompts)} prompt(s) x "
            f"{per_token} per token), more than the {limit} a request may ask for ({FLAG}); "
            "lower max_tokens, n or the logprobs asked for",
            param=request.max_tokens_field,
        )


def over_budget(request: GenerationRequest, limit: int) -> EngineError:
    """The error of a request whose output came out longer than its limit."""
    return EngineError(
        Refusal.INVALID,
        f"This request made more than the {limit} output tokens and logprob alternatives a "
        f"request may make ({FLAG}); lower n, max_tokens or the logprobs asked for",
        param=request.max_tokens_field,
    )
