"""The simulated engine: admission, the waiting queue, running slots, KV blocks with
preemption, and the token clock.

One engine per served instance (or data-parallel rank). Everything runs on the event
loop's thread, so state needs no locks. A single timer serves every running sequence: it
wakes at the earliest token deadline and releases every token that is due, so that delays
never accumulate scheduling lag and a thousand streams cost one timer, not a thousand.
A token is released only once its sequence holds the KV blocks for everything before it;
a sequence that cannot get a block takes one from the newest running sequence, which is
preempted and recomputed later, as vLLM V1 schedules (see `_grow`).
"""

from __future__ import annotations

import enum
import heapq
import logging
import random
import time
from collections import deque
from dataclasses import dataclass
from typing import Literal

from vllm_sim.engine import budget
from vllm_sim.engine.clock import LoopScheduler, Scheduler, TimerHandle
from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.errors import EngineError, Refusal, RequestAborted
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.kvcache.cache import BlockCache, Lora
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.latency import LatencyModel, LatencySettings
from vllm_sim.engine.lora import LoraRegistry, LoraSlots
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import GenerationRequest
from vllm_sim.engine.sequence import NO_KV_LIMIT, RequestStream, SeqState, Sequence

# A token whose deadline is this close is released now rather than after another timer
# round trip: event-loop timers have millisecond granularity.
_EARLY = 0.0005
_NEVER = float("inf")
# The engine's share of one turn of the event loop: with no latency configured a whole
# request (n in the hundreds) would otherwise be generated, and released, in one go, and
# nothing else (health checks, other clients) would run meanwhile. A turn ends after this
# many tokens generated (~3 ms), or this much real time (slow tool-call schemas).
WORK_PER_TURN = 16384
TURN_SECONDS = 0.005

log = logging.getLogger("vllm_sim")

QUEUE_FULL = "Failed to enqueue request, waiting requests queue is full"
SLEEPING = "The model is sleeping: POST /wake_up before sending requests"
INTERNAL_ERROR = "Internal server error"


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


# How POST /pause treats the requests in flight (vLLM's modes): `abort` ends them at once,
# `wait` lets the running ones finish, `keep` freezes them until resume.
PauseMode = Literal["abort", "wait", "keep"]


class Asleep(enum.Enum):
    """What a sleeping model has freed (vLLM's sleep levels: weights and the KV cache)."""

    WEIGHTS = "weights"
    KV_CACHE = "kv_cache"


@dataclass(frozen=True, slots=True)
class EngineLimits:
    max_num_seqs: int = 5
    max_waiting_queue_length: int = 1000
    max_model_len: int = 1024
    block_size: int = 16
    max_loras: int = 1
    max_cpu_loras: int = 1
    max_request_output_tokens: int = 0  # 0: no limit


