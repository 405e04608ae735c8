"""What a sequence says: tool calls, JSON for a schema, an echo of its prompt, or random
sentences of a sampled length."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.generation.echo import echo_token_ids, echo_tokens
from vllm_sim.engine.generation.lengths import response_length
from vllm_sim.engine.generation.sentences import SentenceBank
from vllm_sim.engine.generation.toolcalls import TOOL_CALL_OVERHEAD, ToolPlan, make_tool_calls
from vllm_sim.engine.request import JsonPlan
from vllm_sim.engine.tokenizer import Tokenizer
from vllm_sim.schemagen import (
    SynthesisError,
    SynthesisSettings,
    arguments_json,
    budgeted,
    synthesize,
)

if TYPE_CHECKING:
    from vllm_sim.engine.sequence import Sequence

ECHO = "echo"

# `json_object` without a schema: an object with one answer, as a JSON-mode model gives.
_ANY_OBJECT = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


class ContentSource:
    """Fills a sequence's output tokens and finish reason when it starts running."""

    def __init__(
        self,
        mode: str,
        tokenizer: Tokenizer,
        rng: random.Random,
        synthesis: SynthesisSettings | None = None,
        encoder_only: bool = False,
    ) -> None:
        self.mode = mode
        self.encoder_only = encoder_only
        self.synthesis = synthesis or SynthesisSettings()
        self.tokenizer = tokenizer
        self._rng = rng
        # Tokenized once at startup: random text is then only list slicing per request.
        self._bank = SentenceBank(tokenizer)

    def generate(self, seq: Sequence, max_model_len: int) -> None:
        """Raises EngineError when a schema cannot be satisfied."""
        request = seq.request
        if self.encoder_only:
            self._placeholder_output(seq)
            return
        if request.tools is not None and self._tool_calls(seq, request.tools):
            return
        if request.json_output is not None:
            self._json(seq, request.json_output, max_model_len)
            return
        if self.mode == ECHO:
            self._echo(seq)
            return
        limit = max_model_len - seq.prompt_tokens
        length = response_length(
            self._rng, max_tokens=request.max_tokens, limit=limit, ignore_eos=request.ignore_eos
        )
        seq.output_ids, seq.output_pieces = self._bank.generate(self._rng, length)
        max_len = request.max_tokens if request.max_tokens is not None else limit
        seq.finish_reason = Finish.LENGTH if length >= max_len else Finish.STOP

    def _placeholder_output(self, seq: Sequence) -> None:
        """An encoder-only node produces no text: `max_tokens` copies of `!`, cut by length."""
        ids, pieces = self.tokenizer.tokenize("!")
        count = seq.request.max_tokens or 1
        seq.output_ids, seq.output_pieces = ids * count, pieces * count
        seq.finish_reason = Finish.LENGTH

    def _echo(self, seq: Sequence) -> None:
        prompt = seq.prompt
        if prompt.echo_text is None:
            seq.output_ids, seq.output_pieces = echo_token_ids(prompt.token_ids)
        else:
            seq.output_ids, seq.output_pieces = echo_tokens(self.tokenizer, prompt.echo_text)
        # Echo repeats the whole prompt; max_tokens only decides the finish reason.
        max_tokens = seq.request.max_tokens
        long_enough = max_tokens is not None and len(seq.output_ids) >= max_tokens
        seq.finish_reason = Finish.LENGTH if long_enough else Finish.STOP

    def _tool_calls(self, seq: Sequence, plan: ToolPlan) -> bool:
        """Fills the sequence with tool calls; False when it is to answer in text."""
        with budgeted():  # one synthesis budget for all the calls of a sequence
            made = make_tool_calls(self._rng, plan, self.synthesis, self.tokenizer, self._arguments)
        if made is None:
            return False
        seq.output_ids, seq.output_pieces = made.token_ids, made.pieces
        seq.tool_calls = made.calls
        seq.call_starts = frozenset(call.start for call in made.calls[1:])
        seq.extra_completion_tokens = TOOL_CALL_OVERHEAD * len(made.calls)
        seq.finish_reason = Finish.TOOL_CALLS
        return True

    def _arguments(self, schema: Mapping[str, Any], name: str) -> str:
        return arguments_json(self._synthesize(schema, f"tool '{name}'", "tools"))

    def _json(self, seq: Sequence, plan: JsonPlan, max_model_len: int) -> None:
        value = self._synthesize(plan.schema or _ANY_OBJECT, "response_format", "response_format")
        ids, pieces = self.tokenizer.tokenize(arguments_json(value))
        limit = seq.request.max_tokens or max_model_len - seq.prompt_tokens
        # Like a real model, a JSON answer that does not fit is cut off, mid-value.
        seq.finish_reason = Finish.LENGTH if len(ids) > limit else Finish.STOP
        seq.output_ids, seq.output_pieces = ids[:limit], pieces[:limit]

    def _synthesize(self, schema: object, what: str, param: str) -> object:
        if not isinstance(schema, dict):
            raise EngineError(Refusal.INVALID, f"{what}: the schema must be an object", param)
        try:
            return synthesize(self._rng, schema, self.synthesis)
        except SynthesisError as error:
            message = f"cannot generate a value for {what}: {error}"
            raise EngineError(Refusal.INVALID, message, param) from None
        except RecursionError:
            message = f"cannot generate a value for {what}: the schema is nested too deeply"
            raise EngineError(Refusal.INVALID, message, param) from None
        except (OverflowError, ValueError, TypeError, ArithmeticError) as error:
            # A safety net: schemagen should raise SynthesisError for every bad schema.
            message = f"cannot generate a value for {what}: {error}"
            raise EngineError(Refusal.INVALID, message, param) from None
