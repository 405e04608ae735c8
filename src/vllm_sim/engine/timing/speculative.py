"""Speculative decoding, under either timing: each decode step of a sequence verifies k
draft tokens and makes the accepted ones plus one.

A draft is accepted only if every draft before it was, each with the acceptance rate's
probability, so a step makes 1 + a + ... + a^k tokens on average; fewer where the output
ends first (its length is decided at start: max_tokens, the planned length, a stop), the
drafts past the end being verified and thrown away, as vLLM does. A step's tokens reach
the client together, and count as one inter-token latency observation, as vLLM observes
one per step output. Every token comes from a step: a tool call's opening token is no
longer free, as it is under the plain timings.

- The step loop (SpeculativeStepLoop) schedules a decoding sequence's last token and its
  drafts together (k + 1 tokens against --max-num-batched-tokens, drafts cut to what the
  budget and the context leave, as vLLM's scheduler does) and the step model prices the
  verification and the drafter (perf/speculative.py).
- The token clock (SpeculativeTokenClock) keeps one sampled inter-token latency per step:
  under the constant model the configured ITL is the time of a verification step, which
  then makes a burst of tokens.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from vllm_sim.engine.sequence import SeqState
from vllm_sim.engine.timing.release import release_token
from vllm_sim.engine.timing.steps import Step, StepLoop
from vllm_sim.engine.timing.token_clock import TokenClock
from vllm_sim.perf import StepLoad, StepTimeModel

if TYPE_CHECKING:
    import random

    from vllm_sim.engine.observer import EngineObserver
    from vllm_sim.engine.sequence import Sequence

_NO_CALL_STARTS: Final = frozenset[int]()


class Speculation:
    """The drafts of a decode step and their fate, drawn from a seeded RNG."""

    def __init__(
        self, num_speculative_tokens: int, acceptance_rate: float, rng: random.Random
    ) -> None:
        self.num_speculative_tokens = num_speculative_tokens
        self.acceptance_rate = acceptance_rate  # POST /admin/config may change it
        self._rng = rng

    def drafts(self, seq: Sequence, max_model_len: int) -> int:
        """The drafts a decode of `seq` verifies: k, fewer near the end of the context
        (vLLM schedules no position past max_model_len - 1)."""
        room = max_model_len - len(seq.prompt.token_ids) - seq.emitted - 1
        count = self.num_speculative_tokens
        return count if count <= room else max(room, 0)

    def accepted(self, drafts: int) -> int:
        """How many of `drafts` are accepted, a chain: one draw u, and P(accepted >= j) =
        P(u <= a^j) = a^j."""
        rate = self.acceptance_rate
        if drafts == 0 or rate <= 0.0:
            return 0
        if rate >= 1.0:
            return drafts
        run = int(math.log(1.0 - self._rng.random()) / math.log(rate))
        return run if run < drafts else drafts

    def verify(self, seq: Sequence, drafts: int, now: float, observer: EngineObserver) -> int:
        """A decode step of `seq` that verified `drafts` drafts: the accepted ones and one
        token more are released at `now` (fewer where the output ends), the gap since the
        last release observed once. Returns the tokens released."""
        accepted = self.accepted(drafts)
        if drafts:
            seq.spec_draft_tokens += drafts
            seq.spec_accepted_tokens += accepted
            observer.drafts_verified(seq, drafts, accepted)
        made = len(seq.output_ids) - seq.emitted
        if accepted + 1 < made:
            made = accepted + 1
        if seq.emitted:
            observer.inter_tokens(seq, now - seq.t_last_token, 1)
        seq.emitted += made
        seq.t_last_token = now
        return made


class SpeculativeStepLoop(StepLoop):
    """The step loop whose decodes verify drafts (see the module doc)."""

    def __init__(
        self, step_model: StepTimeModel, max_num_batched_tokens: int, speculation: Speculation
    ) -> None:
        super().__init__(step_model, max_num_batched_tokens)
        self.speculation = speculation

    def prefill(self, seq: Sequence, now: float) -> None:
        seq.call_starts = _NO_CALL_STARTS  # every token comes from a step, as in vLLM
        super().prefill(seq, now)

    def _schedule_running(self, step: Step, load: StepLoad, budget: int, now: float) -> int:
        """As StepLoop's, a decode taking its drafts along (what the budget leaves of
        them); prefill chunks as without speculation."""
        core = self._core
        speculation = self.speculation
        max_model_len = core.limits.max_model_len
        work = step.work
        decodes = context = drafted = draft_context = 0
        for seq in list(self._running.values()):
            if budget <= 0:
                break
            if seq.state is not SeqState.RUNNING or seq.deadline > now:
                continue  # preempted by a decode scheduled before it, or its KV is on the way
            emitted = seq.emitted
            if emitted > 0 and seq.computed == len(seq.prompt.token_ids) + emitted - 1:
                drafts = speculation.drafts(seq, max_model_len)
                if drafts >= budget:
                    drafts = budget - 1
                if emitted + drafts >= seq.kv_limit and not core.grow(seq, emitted + drafts, now):
                    continue  # preempted, or ended at what the cache holds
                decodes += 1
                seen = seq.computed + 1  # the context of the last sampled token
                context += seen
                drafted += drafts
                draft_context += drafts * seen + drafts * (drafts + 1) // 2  # draft i: seen + i
                work.append((seq, 1 + drafts, seq.preemptions))
                budget -= 1 + drafts
            else:
                budget -= self._schedule_chunk(step, load, seq, budget)
        load.add_decodes(decodes, context)
        load.add_drafts(drafted, draft_context)
        return budget

    def _complete(self, step: Step, seq: Sequence, chunk: int, now: float) -> bool:
        """A decode verifies its `chunk - 1` drafts; its KV keeps the last sampled token and
        the accepted drafts (a rejected draft's is recomputed, as the token that replaces
        it). A prefill chunk completes as without speculation."""
        emitted, computed = seq.emitted, seq.computed
        if emitted == 0 or computed != len(seq.prompt.token_ids) + emitted - 1:
            return super()._complete(step, seq, chunk, now)
        made = self.speculation.verify(seq, chunk - 1, now, self._core.observer)
        step.tokens += made
        seq.computed = computed + made
        if seq.emitted >= len(seq.output_ids):
            self._core.finish(seq, now)
        return True


class SpeculativeTokenClock(TokenClock):
    """The token clock with one burst of tokens per sampled inter-token latency (see the
    module doc)."""

    def __init__(self, speculation: Speculation) -> None:
        super().__init__()
        self.speculation = speculation

    def prefill(self, seq: Sequence, now: float) -> None:
        seq.call_starts = _NO_CALL_STARTS  # every token comes from a step, as in vLLM
        super().prefill(seq, now)

    def _release(self, seq: Sequence, now: float) -> bool:
        if seq.emitted == 0:
            return super()._release(seq, now)  # the first token, the prefill's
        core = self._core
        drafts = self.speculation.drafts(seq, core.limits.max_model_len)
        needed = seq.emitted + drafts
        if needed >= seq.kv_limit and not core.grow(seq, needed, now):
            return False
        self.speculation.verify(seq, drafts, now, core.observer)
        return True

    def _release_remaining(self, seq: Sequence, total: int, now: float) -> None:
        """No decode delay: every step the rest of the output takes happens at `now`."""
        observer = self._core.observer
        max_model_len = self._core.limits.max_model_len
        if seq.emitted == 0:
            release_token(seq, now, observer)
        while seq.emitted < total:
            self.speculation.verify(seq, self.speculation.drafts(seq, max_model_len), now, observer)
