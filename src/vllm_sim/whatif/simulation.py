"""Replay in simulated time: a trace through N engines behind a router, on a virtual clock.

Each instance is the server's own engine (built by the same code from the same flags:
scheduler, KV cache with prefix caching and preemption, step loop and performance model,
or the token clock), with no HTTP and no event loop. Arrivals, engine steps and the fleet's
samples are events on one virtual clock, so a run takes only the CPU its events cost.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import msgspec

from vllm_sim.config import Config, ConfigError
from vllm_sim.engine import turn as engine_turn
from vllm_sim.engine.core import Engine
from vllm_sim.engine.errors import EngineError
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.sequence import Sequence as EngineSequence
from vllm_sim.engine.tokenizer import SimulatedTokenizer, Tokenizer
from vllm_sim.errors import RequestError
from vllm_sim.frontend import capabilities
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.endpoint import Endpoint
from vllm_sim.perf import StepTimeModel
from vllm_sim.protocols.openai.chat import ChatEndpoint
from vllm_sim.protocols.openai.completions import CompletionsEndpoint
from vllm_sim.server.build import (
    api_context,
    build_engine,
    content_source,
    kv_cache_manager,
    rank_rng,
    speculation,
)
from vllm_sim.server.step_timing import Coefficients, StepTiming, timed_config
from vllm_sim.whatif.clock import VirtualClock
from vllm_sim.whatif.prompts import VOCABULARY_SPAN, prompt_ids
from vllm_sim.whatif.results import MAX_SAMPLES, RequestRecord, RunResult, Sample
from vllm_sim.whatif.routers import Router, RouterName
from vllm_sim.whatif.trace import Trace, TraceRequest

Progress = Callable[[int], None]  # called with how many requests ended since the last call


class _Collector(EngineObserver):
    """One instance's ends, reported to the run."""

    def __init__(self, run: Replay) -> None:
        self._run = run

    def sequence_finished(self, seq: EngineSequence) -> None:
        self._run.ended(seq, None)

    def sequence_failed(self, seq: EngineSequence) -> None:
        error = seq.stream.error
        self._run.ended(seq, str(error) if error is not None else "failed")

    def sequence_preempted(self, seq: EngineSequence) -> None:
        self._run.preemptions += 1


@contextmanager
def virtual_turns() -> Iterator[None]:
    """The engine ends its share of an event-loop turn after TURN_SECONDS of real time, so
    that no burst of admissions blocks a live server's loop. A replay has no loop to keep
    free, and a real-time limit there would make a busy machine admit fewer requests in a
    step than an idle one: the same trace would replay differently from run to run. The
    limit is lifted while a replay runs (the limit by work done stays)."""
    saved = engine_turn.TURN_SECONDS
    engine_turn.TURN_SECONDS = math.inf
    try:
        yield
    finally:
        engine_turn.TURN_SECONDS = saved


def refuse_phases(cfg: Config) -> None:
    """A phase schedule runs on a server's wall clock, which a replay in simulated time has
    not: refused rather than silently left out."""
    if cfg.phases is not None:
        raise ConfigError(
            "--phases runs on a server's clock: a replay runs no phase schedule (give the "
            "phase's --latency-factor or --failure-injection-rate instead)"
        )


