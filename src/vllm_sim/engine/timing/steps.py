"""The step loop: vLLM V1's scheduler loop, each step timed by a performance model.

Where the token clock gives every sequence its own sampled deadlines, this timing runs one
step at a time for the whole batch, as vLLM V1's engine core does:

1. Running sequences first, oldest admission first: one decode token each, or the next
   chunk of their prefill (chunked prefill takes what is left of the token budget,
   `max_num_batched_tokens`). A decode that needs a KV block and finds none preempts the
   newest running sequence (recompute), as under the token clock.
2. Then waiting sequences, while budget, `max_num_seqs` and free KV blocks allow; none in a
   step that preempted, and none while paused.
3. The step lasts what the performance model says for that batch: its tokens are released
   together at the step's end, a prompt's first token with the step that finishes its
   prefill. The next step starts at once while there is work: continuous batching.

A request arriving mid-step waits for the next step, so time to first token grows with
the batch in flight, a long prefill slows every running stream for as many steps as it
takes, and past saturation the queue grows: what a real GPU shows. With speculative
decoding a decode also verifies draft tokens (speculative.py's SpeculativeStepLoop).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from vllm_sim.engine.request import image_work
from vllm_sim.engine.sequence import SeqState, Sequence
from vllm_sim.engine.timing.release import release_token
from vllm_sim.perf import StepLoad, StepTimeModel

if TYPE_CHECKING:
    from vllm_sim.engine.clock import Scheduler, TimerHandle
    from vllm_sim.engine.lifecycle import Lifecycle
    from vllm_sim.engine.sequence import RequestStream
    from vllm_sim.engine.timing.strategy import SchedulerCore


# init=False: mypyc compiles a hand-written __init__; the one dataclasses writes stays
# interpreted, and costs several times more for every request that makes one.
@dataclass(slots=True, init=False)
class Step:
    """One step in flight: what it scheduled, each with the sequence's preemption count
    then (a sequence preempted meanwhile is recomputed, and this step's work is lost)."""

    started: float
    ends: float
    work: list[tuple[Sequence, int, int]]  # seq, chunk, epoch
    tokens: int  # prefill chunks computed, plus the tokens each decode made

    def __init__(self, started: float, ends: float) -> None:
        self.started = started
        self.ends = ends
        self.work = []
        self.tokens = 0


# Compiled by mypyc (setup.py): subclassed by tests and benchmarks, which are not.
@mypyc_attr(allow_interpreted_subclasses=True)
class StepLoop:
    """A TimingStrategy whose sequences advance in whole steps of a batch (see the module
    doc), each as long as `step_model` says, with `max_num_batched_tokens` a step."""

    _core: SchedulerCore
    _scheduler: Scheduler
    _running: Mapping[int, Sequence]
    _lifecycle: Lifecycle

    def __init__(self, step_model: StepTimeModel, max_num_batched_tokens: int) -> None:
        self.step_model = step_model
        self.max_num_batched_tokens = max_num_batched_tokens
        self._step: Step | None = None
        self._step_timer: TimerHandle | None = None
        self._kick: TimerHandle | None = None  # a step start armed for the end of this turn
        self._stepping = False  # inside _begin_step or _end_step: no re-entry
        self._preempted_in_step = False
        self._frozen_left: float | None = None  # what a frozen step had left to run
        self.steps = 0  # steps run since start (tests and the fidelity benchmark read it)
        # A request reaches the scheduler this long after it arrived (vLLM's API server).
        self._admission_delay = step_model.admission_delay
        self._waiting_ready_at = 0.0  # a waiting request seen not yet ready: when it is

    def attach(self, core: SchedulerCore) -> None:
        self._core = core
        self._scheduler = core.scheduler
        self._clock = core.scheduler.now
        # Kept rather than asked for at every step: both stay the same objects.
        self._running = core.running
        self._lifecycle = core.lifecycle

    # ------------------------------------------------------------- strategy hooks
    def kick(self) -> None:
        """Admission happens at a step's start. With no step in flight, one starts at the
        end of this turn of the event loop, so requests arriving together share it (vLLM's
        engine core drains its input queue before it schedules)."""
        if self._stepping or self._step is not None or self._frozen_left is not None:
            return
        if self._kick is None:
            self._kick = self._scheduler.call_at(self._clock(), self._kicked)

    def prefill(self, seq: Sequence, now: float) -> None:
        # A prompt found whole in the prefix cache still computes its last token, as in
        # vLLM, so that there is a step to sample the first output token from.
        seq.computed = min(seq.cached_tokens, max(seq.prompt_tokens - 1, 0))
        seq.encode_pending = seq.prompt.features is not None
        # Blocks found in the CPU tier are loaded back, not computed: like a P/D transfer,
        # the sequence joins the batch once they have arrived.
        seq.deadline = now + seq.kv_load if seq.kv_load else 0.0
        if seq.request.do_remote_prefill:
            # P/D decode: the prompt's KV comes from the prefill node (the configured KV
            # transfer time); the sequence joins the batch once it has arrived.
            transfer = seq.latency.time_to_first_token(
                seq.prompt_tokens, seq.cached_tokens, True, self._core.load()
            )
            seq.deadline = now + transfer

    def recompute(self, seq: Sequence, computed: int, cached: int, now: float) -> None:
        seq.computed = min(cached, max(computed - 1, 0))
        seq.encode_pending = seq.prompt.features is not None
        seq.deadline = now + seq.kv_load if seq.kv_load else 0.0

    def preempted(self, seq: Sequence) -> None:
        self._preempted_in_step = True

    def freeze(self) -> None:
        """The step in flight stops where it is; thaw() runs the rest of it."""
        if self._frozen_left is not None:
            return
        step = self._step
        self._frozen_left = 0.0 if step is None else max(step.ends - self._clock(), 0.0)
        if self._step_timer is not None:
            self._step_timer.cancel()
            self._step_timer = None

    def thaw(self) -> None:
        left = self._frozen_left
        if left is None:
            return
        self._frozen_left = None
        step = self._step
        if step is None:
            self.kick()
            return
        step.ends = self._clock() + left
        self._step_timer = self._scheduler.call_at(step.ends, self._end_step)

    # ------------------------------------------------------------- the step loop
    def _kicked(self) -> None:
        self._kick = None
        if self._step is None and self._frozen_left is None:
            self._begin_step()

    def _begin_step(self, due: float | None = None) -> None:
        """Schedules the next step. `due` is when the previous one was due to end: the new
        one is timed from there, not from when its tokens were handed out, so the time the
        event loop spends on a step never adds up into the simulated pace (as the token
        clock aims every token at an absolute deadline)."""
        now = self._clock()
        start = now if due is None else min(due, now)
        step = Step(start, start)
        load = StepLoad()
        self._stepping = True
        self._preempted_in_step = False
        self._waiting_ready_at = 0.0
        try:
            budget = self._schedule_running(step, load, self.max_num_batched_tokens, now)
            # vLLM admits nobody in a step that had to preempt: the cache is full.
            if self._lifecycle.paused is None and not self._preempted_in_step and budget > 0:
                self._schedule_waiting(step, load, budget)
        finally:
            self._stepping = False
        if not step.work:
            self._wait_for_transfers()  # or idle: the next submit starts a step
            return
        # The latency factor slows the modelled GPU as it slows the token clock's samples.
        factor = self._core.latency.settings.factor
        step.ends = start + self.step_model.step_seconds(load) * factor
        self._step = step
        self._step_timer = self._scheduler.call_at(step.ends, self._end_step)

    def _schedule_running(self, step: Step, load: StepLoad, budget: int, now: float) -> int:
        """Running sequences take their decode token or prefill chunk; the budget left.
        Decodes are counted in locals and added to `load` once: this loop runs for every
        running sequence, every step."""
        core = self._core
        work = step.work
        decodes = context = 0
        for seq in list(self._running.values()):
            if budget <= 0:
                break
            if seq.state is not SeqState.RUNNING or seq.deadline > now:
                continue  # preempted by a decode scheduled before it, or its KV is on the way
            emitted = seq.emitted
            if emitted > 0 and seq.computed == len(seq.prompt.token_ids) + emitted - 1:
                # Decoding: one new token (the last one sampled) to compute.
                if emitted >= seq.kv_limit and not core.grow(seq, emitted, now):
                    continue  # preempted, or ended at what the cache holds
                decodes += 1
                context += seq.computed + 1
                work.append((seq, 1, seq.preemptions))
                budget -= 1
            else:
                budget -= self._schedule_chunk(step, load, seq, budget)
        load.add_decodes(decodes, context)
        return budget

    def _schedule_waiting(self, step: Step, load: StepLoad, budget: int) -> None:
        """Admits waiting sequences into this step, each with its first prefill chunk."""
        core = self._core
        turn = core.turn
        turn.begin()
        while budget > 0 and core.num_running < core.limits.max_num_seqs:
            if time.perf_counter() >= turn.ends:
                break  # a burst larger than a turn's work waits for the next step
            ready = self._ready_at(core.next_waiting())
            if ready > step.started:
                self._waiting_ready_at = ready
                break  # still in the API server: a later step admits it
            seq = core.start_next()
            if seq is None:
                break
            # Not refused by a cache-hit threshold, nor failed, nor waiting for its KV.
            if seq.state is SeqState.RUNNING and seq.deadline <= step.started:
                budget -= self._schedule_chunk(step, load, seq, budget)

    def _ready_at(self, seq: Sequence | None) -> float:
        """When waiting `seq` reaches the scheduler (its arrival plus the API server's
        time); 0.0 for none."""
        if seq is None:
            return 0.0
        return seq.t_submitted + self._admission_delay(seq.prompt_tokens)

    def _wait_for_transfers(self) -> None:
        """With nothing to compute but KV on its way or a request still in the API server,
        the next step starts when the first of them is ready."""
        pending = [seq.deadline for seq in self._running.values() if seq.deadline > 0.0]
        if self._waiting_ready_at:
            # Timed from a late step's due time, this step saw a request not yet ready
            # that may be by now: the next step comes no earlier than now.
            pending.append(max(self._waiting_ready_at, self._clock()))
        if pending and self._kick is None:
            self._kick = self._scheduler.call_at(min(pending), self._kicked)

    @staticmethod
    def _schedule_chunk(step: Step, load: StepLoad, seq: Sequence, budget: int) -> int:
        """The next prefill chunk of `seq`, as much as the budget allows; its size."""
        need = seq.prompt_tokens + seq.emitted - seq.computed
        chunk = min(need, budget)
        if seq.encode_pending:
            seq.encode_pending = False
            tokens, pairs = image_work(seq.prompt.features, seq.computed)
            if tokens:
                load.add_encoder(tokens, pairs)
        load.add_prefill(seq.computed, chunk, chunk == need)
        step.work.append((seq, chunk, seq.preemptions))
        return chunk

    def _end_step(self) -> None:
        step, self._step, self._step_timer = self._step, None, None
        if step is None:
            return
        core = self._core
        now = self._clock()
        touched: dict[int, RequestStream] = {}
        self._stepping = True
        try:
            for seq, chunk, epoch in step.work:
                if seq.state is not SeqState.RUNNING or seq.preemptions != epoch:
                    continue  # aborted, failed or preempted while the step ran
                try:
                    if self._complete(step, seq, chunk, now):
                        touched[id(seq.stream)] = seq.stream
                except Exception:  # one sequence's bug fails its request, not the step
                    core.crash(seq, "releasing tokens")
            self.steps += 1
            if step.tokens:
                core.observer.engine_step(step.tokens)
        finally:
            self._stepping = False
        for stream in touched.values():
            stream.notify()
        self._begin_step(step.ends)  # the next step, at once, while there is work

    def _complete(self, step: Step, seq: Sequence, chunk: int, now: float) -> bool:
        """Applies a step's `chunk` of computed tokens to `seq` (counted in the step's
        tokens). Once its KV holds every token it has, the step samples the next one, as
        vLLM does; True if it released a token or ended."""
        step.tokens += chunk
        computed = seq.computed = seq.computed + chunk
        emitted = seq.emitted
        if computed < len(seq.prompt.token_ids) + emitted:
            return False  # more prefill chunks to come
        total = len(seq.output_ids)
        observer = self._core.observer
        if emitted and emitted < total - 1 and not seq.call_starts:
            # The common decode step, inline: one token, its gap one ITL sample.
            seq.emitted = emitted + 1
            observer.inter_tokens(seq, now - seq.t_last_token, 1)
            seq.t_last_token = now
            return True
        if seq.t_first_token is None:
            seq.t_first_token = seq.t_last_token = now
            observer.first_token(seq)
        if seq.emitted < total:
            release_token(seq, now, observer)
            while seq.emitted < total and seq.emitted in seq.call_starts:
                release_token(seq, now, observer)  # a tool call opens with no step of its own
        if seq.emitted >= total:
            self._core.finish(seq, now)
        return True
