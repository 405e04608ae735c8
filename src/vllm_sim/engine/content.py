"""What a sequence says: tool calls, JSON for a schema, an echo of its prompt, or random
sentences of a sampled length."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from vllm_sim.engine.errors import EngineError, Refusal
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.generation.dataset import ResponseDataset
from vllm_sim.engine.generation.echo import echo_token_ids, echo_tokens
from vllm_sim.engine.generation.lengths import response_length
from vllm_sim.engine.generation.sentences import SentenceBank
from vllm_sim.engine.generation.stops import cut_text, find_stop
from vllm_sim.engine.generation.toolcalls import ToolPlan, make_tool_calls
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
# The think markers of the reasoning models vLLM's deepseek_r1 and qwen3 parsers read; a
# recorded answer's reasoning part ends at its `</think>`.
THINK_START, THINK_END = "<think>", "</think>"
THINK_MARKERS = frozenset({THINK_START, THINK_END})

# `json_object` without a schema: an object with one answer, as a JSON-mode model gives.
_ANY_OBJECT = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


# Compiled by mypyc (setup.py): subclassed by tests and benchmarks, which are not.
@mypyc_attr(allow_interpreted_subclasses=True)
class ContentSource:
    """Fills a sequence's output tokens and finish reason when it starts running."""

    def __init__(
        self,
        mode: str,
        tokenizer: Tokenizer,
        rng: random.Random,
        synthesis: SynthesisSettings | None = None,
        encoder_only: bool = False,
        dataset: ResponseDataset | None = None,
        think_end_id: int | None = None,
    ) -> None:
        self.mode = mode
        # The model's own token that ends a reasoning part (a real tokenizer's `</think>`);
        # None: the reasoning part ends with no marker.
        self.think_end_id = think_end_id
        self.encoder_only = encoder_only
        self.synthesis = synthesis or SynthesisSettings()
        self.tokenizer = tokenizer
        self._rng = rng
        # Tokenized once at startup: random text is then only list slicing per request.
        self._bank = SentenceBank(tokenizer)
        self.dataset = dataset  # random mode answers from it when there is one

    def generate(self, seq: Sequence, max_model_len: int) -> None:
        """Raises EngineError when a schema cannot be satisfied."""
        request = seq.request
        if self.encoder_only:
            self._placeholder_output(seq)
            return
        if request.tools is not None and self._tool_calls(seq, request.tools):
            return
        if request.max_tokens == 0:  # a completions echo of the prompt alone
            seq.finish_reason = Finish.LENGTH
            return
        rng = self._rng_of(seq)
        if request.json_output is not None:
            self._json(seq, request.json_output, max_model_len, rng)
        elif self.mode == ECHO:
            self._echo(seq)
        else:
            self._random(seq, max_model_len, rng)
        self._end(seq)
        if request.reasoning:
            self._split_reasoning(seq, request.reasoning, request.reasoning_budget)

    def _split_reasoning(self, seq: Sequence, ratio: float, budget: int | None) -> None:
        """The answer's first tokens are its reasoning (its end-of-sequence token never):
        up to a recorded answer's own `</think>`, else `ratio` of them, and no more than
        the budget. A model whose vocabulary has the end-of-thinking marker generates it
        where the reasoning stops: counted in the output, shown in neither part, as in
        vLLM."""
        text = len(seq.output_ids) - (1 if seq.eos else 0)
        recorded = self._recorded_split(seq) if self.dataset is not None else -1
        count = recorded if recorded >= 0 else int(text * ratio)
        if budget is not None and count > budget:
            count = budget  # the budget ends the thinking first, as vLLM's forced end does
        seq.reasoning_tokens = count
        ids, pieces = seq.output_ids, seq.output_pieces
        if recorded >= 0:
            # The recording's own markers show in neither part, as vLLM's parsers drop
            # them (an opening `<think>` still counts among the reasoning tokens here).
            seq.output_pieces = ["" if piece in THINK_MARKERS else piece for piece in pieces]
            return
        marker = self.think_end_id
        if marker is not None and 0 < count < text:
            # The marker goes between the parts; the answer keeps its length, its last text
            # token making room. New lists: the generated ones may be shared (an echo's).
            seq.output_ids = [*ids[:count], marker, *ids[count : text - 1], *ids[text:]]
            seq.output_pieces = [*pieces[:count], "", *pieces[count : text - 1], *pieces[text:]]

    @staticmethod
    def _recorded_split(seq: Sequence) -> int:
        """Where a recorded answer's thinking ends: the position of its `</think>` (-1:
        it has none)."""
        try:
            return seq.output_pieces.index(THINK_END)
        except ValueError:
            return -1

    def _rng_of(self, seq: Sequence) -> random.Random:
        """A seeded request draws from its own generator, so the same seed gives the same
        answer; a greedy one (temperature 0) from one seeded by its prompt, so that the
        same prompt gives the same answer in every choice, as a model's argmax does."""
        request = seq.request
        if request.seed is not None:
            if request.rng is None:
                request.rng = random.Random(request.seed)
            return request.rng
        if request.greedy:
            return random.Random(hash(tuple(seq.prompt.token_ids)))
        return self._rng

    def _random(self, seq: Sequence, max_model_len: int, rng: random.Random) -> None:
        request = seq.request
        limit = max_model_len - seq.prompt_tokens
        if self.dataset is not None:
            self._from_dataset(seq, self.dataset, limit, rng)
            return
        length = response_length(
            rng, max_tokens=request.max_tokens, limit=limit, ignore_eos=request.ignore_eos
        )
        max_len = request.max_tokens if request.max_tokens is not None else limit
        if request.stops is not None:  # the end of sequence is held back until min_tokens
            length = min(max(length, request.stops.min_tokens), max_len)
        seq.output_ids, seq.output_pieces = self._bank.generate(rng, length)
        seq.finish_reason = Finish.LENGTH if length >= max_len else Finish.STOP

    def _from_dataset(
        self, seq: Sequence, dataset: ResponseDataset, limit: int, rng: random.Random
    ) -> None:
        request = seq.request
        max_len = request.max_tokens if request.max_tokens is not None else limit
        min_len = 0 if request.stops is None else request.stops.min_tokens
        seq.output_ids, seq.output_pieces = dataset.respond(
            seq.prompt.token_ids, max_len, request.ignore_eos, rng, self._bank, min_len
        )
        seq.finish_reason = Finish.LENGTH if len(seq.output_ids) >= max_len else Finish.STOP

    def _end(self, seq: Sequence) -> None:
        """Ends the output where a stop condition hits first; an answer the model ended by
        itself ends with its end-of-sequence token, one more step with no text, as in vLLM
        (where it also counts as a completion token)."""
        stops = seq.request.stops
        if stops is not None and stops.active:
            hit = find_stop(seq.output_ids, seq.output_pieces, stops)
            if hit is not None:
                kept = hit.token + 1
                seq.output_ids = seq.output_ids[:kept]
                seq.output_pieces = seq.output_pieces[:kept]
                if hit.text_end is not None:
                    seq.output_pieces = cut_text(seq.output_pieces, hit.text_end)
                seq.finish_reason = Finish.STOP
                seq.stop_reason = hit.reason
                return
        if seq.finish_reason == Finish.STOP:
            self._append_eos(seq)

    def _append_eos(self, seq: Sequence) -> None:
        seq.output_ids.append(self.tokenizer.eos_token_id)
        seq.output_pieces.append("")
        seq.eos = True

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
        elif prompt.echo_tokens is not None:
            ids, pieces = prompt.echo_tokens
            seq.output_ids, seq.output_pieces = list(ids), list(pieces)
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
        seq.finish_reason = Finish.TOOL_CALLS
        self._append_eos(seq)  # the model ends its calls by itself
        return True

    def _arguments(self, schema: Mapping[str, Any], name: str) -> str:
        return arguments_json(self._synthesize(schema, f"tool '{name}'", "tools", self._rng))

    def _json(self, seq: Sequence, plan: JsonPlan, max_model_len: int, rng: random.Random) -> None:
        schema = plan.schema or _ANY_OBJECT
        value = self._synthesize(schema, "response_format", "response_format", rng)
        ids, pieces = self.tokenizer.tokenize(arguments_json(value))
        limit = seq.request.max_tokens or max_model_len - seq.prompt_tokens
        # Like a real model, a JSON answer that does not fit is cut off, mid-value; one
        # that fills the limit exactly has no room left for its end-of-sequence token.
        seq.finish_reason = Finish.LENGTH if len(ids) >= limit else Finish.STOP
        seq.output_ids, seq.output_pieces = ids[:limit], pieces[:limit]

    def _synthesize(self, schema: object, what: str, param: str, rng: random.Random) -> object:
        if not isinstance(schema, dict):
            raise EngineError(Refusal.INVALID, f"{what}: the schema must be an object", param)
        try:
            return synthesize(rng, schema, self.synthesis)
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
