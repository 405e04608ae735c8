"""The simulated engine's scheduler core: admission, the waiting queue, running slots, KV
blocks with preemption, LoRA slots, and how sequences end.

One engine per served instance (or data-parallel rank). Everything runs on the event
loop's thread, so state needs no locks. The core decides who runs; its timing strategy
(engine/timing) decides when tokens come: the token clock by default, or the step loop.
A token is released only once its sequence holds the KV blocks for everything before it;
a sequence that cannot get a block takes one from the newest running sequence, which is
preempted and recomputed later, as vLLM V1 schedules (see `grow`). Sleep and pause are
the engine's lifecycle (lifecycle.py); what it shows of itself, its view (view.py).
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from vllm_sim.engine import budget
from vllm_sim.engine.admission import check_admissible
from vllm_sim.engine.clock import LoopScheduler, Scheduler
from vllm_sim.engine.content import ContentSource
from vllm_sim.engine.errors import EngineError, Refusal, RequestAborted
from vllm_sim.engine.finish import Finish
from vllm_sim.engine.kv_blocks import hold_blocks, prompt_fits, set_kv_limit
from vllm_sim.engine.kvcache.manager import KvCacheManager
from vllm_sim.engine.latency import LatencyModel, LatencySettings
from vllm_sim.engine.lifecycle import Asleep, Lifecycle, PauseMode
from vllm_sim.engine.lora import LoraRegistry, LoraSlots
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import GenerationRequest
from vllm_sim.engine.sequence import NO_KV_LIMIT, RequestStream, SeqState, Sequence
from vllm_sim.engine.timing.strategy import TimingStrategy
from vllm_sim.engine.timing.token_clock import TokenClock
from vllm_sim.engine.turn import Turn
from vllm_sim.engine.view import EngineView

log = logging.getLogger("vllm_sim")

QUEUE_FULL = "Failed to enqueue request, waiting requests queue is full"
SLEEPING = "The model is sleeping: POST /wake_up before sending requests"
INTERNAL_ERROR = "Internal server error"


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
    """Runs sequences through waiting -> running -> finished (or aborted), on `timing`
    (the token clock unless given)."""

    def __init__(
        self,
        limits: EngineLimits,
        latency: LatencySettings,
        content: ContentSource,
        rng: random.Random,
        scheduler: Scheduler | None = None,
        observer: EngineObserver | None = None,
        kv: KvCacheManager | None = None,
        timing: TimingStrategy | None = None,
    ) -> None:
        self.limits = limits
        self._rng = rng
        self.latency = LatencyModel(latency, rng)
        self.content = content
        self.scheduler: Scheduler = scheduler or LoopScheduler()
        self._clock = self.scheduler.now
        self.observer: EngineObserver = observer or EngineObserver()
        self._kv = kv
        self.loras = LoraRegistry()
        # The cache evicts the blocks of adapters no longer loaded first.
        models: set[str] = set() if kv is None else kv.cache.loaded_models
        self.lora_slots = LoraSlots(
            limits.max_loras, limits.max_cpu_loras, models.add, models.discard
        )
        self._queue: deque[Sequence] = deque()
        self.num_waiting = 0
        self.num_running = 0
        # Running sequences by uid, oldest admission first: preemption takes the newest.
        self._running: dict[int, Sequence] = {}
        self._next_uid = 0
        # True while admit_waiting runs: a sequence that ends inline re-enters it. Read on
        # every admission, so an attribute rather than a property.
        self.admitting = False
        self._fake_running: int | None = None
        self.turn = Turn()
        self._admission_deferred = False
        self.timing: TimingStrategy = timing or TokenClock()
        self.lifecycle = Lifecycle(self, self.timing, kv)
        self.view = EngineView(self, self._queue)
        self.timing.attach(self)
        self._report_written = self.written  # bound once: every stream carries it

    # ----------------------------------------------------------------- parts' state
    @property
    def kv(self) -> KvCacheManager | None:
        """The KV cache manager, if the engine accounts KV blocks."""
        return self._kv

    @property
    def running(self) -> Mapping[int, Sequence]:
        """The running sequences by uid, oldest admission first (for the timing): the same
        mapping for the engine's whole life."""
        return self._running

    @property
    def paused(self) -> PauseMode | None:
        """The pause in force, if any (the lifecycle's)."""
        return self.lifecycle.paused

    @property
    def open_requests(self) -> int:
        """Sequences still queued or running (the lifecycle's)."""
        return self.lifecycle.open_requests

    # ----------------------------------------------------------------- public API
    def load(self) -> int:
        """The running count the load factor sees: fake metrics may generate one."""
        return self.num_running if self._fake_running is None else self._fake_running

    def set_fake_load(self, running: int | None) -> None:
        """A generated running count replaces the real one in the load factor (None: real)."""
        self._fake_running = running

    def sleep(self, level: int = 1) -> None:
        """Frees the weights and the KV cache, as vLLM's /sleep: the prefix cache is cleared
        and stays off, and every request is refused until woken."""
        self.lifecycle.sleep(level)

    def wake(self, parts: frozenset[Asleep]) -> None:
        """Brings `parts` back; the prefix cache works again once the KV cache is awake."""
        self.lifecycle.wake(parts)

    def pause(self, mode: PauseMode) -> None:
        """Stops scheduling, as vLLM's /pause: no queued request starts until resume();
        `mode` says what becomes of the requests in flight."""
        self.lifecycle.pause(mode)

    def resume(self) -> None:
        """Ends a pause: frozen requests run on from where they stopped, the queue starts."""
        self.lifecycle.resume()

    def stop_all(self, message: str) -> int:
        """Fails every queued and running request with `message`, for a server that stops
        before they end; returns how many requests were stopped."""
        return self.lifecycle.stop_all(message)

    def load_lora(self, name: str, path: str) -> None:
        """Registers adapter `name`: requests for it run on the base model with its slot."""
        self.loras.load(name, path)

    def unload_lora(self, name: str) -> None:
        """Forgets adapter `name`; its requests already admitted run to the end."""
        self.loras.unload(name)

    def reset_prefix_cache(self, reset_running: bool = False) -> bool:
        """Forgets every cached block (one AllBlocksCleared event), as vLLM's
        /reset_prefix_cache. Like vLLM it refuses (False) while running requests hold
        blocks, unless `reset_running`: they are then preempted and recomputed."""
        kv = self._kv
        if kv is None:
            return True
        if kv.cache.held_blocks and not reset_running:
            return False
        while self._running:  # vLLM preempts them: they recompute once the cache is empty
            self._preempt(self._newest_running())
        kv.cache.clear()
        self.admit()
        return True

    def reconfigure(self, limits: EngineLimits, latency: LatencySettings) -> None:
        """Applies new settings to later decisions; in-flight timings keep their past."""
        self.limits = limits
        self.latency = LatencyModel(latency, self._rng)
        self.timing.kick()

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Admits a request whole, or raises EngineError (asleep, context length, queue full).

        A bug on the way in is this request's EngineError(Refusal.INTERNAL), never a leak:
        whatever it had taken (queue places, slots) is given back first.
        """
        if self.lifecycle.asleep:
            raise EngineError(Refusal.SLEEPING, SLEEPING)
        self.turn.begin()
        stream: RequestStream | None = None
        try:
            self._check_room(request)
            stream = RequestStream(request, self.abort, self._report_written)
            self._enqueue(stream)
            self.timing.kick()
        except EngineError:
            raise
        except Exception:
            log.exception("admitting request %s failed", request.request_id)
            error = EngineError(Refusal.INTERNAL, INTERNAL_ERROR)
            if stream is not None:
                self._drop_all(stream, aborted=False)
                stream.fail(error)
                self.timing.kick()
            raise error from None
        return stream

    def written(self, seq: Sequence, start: int, end: int, finished: bool) -> None:
        """The front end just wrote tokens [start, end) of `seq` to its client, and its end
        if `finished` (each stream's RequestStream.report_written): the observer hears of
        it with the time on this engine's clock."""
        self.observer.output_written(seq, start, end, finished, self._clock())

    def abort(self, stream: RequestStream) -> None:
        """Frees every slot and queue place of the stream at once."""
        if stream.done:
            return
        self._drop_all(stream, aborted=True)
        stream.fail(RequestAborted())
        self.timing.kick()

    # ----------------------------------------------------------------- admission
    def _check_room(self, request: GenerationRequest) -> None:
        """Refuses what can never run (too many sequences, context length) or cannot wait
        now (queue full); takes nothing."""
        limits = self.limits
        if request.model in self.loras:
            request.lora = request.model
        check_admissible(request, limits)
        if self._kv is not None:
            for prompt in request.prompts:
                prompt.block_hashes = self._kv.hashes(
                    prompt.token_ids, request.model, prompt.features
                )
        count = len(request.prompts) * request.n
        free = limits.max_num_seqs - self.num_running
        must_wait = count if self.num_waiting else max(count - free, 0)
        if must_wait and self.num_waiting + must_wait > limits.max_waiting_queue_length:
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
        arrived = now if received is None else min(self.scheduler.at(received), now)
        return Sequence(self._next_uid, request, stream, p_index, index, arrived, self.latency)

    def admit(self) -> None:
        """Lets waiting sequences start, in a new turn of the loop, when the timing does."""
        self.turn.begin()
        self.timing.kick()

    def admit_waiting(self) -> None:
        """Moves queued sequences into free slots now, oldest first, as many as this turn of
        the loop allows (the rest on the next turn)."""
        if self.admitting:
            return  # a sequence finished inline while we were admitting: the loop continues
        if self.lifecycle.paused is not None:
            return  # nothing starts while paused; resume() admits the queue
        self.admitting = True
        try:
            while self.num_running < self.limits.max_num_seqs:
                if self.turn.over():
                    self._defer_admission()
                    break
                if self.start_next() is None:
                    break
        finally:
            self.admitting = False

    def _defer_admission(self) -> None:
        """Admits the rest on the next turn of the loop (see engine/turn.py)."""
        if not self._admission_deferred:
            self._admission_deferred = True
            self.scheduler.call_at(self._clock(), self._resume_admission)

    def _resume_admission(self) -> None:
        self._admission_deferred = False
        self.admit()

    def next_waiting(self) -> Sequence | None:
        """The oldest sequence waiting to start, left in the queue; None if none waits."""
        for seq in self._queue:
            if seq.state is SeqState.WAITING:
                return seq
        return None

    def start_next(self) -> Sequence | None:
        """Starts the oldest waiting sequence that may start now; None if none may."""
        seq = self._pop_admissible()
        if seq is None:
            return None
        self.num_waiting -= 1
        self._start(seq)
        return seq

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
                if self._kv is not None and not prompt_fits(seq, self._kv.cache):
                    return None
            except Exception:
                self.crash(seq, "admitting")  # it stays queued as ABORTED, skipped when reached
                continue
            del queue[index]
            return seq
        return None

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
            self._generate(seq)
            # The sequence keeps the latency model it started under: a config update applies
            # to later requests, never to half of one.
            seq.latency = self.latency
            self.observer.sequence_started(seq)
            self.timing.prefill(seq, now)
        except EngineError as exc:
            self._fail(seq, exc)
            return
        except Exception:  # a bug must cost this request, never its slot or the server
            self.crash(seq, "starting")
            return
        seq.stream.notify()

    def _generate(self, seq: Sequence) -> None:
        """Makes the output of a started sequence, counted against the turn's work and the
        request's output budget."""
        if seq.request.pooling:
            seq.finish_reason = Finish.STOP  # done once its prompt is prefilled
        else:
            self.content.generate(seq, self._context_limit())
        made = len(seq.output_ids)
        self.turn.work += made
        # Counted as made: output can come out longer than admission guessed (budget).
        stream, logprobs = seq.stream, seq.request.logprobs
        stream.output_units += made if logprobs is None else made * (1 + logprobs)
        limit = self.limits.max_request_output_tokens
        if limit and stream.output_units > limit:
            raise budget.over_budget(seq.request, limit)
        if seq.request.do_remote_decode:
            seq.finish_reason = Finish.REMOTE_DECODE  # the decode node continues this one

    def _look_up_prefix(self, seq: Sequence) -> bool:
        """Holds the prompt's blocks and sets its cached tokens; True if the cache-hit
        threshold refuses the sequence."""
        request, kv = seq.request, self._kv
        prompt_tokens = seq.prompt_tokens
        if kv is not None:
            seq.cached_tokens = hold_blocks(seq, prompt_tokens, kv.cache)
            if kv.prefix_caching:
                local = seq.cached_tokens - seq.loaded_tokens
                self.observer.prefix_lookup(prompt_tokens, local)
                if kv.cache.offload is not None:
                    # The offloading connector is asked for what the GPU's hit lacks.
                    self.observer.offloaded_prefix_lookup(
                        seq, prompt_tokens - local, seq.loaded_tokens
                    )
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
            full = len(prompt.block_hashes) * self.limits.block_size
            prompt.first_created = max(full - seq.cached_tokens, 0)
        if request.force_cache_threshold:
            return True
        if kv is None or not kv.thresholds:
            return False
        # Every copy decides on what the request found, not on what a sibling just stored.
        threshold = kv.threshold(request.cache_hit_threshold)
        hit_rate = prompt.first_hit / prompt_tokens if prompt_tokens else 0.0
        return threshold is not None and hit_rate < threshold

    def _context_limit(self) -> int:
        """The longest sequence: the context, or all the KV cache holds if that is less."""
        limit = self.limits.max_model_len
        kv = self._kv
        if kv is not None:
            limit = min(limit, kv.cache.max_tokens())
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
            cached = 0 if self._kv is None else hold_blocks(seq, computed, self._kv.cache)
            self.timing.recompute(seq, computed, cached, now)
        except EngineError as exc:
            self._fail(seq, exc)
            return
        except Exception:
            self.crash(seq, "resuming")
            return
        seq.stream.notify()

    def _refuse_by_threshold(self, seq: Sequence, now: float) -> None:
        """Answers at once, with no tokens: the router should send it elsewhere."""
        seq.finish_reason = Finish.CACHE_THRESHOLD
        self.observer.sequence_started(seq)
        self.finish(seq, now)

    # ----------------------------------------------------------------- KV growth
    def grow(self, seq: Sequence, outputs: int, now: float) -> bool:
        """Gives `seq` the blocks for its prompt and `outputs` output tokens of KV. With too
        few free, the newest running sequences are preempted, as vLLM V1 does, until there
        is room or `seq` is the newest: then `seq` is preempted itself, or, running alone,
        ends at the length the cache holds. False if `seq` stops running."""
        kv = self._kv
        assert kv is not None
        cache = kv.cache
        prompt_tokens = len(seq.prompt.token_ids)
        tokens = prompt_tokens + outputs
        blocks = cache.blocks_for(tokens)
        while not cache.grow(seq.uid, blocks - seq.kv_blocks):
            victim = self._newest_running()
            if victim is seq and len(self._running) == 1:
                seq.keep_released()  # nothing else will ever free a block for it
                seq.finish_reason = Finish.LENGTH
                self.finish(seq, now)
                return False
            self._preempt(victim)
            if victim is seq:
                return False
        set_kv_limit(seq, blocks, tokens, prompt_tokens, cache)
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
        self.timing.preempted(seq)
        self._queue.appendleft(seq)
        self.num_waiting += 1
        self.observer.sequence_preempted(seq)

    # ----------------------------------------------------------------- endings
    def finish(self, seq: Sequence, now: float) -> None:
        """`seq` released its last token: its slot and blocks go to the next."""
        seq.state = SeqState.FINISHED
        seq.t_finished = now
        self._release(seq)
        self.observer.sequence_finished(seq)
        seq.stream.sequence_finished()
        self.timing.kick()

    def _release(self, seq: Sequence) -> None:
        """Gives back what a running sequence holds: its slot, KV blocks and LoRA slot use."""
        self.num_running -= 1
        self._running.pop(seq.uid, None)
        try:
            if self._kv is not None:
                self._kv.cache.finish(seq.uid)
        finally:
            if seq.lora_slot and seq.request.lora is not None:  # 0: never acquired one
                self.lora_slots.release(seq.request.lora)

    def crash(self, seq: Sequence, stage: str) -> None:
        """A bug while `stage`: logged once, and the request fails with a clean 500."""
        log.exception("request %s failed while %s", seq.request.request_id, stage)
        self._fail(seq, EngineError(Refusal.INTERNAL, INTERNAL_ERROR))

    def end_in_flight(self) -> None:
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
        seq.keep_released()
        seq.state = SeqState.FINISHED  # its timing's entry, if any, is skipped when reached
        seq.finish_reason = Finish.ABORT
        seq.t_finished = now
        try:
            if running:
                self._release(seq)
            self.observer.sequence_aborted(seq)
        except Exception:  # the request still ends, and its slot is given back already
            log.exception("aborting request %s failed", seq.request.request_id)
        seq.stream.sequence_finished()

    def fail_in_flight(self, error: EngineError) -> int:
        """Fails every queued and running request with `error`; returns how many."""
        streams = self._streams_in_flight()
        for stream in streams:
            self._drop_all(stream, aborted=False)
            stream.fail(error)
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
        self.timing.kick()

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
                    self._release(seq)  # its timing's entry is skipped when reached
                if aborted:
                    self.observer.sequence_aborted(seq)
                else:
                    self.observer.sequence_failed(seq)
            except Exception:  # its slot and queue place are given back already
                log.exception("releasing request %s failed", seq.request.request_id)
