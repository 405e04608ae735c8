"""What the engine refuses before it takes anything, in vLLM's words: more sequences than
could ever run or wait, a prompt or an output the context cannot hold, and output over the
request budget. A full queue or a sleeping model are refused by the engine itself, which
alone knows its state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_sim.engine import budget
from vllm_sim.engine.errors import EngineError, Refusal

if TYPE_CHECKING:
    from vllm_sim.engine.core import EngineLimits
    from vllm_sim.engine.request import GenerationRequest


def check_admissible(request: GenerationRequest, limits: EngineLimits) -> None:
    """Refuses a request that could never run under `limits`, whatever the engine's state."""
    count = len(request.prompts) * request.n
    capacity = limits.max_num_seqs + limits.max_waiting_queue_length
    if count > capacity:
        # Never admissible, so not the retryable queue-full answer.
        raise EngineError(Refusal.INVALID, _too_many(request, capacity), "n")
    for prompt in request.prompts:
        check_context(request, len(prompt.token_ids), limits.max_model_len)
    budget.check_request(request, limits.max_request_output_tokens, limits.max_model_len)


def _too_many(request: GenerationRequest, capacity: int) -> str:
    prompts, n = len(request.prompts), request.n
    return (
        f"The request needs {prompts * n} sequences ({prompts} prompts x n={n}), more than the "
        f"{capacity} that can ever be running or waiting (--max-num-seqs + "
        "--max-waiting-queue-length)"
    )


def prompt_too_long(limit: int) -> str:
    """vLLM's refusal of a prompt longer than the context by itself."""
    return (
        f"This model's maximum context length is {limit} tokens. However, your prompt "
        f"contains at least {limit + 1} input tokens, which exceeds this limit even "
        "without any output tokens. Please reduce the length of the input prompt. "
        f"(parameter=input_tokens, value={limit + 1})"
    )


def check_context(request: GenerationRequest, prompt_tokens: int, limit: int) -> None:
    """vLLM's two refusals, in its words: more output than the context of `limit` tokens
    holds, or a prompt that leaves too little room for the output asked for (or for one
    token)."""
    asked = request.max_tokens
    if asked is not None and asked > limit:
        raise EngineError(
            Refusal.INVALID,
            f"max_tokens={asked} cannot be greater than max_model_len={limit}. Please "
            f"request fewer output tokens. (parameter=max_tokens, value={asked})",
            param="max_tokens",
        )
    if prompt_tokens > limit:
        raise EngineError(Refusal.INVALID, prompt_too_long(limit), param="input_tokens")
    if request.pooling:
        return  # nothing is generated: the prompt may fill the whole context
    output = asked or 0
    if prompt_tokens + max(output, 1) > limit:
        # vLLM counts a prompt only until it overflows, hence "at least".
        counted = limit - output + 1
        raise EngineError(
            Refusal.INVALID,
            f"This model's maximum context length is {limit} tokens. However, you "
            f"requested {output} output tokens and your prompt contains at least "
            f"{counted} input tokens, for a total of at least {limit + 1} tokens. "
            "Please reduce the length of the input prompt or the number of requested "
            f"output tokens. (parameter=input_tokens, value={counted})",
            param="input_tokens",
        )