class Engine:
    """Runs sequences through waiting -> running -> finished (or aborted)."""

    def __init__(
        self,
        limits: EngineLimits,
        latency: LatencySettings,
        content: ContentSource,
        rng: random.Random,
        scheduler: Scheduler | None = None,
        observer: EngineObserver | None = None,
        kv: KvCacheManager | None = None,
    ) -> None:
        self.limits = limits
        self._rng = rng
        self.latency = LatencyModel(latency, rng)
        self.content = content
        self._scheduler: Scheduler = scheduler or LoopScheduler()
        self._clock = self._scheduler.now
        self.observer: EngineObserver = observer or EngineObserver()
        self.kv = kv
        self.asleep: frozenset[Asleep] = frozenset()
        self.sleep_level = 0  # vLLM's level of the last /sleep (1 or 2); 0 while awake
        self.loras = LoraRegistry()
        self.lora_slots = LoraSlots(
            limits.max_loras, limits.max_cpu_loras, self._lora_loaded, self._lora_unloaded
        )
        self._queue: deque[Sequence] = deque()
        self.num_waiting = 0
        self.num_running = 0
        # Running sequences by uid, oldest admission first: preemption takes the newest.
        self._running: dict[int, Sequence] = {}
        self._heap: list[tuple[float, int, Sequence]] = []
        self._timer: TimerHandle | None = None
        self._timer_when = 0.0
        self._next_uid = 0
        self._admitting = False
        self._ticking = False
        self._fake_running: int | None = None
        self._work = 0  # tokens generated this turn of the loop
        self._step_tokens = 0  # tokens released inline by the sequences one admission started
        self._turn_ends = 0.0  # time.perf_counter() at which this turn is over
        self._admission_deferred = False
        self.paused: PauseMode | None = None  # set by pause(), cleared by resume()
        self._frozen_at: float | None = None  # when `keep` stopped the token clock

    # ----------------------------------------------------------------- public API
    def load(self) -> int:
        """The running count the load factor sees: fake metrics may generate one."""
        return self.num_running if self._fake_running is None else self._fake_running

    def set_fake_load(self, running: int | None) -> None:
        """A generated running count replaces the real one in the load factor (None: real)."""
        self._fake_running = running

    def sleep(self, level: int = 1) -> None:
        """Frees the weights and the KV cache: the prefix cache is cleared and stays off,
        and every request is refused until woken. `level` is only reported (metrics)."""
        self.asleep = frozenset(Asleep)
        self.sleep_level = level
        if self.kv is not None:
            self.kv.cache.clear()
            self.kv.cache.disabled = True

    def wake(self, parts: frozenset[Asleep]) -> None:
        """Brings `parts` back; the prefix cache works again once the KV cache is awake."""
        self.asleep -= parts
        if not self.asleep:
            self.sleep_level = 0
        if self.kv is not None and Asleep.KV_CACHE not in self.asleep:
            self.kv.cache.disabled = False

    def reset_prefix_cache(self, reset_running: bool = False) -> bool:
        """Forgets every cached block (one AllBlocksCleared event), as vLLM's
        /reset_prefix_cache. Like vLLM it refuses (False) while running requests hold
        blocks, unless `reset_running`: they are then preempted and recomputed."""
        kv = self.kv
        if kv is None:
            return True
        if kv.cache.held_blocks and not reset_running:
            return False
        while self._running:  # vLLM preempts them: they recompute once the cache is empty
            self._preempt(self._newest_running())
        kv.cache.clear()
        self._new_turn()
        self._admit()
        return True

    def pause(self, mode: PauseMode) -> None:
        """Stops scheduling, as vLLM's /pause: no queued request starts until resume(), and
        new requests queue. `abort` ends every queued and running request now, as finished
        with reason `abort` and what it had released; `wait` lets the running ones finish;
        `keep` freezes them, token clock included."""
        self.paused = mode
        if mode == "keep":
            self._freeze_clock()
            return
        self._thaw_clock()  # a pause that kept requests frozen now lets them run on
        if mode == "abort":
            self._abort_in_flight()

    def resume(self) -> None:
        """Ends a pause: frozen requests run on from where they stopped, the queue starts."""
        self.paused = None
        self._thaw_clock()
        self._new_turn()
        self._admit()

    def waiting_by_reason(self) -> tuple[int, int]:
        """(capacity, deferred): vLLM's split of the waiting sequences. One whose LoRA adapter
        cannot be loaded now (--max-loras reached) is deferred; every other one waits for a
        running slot or KV blocks. It walks the queue: for scrapes, not the request path."""
        deferred = 0
        slots = self.lora_slots
        for seq in self._queue:
            lora = seq.request.lora
            if seq.state is SeqState.WAITING and lora is not None and not slots.can_run(lora):
                deferred += 1
        return self.num_waiting - deferred, deferred

    @property
    def open_requests(self) -> int:
        """Sequences still queued or running (the shutdown drain waits for 0)."""
        return self.num_waiting + self.num_running

    def reconfigure(self, limits: EngineLimits, latency: LatencySettings) -> None:
        """Applies new settings to later decisions; in-flight timings keep their past."""
        self.limits = limits
        self.latency = LatencyModel(latency, self._rng)
        self._admit()

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Admits a request whole, or raises EngineError (asleep, context length, queue full).

        A bug on the way in is this request's EngineError(Refusal.INTERNAL), never a leak:
        whatever it had taken (queue places, slots) is given back first.
        """
        if self.asleep:
            raise EngineError(Refusal.SLEEPING, SLEEPING)
        self._new_turn()
        stream: RequestStream | None = None
        try:
            self._check_room(request)
            stream = RequestStream(request, self.abort)
            self._enqueue(stream)
            self._admit()
        except EngineError:
            raise
        except Exception:
            log.exception("admitting request %s failed", request.request_id)
            error = EngineError(Refusal.INTERNAL, INTERNAL_ERROR)
            if stream is not None:
                self._drop_all(stream, aborted=False)
                stream.fail(error)
                self._admit()
            raise error from None
        return stream

    def _check_room(self, request: GenerationRequest) -> None:
        """Refuses what can never run (too many sequences, context length) or cannot wait
        now (queue full); takes nothing."""
        count = len(request.prompts) * request.n
        capacity = self.limits.max_num_seqs + self.limits.max_waiting_queue_length
        if count > capacity:
            # Never admissible, so not the retryable queue-full answer.
            raise EngineError(Refusal.INVALID, _too_many(request, capacity), "n")
        if request.model in self.loras:
            request.lora = request.model
        for prompt in request.prompts:
            self._check_context(request, len(prompt.token_ids))
        budget.check_request(
            request, self.limits.max_request_output_tokens, self.limits.max_model_len
        )
        if self.kv is not None:
            for prompt in request.prompts:
                prompt.block_hashes = self.kv.hashes(
                    prompt.token_ids, request.model, prompt.features
                )
        free = self.limits.max_num_seqs - self.num_running
        must_wait = count if self.num_waiting else max(count - free, 0)
        if must_wait and self.num_waiting + must_wait > self.limits.max_waiting_queue_length:
            self.observer.admission_rejected(request)
            raise EngineError(Refusal.QUEUE_FULL, QUEUE_FULL)

    def _enqueue(self, stream: RequestStream) -> None:
        """Queues every sequence of the request; nothing starts yet."""
        request = stream.request
        count = len(request.prompts) * request.n
        now = self._clock()
        for p_index in range(len(request.prompts)):
            for choice in range(request.n):
                index = p_index * request.n + choice
                stream.sequences.append(self._new_sequence(request, stream, p_index, index, now))
        stream.remaining = count
        for seq in stream.sequences:
            self._queue.append(seq)
            seq.t_enqueued = now
            self.num_waiting += 1
        for seq in stream.sequences:
            self.observer.sequence_queued(seq)

    def abort(self, stream: RequestStream) -> None:
        """Frees every slot and queue place of the stream at once."""
        if stream.done:
            return
        self._drop_all(stream, aborted=True)
        stream.fail(RequestAborted())
        self._admit()

    # ----------------------------------------------------------------- admission
    def _new_sequence(
        self,
        request: GenerationRequest,
        stream: RequestStream,
        p_index: int,
        index: int,
        now: float,
    ) -> Sequence:
        self._next_uid += 1
        received = request.received
        arrived = now if received is None else min(self._scheduler.at(received), now)
        return Sequence(self._next_uid, request, stream, p_index, index, arrived, self.latency)

    def _check_context(self, request: GenerationRequest, prompt_tokens: int) -> None:
        """vLLM's two refusals, in its words: more output than the context holds, or a
        prompt that leaves too little room for the output asked for (or for one token)."""
        limit = self.limits.max_model_len
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

    def _admit(self) -> None:
        """Moves queued sequences into free slots, oldest first."""
        if self._admitting:
            return  # a sequence finished inline while we were admitting: the loop continues
        if self.paused is not None:
            return  # nothing starts while paused; resume() admits the queue
        self._admitting = True
        try:
            while self.num_running < self.limits.max_num_seqs:
                if self._work >= WORK_PER_TURN or time.perf_counter() >= self._turn_ends:
                    self._defer_admission()
                    break
                seq = self._pop_admissible()
                if seq is None:
                    break
                self.num_waiting -= 1
                self._start(seq)
        finally:
            self._admitting = False
            if self._step_tokens:
                # Started with no TTFT to wait for, they released their tokens at once.
                tokens, self._step_tokens = self._step_tokens, 0
                self.observer.engine_step(tokens)

    def _new_turn(self) -> None:
        self._work = 0
        self._turn_ends = time.perf_counter() + TURN_SECONDS

    def _defer_admission(self) -> None:
        """Admits the rest on the next turn of the loop (see WORK_PER_TURN)."""
        if not self._admission_deferred:
            self._admission_deferred = True
            self._scheduler.call_at(self._clock(), self._resume_admission)

    def _resume_admission(self) -> None:
        self._admission_deferred = False
        self._new_turn()
        self._admit()

    def _pop_admissible(self) -> Sequence | None:
        """The oldest waiting sequence that may start now, taken off the queue.

        A LoRA sequence whose adapter cannot get a slot is passed over (others may run);
        a sequence whose KV blocks do not fit holds everyone behind it (FIFO)."""
        queue = self._queue
        while queue and queue[0].state is not SeqState.WAITING:
            queue.popleft()  # aborted while waiting
        for index, seq in enumerate(queue):
            if seq.state is not SeqState.WAITING:
                continue
            try:
                lora = seq.request.lora
                if lora is not None and not self.lora_slots.can_run(lora):
                    continue
                if not self._kv_fits(seq):
                    return None
            except Exception:
                self._crash(seq, "admitting")  # it stays queued as ABORTED, skipped when reached
                continue
            del queue[index]
            return seq
        return None

    def _kv_fits(self, seq: Sequence) -> bool:
        """Room for its prompt (and the output a preempted sequence recomputes)."""
        kv = self.kv
        return kv is None or kv.cache.fits(
            seq.prompt.block_hashes, seq.request.model, len(seq.prompt.token_ids) + seq.emitted
        )

    def _start(self, seq: Sequence) -> None:
        """Gives `seq` a running slot; a failure costs its request, never the slot."""
        if seq.preemptions:
            self._resume_preempted(seq)
            return
        now = self._clock()
        seq.state = SeqState.RUNNING
        seq.t_started = now
        self.num_running += 1
        self._running[seq.uid] = seq
        try:
            if seq.request.lora is not None:
                seq.lora_slot = self.lora_slots.acquire(seq.request.lora)
            if self._look_up_prefix(seq):
                self._refuse_by_threshold(seq, now)
                return
            if seq.request.pooling:
                seq.finish_reason = Finish.STOP  # done once its prompt is prefilled
            else:
                self.content.generate(seq, self._context_limit())
            made = len(seq.output_ids)
            self._work += made
            # Counted as made: output can come out longer than admission guessed (budget).
            stream, logprobs = seq.stream, seq.request.logprobs
            stream.output_units += made if logprobs is None else made * (1 + logprobs)
            limit = self.limits.max_request_output_tokens
            if limit and stream.output_units > limit:
                raise budget.over_budget(seq.request, limit)
            if seq.request.do_remote_decode:
                seq.finish_reason = Finish.REMOTE_DECODE  # the decode node continues this one
            # The sequence keeps the latency model it started under: a config update applies
            # to later requests, never to half of one.
            seq.latency = self.latency
            self.observer.sequence_started(seq)
            self._prefill(seq, now)
        except EngineError as exc:
            self._fail(seq, exc)
            return
        except Exception:  # a bug must cost this request, never its slot or the server
            self._crash(seq, "starting")
            return
        seq.stream.notify()

    def _look_up_prefix(self, seq: Sequence) -> bool:
        """Holds the prompt's blocks and sets its cached tokens; True if the cache-hit
        threshold refuses the sequence."""
        request, kv = seq.request, self.kv
        prompt_tokens = seq.prompt_tokens
        if kv is not None:
            seq.cached_tokens = self._hold_blocks(seq, prompt_tokens)
            if kv.prefix_caching:
                self.observer.prefix_lookup(prompt_tokens, seq.cached_tokens)
        if request.do_remote_prefill:
            # The prefill node sent the prompt's KV: its full blocks count as cached.
            block = self.limits.block_size
            local = seq.cached_tokens
            seq.cached_tokens = max(local, prompt_tokens // block * block)
            self.observer.external_prefix_lookup(
                seq, prompt_tokens - local, seq.cached_tokens - local
            )
        prompt = seq.prompt
        if prompt.first_hit is None:
            prompt.first_hit = seq.cached_tokens
        if request.force_cache_threshold:
            return True
        if kv is None or not kv.thresholds:
            return False
        # Every copy decides on what the request found, not on what a sibling just stored.
        threshold = kv.threshold(request.cache_hit_threshold)
        hit_rate = prompt.first_hit / prompt_tokens if prompt_tokens else 0.0
        return threshold is not None and hit_rate < threshold

    def _hold_blocks(self, seq: Sequence, computed: int) -> int:
        """Takes the blocks for `computed` tokens of KV; returns the prompt's cached tokens."""
        kv = self.kv
        assert kv is not None
        cache, request, prompt = kv.cache, seq.request, seq.prompt
        lora = Lora(seq.lora_slot, request.lora) if request.lora else None
        blocks = cache.blocks_for(computed)
        cached = cache.start(
            seq.uid, prompt.block_hashes, prompt.token_ids, request.model, lora, blocks
        )
        _set_kv_limit(seq, blocks, len(prompt.token_ids), cache)
        return cached * cache.block_size

    def _context_limit(self) -> int:
        """The longest sequence: the context, or all the KV cache holds if that is less."""
        limit = self.limits.max_model_len
        kv = self.kv
        if kv is not None:
            limit = min(limit, kv.cache.capacity * kv.cache.block_size)
        return limit

    def _resume_preempted(self, seq: Sequence) -> None:
        """Runs a preempted sequence again: its prompt and the output released so far are
        recomputed (a prefill, prefix-cache hits included), then it goes on where it was."""
        now = self._clock()
        seq.state = SeqState.RUNNING
        self.num_running += 1
        self._running[seq.uid] = seq
        try:
            if seq.request.lora is not None:
                seq.lora_slot = self.lora_slots.acquire(seq.request.lora)
            computed = seq.prompt_tokens + seq.emitted
            cached = self._hold_blocks(seq, computed) if self.kv is not None else 0
            self._recompute(seq, computed, cached, now)
        except EngineError as exc:
            self._fail(seq, exc)
            return
        except Exception:
            self._crash(seq, "resuming")
            return
        seq.stream.notify()

    def _prefill(self, seq: Sequence, now: float) -> None:
        """Times a started sequence's prefill: its first token comes after the sampled TTFT,
        which counts the prefix-cache hits looked up at start."""
        seq.ttft = seq.latency.time_to_first_token(
            seq.prompt_tokens, seq.cached_tokens, seq.request.do_remote_prefill, self.load()
        )
        self._advance(seq, now + seq.ttft, now)
        if seq.t_first_token is not None:  # released at once: part of this admission's step
            self._step_tokens += len(seq.prompt.token_ids) + seq.emitted

    def _recompute(self, seq: Sequence, computed: int, cached: int, now: float) -> None:
        """Times the prefill that recomputes a preempted sequence's `computed` tokens, of
        which `cached` are prefix-cache hits; then it goes on where it was."""
        delay = seq.latency.time_to_first_token(computed, cached, False, self.load())
        self._advance(seq, now + delay, now)

    def _refuse_by_threshold(self, seq: Sequence, now: float) -> None:
        """Answers at once, with no tokens: the router should send it elsewhere."""
        seq.finish_reason = Finish.CACHE_THRESHOLD
        self.observer.sequence_started(seq)
        self._finish(seq, now)

    # ----------------------------------------------------------------- the token clock
    def _advance(self, seq: Sequence, deadline: float, now: float) -> None:
        """Releases every token of `seq` due by `now`; schedules the next one."""
        total = len(seq.output_ids)
        horizon = now + _EARLY
        while deadline <= horizon:
            if seq.emitted == 0 and seq.t_first_token is None:
                seq.t_first_token = seq.t_last_token = now
                self.observer.first_token(seq)
            if seq.emitted >= total:
                self._finish(seq, now)
                return
            latency = seq.latency
            if latency.settings.itl == 0:
                if total > seq.kv_limit and not self._grow(seq, total - 1, now):
                    return
                self._release_remaining(seq, total, now)
                deadline += self._tail(seq, latency)
                continue
            if seq.emitted >= seq.kv_limit and not self._grow(seq, seq.emitted, now):
                return
            self._release_token(seq, now)
            if seq.emitted >= total:
                deadline += self._tail(seq, latency)
                continue
            if seq.emitted in seq.call_starts:
                continue  # a new tool call starts with no decode step before it
            delay = latency.inter_token_latency(self.load())
            seq.itl_delays += delay
            deadline += delay
        self._schedule(seq, deadline)

    def _grow(self, seq: Sequence, outputs: int, now: float) -> bool:
        """Gives `seq` the blocks for its prompt and `outputs` output tokens of KV. With too
        few free, the newest running sequences are preempted, as vLLM V1 does, until there
        is room or `seq` is the newest: then `seq` is preempted itself, or, running alone,
        ends at the length the cache holds. False if `seq` stops running."""
        kv = self.kv
        assert kv is not None
        cache = kv.cache
        prompt_tokens = len(seq.prompt.token_ids)
        blocks = cache.blocks_for(prompt_tokens + outputs)
        while not cache.grow(seq.uid, blocks - seq.kv_blocks):
            victim = self._newest_running()
            if victim is seq and len(self._running) == 1:
                _keep_released(seq)  # nothing else will ever free a block for it
                seq.finish_reason = Finish.LENGTH
                self._finish(seq, now)
                return False
            self._preempt(victim)
            if victim is seq:
                return False
        _set_kv_limit(seq, blocks, prompt_tokens, cache)
        return True

    def _newest_running(self) -> Sequence:
        """The running sequence admitted last: the one vLLM V1 preempts first."""
        return next(reversed(self._running.values()))

    def _preempt(self, seq: Sequence) -> None:
        """Frees a running sequence's slot and blocks; it waits at the head of the queue and
        is recomputed when it runs again (vLLM V1's recompute preemption)."""
        self._release(seq)
        seq.state = SeqState.WAITING
        seq.preemptions += 1
        seq.kv_limit = NO_KV_LIMIT
        heap = self._heap
        if any(entry[2] is seq for entry in heap):
            heap[:] = [entry for entry in heap if entry[2] is not seq]
            heapq.heapify(heap)
        self._queue.appendleft(seq)
        self.num_waiting += 1
        self.observer.sequence_preempted(seq)

    def _release_token(self, seq: Sequence, now: float) -> None:
        """Releases the next token of `seq` at `now`. Its gap since the previous release
        is what vLLM's ITL and TPOT record (a late timer shows as a longer gap): measured,
        not the delay sampled for it. A tool call's first token has no step before it."""
        seq.emitted += 1
        if seq.emitted > 1 and seq.emitted - 1 not in seq.call_starts:
            self.observer.inter_tokens(seq, now - seq.t_last_token, 1)
        seq.t_last_token = now

    def _release_remaining(self, seq: Sequence, total: int, now: float) -> None:
        """No decode delay: every token left is released at `now`, each gap still a step
        (the first measured since the previous release, the rest nothing)."""
        steps = total - max(seq.emitted, 1)
        if seq.call_starts:  # a call's first token follows without a step
            steps -= sum(1 for i in seq.call_starts if i >= max(seq.emitted, 1))
        if steps > 0 and seq.emitted > 0:
            self.observer.inter_tokens(seq, now - seq.t_last_token, 1)
            steps -= 1
        if steps > 0:
            self.observer.inter_tokens(seq, 0.0, steps)
        seq.emitted = total
        seq.t_last_token = now

    @staticmethod
    def _tail(seq: Sequence, latency: LatencyModel) -> float:
        """Time between the last token and the end: an omni model's image, if any."""
        return latency.time_to_generate_image() if seq.request.with_image else 0.0

    def _schedule(self, seq: Sequence, deadline: float) -> None:
        if not deadline < _NEVER:  # NaN or infinite: the heap and the timer need an order
            raise ValueError(f"token deadline {deadline} is not a finite time")
        seq.deadline = deadline
        heapq.heappush(self._heap, (deadline, seq.uid, seq))
        if self._ticking:
            return  # _tick arms the timer for the earliest deadline when it is done
        if self._timer is None or deadline < self._timer_when:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._scheduler.call_at(deadline, self._tick)
            self._timer_when = deadline

    def _tick(self) -> None:
        self._timer = None
        self._ticking = True
        heap = self._heap
        now = self._clock()
        horizon = now + _EARLY
        touched: list[RequestStream] = []
        released = 0  # this tick's tokens: one engine step
        self._new_turn()
        try:
            while heap and heap[0][0] <= horizon and self._work < WORK_PER_TURN:
                if time.perf_counter() >= self._turn_ends:
                    break
                deadline, _, seq = heapq.heappop(heap)
                if seq.state is not SeqState.RUNNING:
                    continue
                before = seq.emitted
                prefilling = seq.t_first_token is None
                try:
                    self._advance(seq, deadline, now)
                except Exception:  # one sequence step: a bug fails its request, not the clock
                    self._crash(seq, "releasing tokens")
                    continue
                if prefilling and seq.t_first_token is not None:
                    released += seq.prompt_tokens  # its prefill ended in this step
                if seq.emitted != before:
                    released += seq.emitted - before
                    touched.append(seq.stream)
        finally:
            self._ticking = False
            if heap:  # armed even if the loop broke: the clock must keep running for others
                self._timer_when = heap[0][0]
                self._timer = self._scheduler.call_at(self._timer_when, self._tick)
        if released:
            self.observer.engine_step(released)
        for stream in touched:
            stream.notify()

    # ----------------------------------------------------------------- endings
    def _finish(self, seq: Sequence, now: float) -> None:
        seq.state = SeqState.FINISHED
        seq.t_finished = now
        self._release(seq)
        self.observer.sequence_finished(seq)
        seq.stream.sequence_finished()
        self._admit()

    def _release(self, seq: Sequence) -> None:
        """Gives back what a running sequence holds: its slot, KV blocks and LoRA slot use."""
        self.num_running -= 1
        self._running.pop(seq.uid, None)
        try:
            if self.kv is not None:
                self.kv.cache.finish(seq.uid)
        finally:
            if seq.lora_slot and seq.request.lora is not None:  # 0: never acquired one
                self.lora_slots.release(seq.request.lora)

    def _lora_loaded(self, name: str) -> None:
        if self.kv is not None:
            self.kv.cache.loaded_models.add(name)

    def _lora_unloaded(self, name: str) -> None:
        if self.kv is not None:
            self.kv.cache.loaded_models.discard(name)

    def _crash(self, seq: Sequence, stage: str) -> None:
        """A bug while `stage`: logged once, and the request fails with a clean 500."""
        log.exception("request %s failed while %s", seq.request.request_id, stage)
        self._fail(seq, EngineError(Refusal.INTERNAL, INTERNAL_ERROR))

    # ----------------------------------------------------------------- pause
    def _freeze_clock(self) -> None:
        """No token is released until _thaw_clock: the timer is cancelled, and nothing else
        arms it while paused (only admission, which is off, and ticks, which are gone)."""
        if self._frozen_at is not None:
            return
        self._frozen_at = self._clock()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _thaw_clock(self) -> None:
        """Every pending token is due as much later as the clock stood still."""
        frozen_at = self._frozen_at
        if frozen_at is None:
            return
        self._frozen_at = None
        shift = self._clock() - frozen_at
        heap = self._heap
        for i, (deadline, uid, seq) in enumerate(heap):  # a constant shift keeps heap order
            heap[i] = (deadline + shift, uid, seq)
            seq.deadline = deadline + shift
        if heap:
            self._timer_when = heap[0][0]
            self._timer = self._scheduler.call_at(self._timer_when, self._tick)

    def _abort_in_flight(self) -> None:
        """Ends every queued and running sequence now, each answered as finished with
        reason `abort` (vLLM's pause in abort mode), rather than failed."""
        now = self._clock()
        for stream in self._streams_in_flight():
            for seq in stream.sequences:
                if seq.state is SeqState.WAITING or seq.state is SeqState.RUNNING:
                    self._end_aborted(seq, now)

    def _end_aborted(self, seq: Sequence, now: float) -> None:
        running = seq.state is SeqState.RUNNING
        if not running:
            self.num_waiting -= 1  # its queue entry is skipped when reached
        _keep_released(seq)
        seq.state = SeqState.FINISHED  # its clock entry, if any, is skipped when popped
        seq.finish_reason = Finish.ABORT
        seq.t_finished = now
        try:
            if running:
                self._release(seq)
            self.observer.sequence_aborted(seq)
        except Exception:  # the request still ends, and its slot is given back already
            log.exception("aborting request %s failed", seq.request.request_id)
        seq.stream.sequence_finished()

    def stop_all(self, message: str) -> int:
        """Fails every queued and running request, for a server that stops before they end:
        each answers (an error event and [DONE], or a 503) instead of being cut off. Returns
        how many requests were stopped."""
        streams = self._streams_in_flight()
        for stream in streams:
            self._drop_all(stream, aborted=False)
            stream.fail(EngineError(Refusal.STOPPING, message))
        return len(streams)

    def _streams_in_flight(self) -> set[RequestStream]:
        """The requests with a sequence waiting or running."""
        streams = {seq.stream for seq in self._queue if seq.state is SeqState.WAITING}
        streams.update(seq.stream for seq in self._running.values())
        return streams

    def _fail(self, seq: Sequence, error: EngineError) -> None:
        """A sequence failed after admission: the whole request fails, siblings stop."""
        self._drop_all(seq.stream, aborted=False)
        seq.stream.fail(error)
        self._admit()

    def _drop_all(self, stream: RequestStream, aborted: bool) -> None:
        """Releases the queue places and slots of every unfinished sequence of a stream.

        `aborted`: the client left (vLLM's `abort`); otherwise the request failed.
        """
        now = self._clock()
        for seq in stream.sequences:
            state = seq.state
            if state is SeqState.WAITING:
                self.num_waiting -= 1  # its queue entry is skipped when reached
            elif state is not SeqState.RUNNING:
                continue
            seq.state = SeqState.ABORTED
            seq.t_finished = now
            try:
                if state is SeqState.RUNNING:
                    self._release(seq)  # its clock entry is skipped when popped
                if aborted:
                    self.observer.sequence_aborted(seq)
                else:
                    self.observer.sequence_failed(seq)
            except Exception:  # its slot and queue place are given back already
                log.exception("releasing request %s failed", seq.request.request_id)


def _set_kv_limit(seq: Sequence, blocks: int, prompt_tokens: int, cache: BlockCache) -> None:
    """Token k+1 needs the KV of the prompt and k output tokens: while `emitted` is below
    the limit, the `blocks` held have room for it (no limit while the cache sleeps)."""
    seq.kv_blocks = blocks
    seq.kv_limit = NO_KV_LIMIT if cache.disabled else blocks * cache.block_size - prompt_tokens + 1


def _keep_released(seq: Sequence) -> None:
    """Cuts a sequence's output to the tokens already released. A tool call not released
    whole is dropped, since its arguments would not parse; its released argument tokens
    stay sent (as they would be by vLLM) but are no longer part of the answer."""
    cut = seq.emitted
    calls = seq.tool_calls
    if calls is not None:
        whole = [call for call in calls if call.end <= cut]
        if len(whole) < len(calls):
            cut = whole[-1].end if whole else min(cut, calls[0].start)
        seq.tool_calls = whole or None
        seq.emitted = min(seq.emitted, cut)
    seq.output_ids = seq.output_ids[:cut]  # new lists: the generated ones may be shared
    seq.output_pieces = seq.output_pieces[:cut]