class Replay:
    """One run of a trace; `run()` returns its result.

    `coefficients` change the roofline model's GPU on top of the flags (calibration's
    candidates). With `max_concurrency`, the trace's client keeps at most that many
    requests open, as `vllm bench serve --max-concurrency` does: a request due while that
    many are open is sent when one ends, and is timed from then (its arrival becomes the
    send)."""

    def __init__(
        self,
        cfg: Config,
        trace: Trace,
        instances: int = 1,
        router: RouterName = "round-robin",
        sample_interval: float = 1.0,
        environ: Mapping[str, str] | None = None,
        tokenizer: Tokenizer | None = None,
        progress: Progress | None = None,
        prefill_instances: int | None = None,
        vocabulary: int = VOCABULARY_SPAN,
        coefficients: Coefficients | None = None,
        max_concurrency: int | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        refuse_phases(cfg)
        environ = os.environ if environ is None else environ
        cfg, timing = timed_config(cfg, environ, coefficients)
        step_model = None if timing is None else timing.model
        self.timing: StepTiming | None = timing
        self.cfg = cfg
        self.trace = trace
        self.clock = VirtualClock()
        self.tokenizer = tokenizer or SimulatedTokenizer()
        # Each instance is --data-parallel-size ranks, an engine each, as vLLM's data
        # parallelism runs them (with expert parallelism sharing their experts).
        ranks = instances * cfg.data_parallel_size
        self.engines = [self._engine(rank, step_model) for rank in range(ranks)]
        # P/D: the first `prefill` instances prefill, the others decode.
        self.prefill = 0
        if router == "pd":
            self.prefill = instances // 2 if prefill_instances is None else prefill_instances
            if not 0 < self.prefill < instances:
                raise ValueError(
                    f"P/D needs prefill and decode instances: {self.prefill} of {instances} "
                    "prefill (--prefill-instances)"
                )
        self.router = Router(router, self.engines[self.prefill :] if self.prefill else self.engines)
        self.prefill_router = Router(router, self.engines[: self.prefill])
        self.sample_interval = sample_interval
        self.progress = progress
        self.on_record = on_record  # called with each request's record once it is final
        self.interrupted = False
        self.vocabulary = vocabulary
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        self.max_concurrency = max_concurrency
        self._held: deque[int] = deque()  # requests due, waiting for the client to send them
        self._sent = 0  # requests the client has open
        self._sending = False
        self.records: list[RequestRecord] = []
        self.samples: list[Sample] = []
        self.preemptions = 0
        self.finished = 0
        self._open = 0
        self._next = 0  # the next trace request to arrive
        self._ctx: ApiContext | None = None
        self._decodes: dict[int, GenerationRequest] = {}  # P/D: decode legs, by request
        self._endpoints: dict[str, Endpoint[Any]] = {}

    def _engine(self, rank: int, step_model: StepTimeModel | None) -> Engine:
        rng = rank_rng(self.cfg, rank)
        content = content_source(self.cfg, self.tokenizer, rng)
        kv = kv_cache_manager(self.cfg, None, step_model)
        spec = speculation(self.cfg, rank)
        observer = _Collector(self)
        return build_engine(self.cfg, content, rng, self.clock, observer, kv, step_model, spec)

    # ------------------------------------------------------------------ the run
    def interrupt(self) -> None:
        """Stops the run after the event now running (a signal handler's call): `run`
        returns the requests so far, those still open marked interrupted, as a partial
        result."""
        self.interrupted = True
        self.clock.stop()

    def run(self) -> RunResult:
        started = time.perf_counter()
        if self.trace.requests:
            self.clock.call_at(self.trace.requests[0].arrival, self._arrive)
        self.clock.call_at(0.0, self._sample)
        with virtual_turns():
            self.clock.run()
        stopped = self.clock.stopped
        for record in self.records:
            if record.error is None and record.e2e is None:
                # The engine stopped short, or the run was: reported, not hidden.
                record.error = "interrupted" if stopped else "unfinished"
        result = RunResult(
            "replay",
            self._settings(),
            self.records,
            self.samples,
            list(self.trace.problems),
            time.perf_counter() - started,
        )
        if stopped:
            result.partial = True
            result.stopped_at = self.clock.now()
            result.trace_requests = len(self.trace.requests)
        return result

    def _settings(self) -> dict[str, Any]:
        cfg = self.cfg
        return {
            "instances": len(self.engines),
            "router": self.router.name,
            "prefill_instances": self.prefill,
            "model": cfg.model,
            "timing_model": cfg.timing_model,
            "gpu": cfg.gpu,
            "tensor_parallel_size": cfg.tensor_parallel_size,
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "max_waiting_queue_length": cfg.max_waiting_queue_length,
            "num_gpu_blocks": cfg.kv_cache_size,
            "block_size": cfg.block_size,
            "prefix_caching": cfg.enable_prefix_caching,
            "speculative_config": cfg.speculative_config,
            "spec_acceptance_rate": cfg.spec_acceptance_rate if cfg.speculative_config else None,
            "data_parallel_size": cfg.data_parallel_size,
            "enable_expert_parallel": cfg.enable_expert_parallel,
            "sample_interval": self.sample_interval,
        }

    def _arrive(self) -> None:
        requests = self.trace.requests
        now = self.clock.now()
        # Every request due now, then the timer for the next one.
        while self._next < len(requests) and requests[self._next].arrival <= now:
            if self.max_concurrency is not None:
                self._held.append(self._next)
            else:
                self._submit(self._next, requests[self._next])
            self._next += 1
        self._send_held()
        if self._next < len(requests):
            self.clock.call_at(requests[self._next].arrival, self._arrive)

    def _send_held(self) -> None:
        """The closed-loop client: sends held requests while fewer than max_concurrency
        are open, each timed from now."""
        limit = self.max_concurrency
        if limit is None or self._sending:
            return  # a refusal while sending: the loop below goes on
        self._sending = True
        try:
            while self._held and self._sent < limit:
                index = self._held.popleft()
                self._sent += 1
                self._submit(index, self.trace.requests[index], self.clock.now())
        finally:
            self._sending = False

    def _client_done(self) -> None:
        if self.max_concurrency is not None:
            self._sent -= 1
            self._send_held()

    def _submit(self, index: int, traced: TraceRequest, sent: float | None = None) -> None:
        arrival = traced.arrival if sent is None else sent
        record = RequestRecord(index, traced.line, -1, arrival, traced.input_length)
        self.records.append(record)
        try:
            request = self._request(index, traced)
        except RequestError as error:
            self._refused(record, f"{error.status}: {error.message}")
            return
        ids = request.prompts[0].token_ids
        record.input_tokens = len(ids)
        if self.prefill:
            self._decodes[index] = _decode_leg(request)
            request = _prefill_leg(request)
            instance = self.prefill_router.choose(ids, request.model)
        else:
            instance = self.router.choose(ids, request.model)
        self._send(record, instance, request)

    def _send(self, record: RequestRecord, instance: int, request: GenerationRequest) -> None:
        record.instance = instance
        try:
            self.engines[instance].submit(request)
        except EngineError as error:
            self._refused(record, str(error))
            return
        self._open += 1

    def _refused(self, record: RequestRecord, error: str) -> None:
        record.error = error
        self._final(record)
        self._tick_progress()
        self._client_done()

    def ended(self, seq: EngineSequence, error: str | None) -> None:
        record = self.records[int(seq.request.request_id)]
        if seq.request.do_remote_decode and error is None:
            self._decode(record, seq)
            return
        record.output_tokens = seq.emitted
        if not seq.request.do_remote_prefill:  # a decode leg's prompt came whole from its prefill
            record.cached_tokens = seq.cached_tokens
        record.preemptions = seq.preemptions
        record.finish_reason = None if seq.finish_reason is None else str(seq.finish_reason)
        started, first = seq.t_started, seq.t_first_token
        submitted = seq.t_submitted
        if started is not None and seq.t_enqueued is not None and record.queue_time is None:
            record.queue_time = started - seq.t_enqueued
        if seq.request.do_remote_prefill:
            submitted = record.arrival  # the decode leg: timed from the request's arrival
        if error is None and first is not None:
            record.ttft = first - submitted
            record.e2e = seq.t_last_token - submitted
            if seq.emitted > 1:
                record.itl = (seq.t_last_token - first) / (seq.emitted - 1)
        else:
            record.error = error or "no token"
        self._open -= 1
        self.finished += 1
        seq.stream.release()
        self._final(record)
        self._tick_progress()
        self._client_done()

    def _decode(self, record: RequestRecord, prefilled: EngineSequence) -> None:
        """The prefill leg handed its KV over: the decode leg starts on a decode instance.
        The request's queue time is the prefill's; its TTFT and latency the decode's, from
        the request's arrival."""
        if prefilled.t_started is not None and prefilled.t_enqueued is not None:
            record.queue_time = prefilled.t_started - prefilled.t_enqueued
        record.cached_tokens = prefilled.cached_tokens  # the prefill node's prefix-cache hits
        self._open -= 1
        prefilled.stream.release()
        leg = self._decodes.pop(record.index)
        ids = leg.prompts[0].token_ids
        self._send(record, self.prefill + self.router.choose(ids, leg.model), leg)

    def _final(self, record: RequestRecord) -> None:
        if self.on_record is not None:
            self.on_record(record)

    def _tick_progress(self) -> None:
        if self.progress is not None:
            self.progress(1)

    def _sample(self) -> None:
        engines = self.engines
        running = [e.num_running for e in engines]
        usage = [e.kv.cache.usage if e.kv is not None else 0.0 for e in engines]
        self.samples.append(
            Sample(
                self.clock.now(),
                sum(running),
                sum(e.num_waiting for e in engines),
                sum(usage) / len(usage),
                self.preemptions,
                self.finished,
                running,
            )
        )
        if len(self.samples) >= MAX_SAMPLES:  # bounded: every other one, twice the interval
            del self.samples[1::2]
            self.sample_interval *= 2
        if self._open or self._held or self._next < len(self.trace.requests):
            self.clock.call_at(self.clock.now() + self.sample_interval, self._sample)

    # ------------------------------------------------------------------ prompts
    def _request(self, index: int, traced: TraceRequest) -> GenerationRequest:
        model = self.cfg.served_model_name[0] if self.cfg.served_model_name else self.cfg.model
        if traced.body is not None:
            return self._openai_request(index, traced, model)
        ids = prompt_ids(index, traced, self.vocabulary)
        return GenerationRequest(
            str(index),
            model,
            [Prompt(ids)],
            max_tokens=traced.output_length,
            ignore_eos=traced.output_length is not None,
        )

    def _openai_request(self, index: int, traced: TraceRequest, model: str) -> GenerationRequest:
        """An OpenAI request planned as the server plans it: its rendered prompt, its own
        limits (without max tokens, the engine draws its length as for any request)."""
        assert traced.body is not None and traced.endpoint is not None
        endpoint = self._endpoint(traced.endpoint)
        ctx = self._context()
        try:
            body = endpoint.decoder.decode(msgspec.json.encode(traced.body))
        except msgspec.ValidationError as error:
            raise RequestError(400, str(error)) from None
        options = endpoint.options(body)
        plan = endpoint.plan(ctx, body)
        return GenerationRequest(
            str(index),
            model,
            plan.prompts[:1],
            max_tokens=options.max_tokens,
            ignore_eos=options.ignore_eos,
        )

    def _endpoint(self, name: str) -> Endpoint[Any]:
        endpoint = self._endpoints.get(name)
        if endpoint is None:
            if name == "chat":
                endpoint = ChatEndpoint("/v1/chat/completions", capabilities.CHAT)
            else:
                endpoint = CompletionsEndpoint("/v1/completions", capabilities.COMPLETIONS)
            self._endpoints[name] = endpoint
        return endpoint

    def _context(self) -> ApiContext:
        if self._ctx is None:
            engine = self.engines[0]
            self._ctx = api_context(
                self.cfg, self.cfg.port, rank_rng(self.cfg, 0), engine, self.tokenizer
            )
        return self._ctx


def replay(
    cfg: Config,
    trace: Trace,
    instances: int = 1,
    router: RouterName = "round-robin",
    sample_interval: float = 1.0,
    progress: Progress | None = None,
) -> RunResult:
    """Runs `trace` through `instances` engines of `cfg` behind `router`, in simulated time."""
    return Replay(cfg, trace, instances, router, sample_interval, progress=progress).run()


def _prefill_leg(request: GenerationRequest) -> GenerationRequest:
    """The prefill node's request: the prompt, one token, the KV kept for the decode node."""
    return GenerationRequest(
        request.request_id, request.model, request.prompts, max_tokens=1, do_remote_decode=True
    )


def _decode_leg(request: GenerationRequest) -> GenerationRequest:
    """The decode node's request: the same prompt, its KV sent by the prefill node."""
    return GenerationRequest(
        request.request_id,
        request.model,
        request.prompts,
        max_tokens=request.max_tokens,
        ignore_eos=request.ignore_eos,
        do_remote_prefill=True,
    )
