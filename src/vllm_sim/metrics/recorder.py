"""Records vLLM's request metrics from the engine's lifecycle events.

Every observation is what happened to the sequence: its sampled TTFT and inter-token
delays, and the measured times between its transitions. Nothing is read from the config.

Observations are made at once (holding sequences for a later batch would keep them alive
into older GC generations, which costs more than it saves), on series looked up once.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter

from vllm_sim.engine.finish import Finish
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.sequence import Sequence
from vllm_sim.metrics.catalogue import VllmMetrics
from vllm_sim.metrics.families import HistogramSeries

ABORT = "abort"
# vLLM's engine ends a tool-calling turn as `stop`; the API layer alone says `tool_calls`.
_ENGINE_REASON = {Finish.TOOL_CALLS: Finish.STOP}


def _observe(series: HistogramSeries, value: float) -> None:
    series.counts[bisect_left(series.bounds, value)] += 1
    series.sum += value


class MetricsRecorder(EngineObserver):
    """An EngineObserver that keeps the request families of a VllmMetrics current."""

    def __init__(self, metrics: VllmMetrics, max_loras: int = 1) -> None:
        model = metrics.model_name
        self._max_lora = str(max_loras)
        self._lora_waiting: Counter[str] = Counter()
        self._lora_running: Counter[str] = Counter()
        self._model = model
        self._metrics = metrics
        self._itl = metrics.itl.labels(model)
        # Each sub-request has one choice and every gap is both a TPOT and an ITL sample,
        # so these families always hold the same series: one object serves both.
        metrics.tpot.share((model,), self._itl)
        self._generation_hist = metrics.generation_tokens_hist.labels(model)
        metrics.max_generation_tokens.share((model,), self._generation_hist)
        self._prompt_total = metrics.prompt_tokens.labels(model)
        self._generation_total = metrics.generation_tokens.labels(model)
        self._prompt_hist = metrics.prompt_tokens_hist.labels(model)
        self._params_max_tokens = metrics.params_max_tokens.labels(model)
        self._queue = metrics.queue_time.labels(model)
        self._ttft = metrics.ttft.labels(model)
        self._prefill = metrics.prefill_time.labels(model)
        self._e2e = metrics.e2e.labels(model)
        self._inference = metrics.inference_time.labels(model)
        self._decode = metrics.decode_time.labels(model)
        self._request_tpot = metrics.request_tpot.labels(model)
        self._success = {
            reason: metrics.request_success.labels(model, reason)
            for reason in (Finish.STOP, Finish.LENGTH, ABORT)
        }

    def sequence_queued(self, seq: Sequence) -> None:
        lora = seq.request.lora
        if lora is not None:
            self._lora_waiting[lora] += 1
            self._loras_changed()

    def sequence_started(self, seq: Sequence) -> None:
        lora = seq.request.lora
        if lora is not None:
            self._lora_waiting[lora] -= 1
            self._lora_running[lora] += 1
            self._loras_changed()
        # Every request's wait, none included, as vLLM observes it.
        if seq.t_started is not None and seq.t_enqueued is not None:
            _observe(self._queue, seq.t_started - seq.t_enqueued)

    def first_token(self, seq: Sequence) -> None:
        first = seq.t_first_token
        if first is None:
            return
        # From the request's arrival, as the client sees it: queueing counts.
        _observe(self._ttft, first - seq.t_submitted)
        if seq.t_started is not None:
            _observe(self._prefill, first - seq.t_started)

    def inter_tokens(self, seq: Sequence, delay: float, count: int) -> None:
        itl = self._itl
        itl.counts[bisect_left(itl.bounds, delay)] += count
        itl.sum += delay * count

    def sequence_finished(self, seq: Sequence) -> None:
        self._lora_ended(seq)
        reason = seq.finish_reason or Finish.STOP
        self._record_end(seq, _ENGINE_REASON.get(reason, reason), seq.completion_tokens)

    def sequence_aborted(self, seq: Sequence) -> None:
        # vLLM counts a request its client abandoned under finished_reason="abort".
        self._lora_ended(seq)
        self._record_end(seq, ABORT, seq.emitted)

    def sequence_failed(self, seq: Sequence) -> None:
        # vLLM counts no success for a request that failed in the engine: only the gauges
        # (which read the engine) and the LoRA info change.
        self._lora_ended(seq)

    def _lora_ended(self, seq: Sequence) -> None:
        lora = seq.request.lora
        if lora is None:
            return
        held = self._lora_running if seq.t_started is not None else self._lora_waiting
        held[lora] -= 1
        self._loras_changed()

    def _loras_changed(self) -> None:
        """vLLM's lora_requests_info: the adapters running and waiting, stamped with now.

        Earlier label sets stay exposed, as in vLLM; readers take the newest value."""
        running = ",".join(sorted(a for a, n in self._lora_running.items() if n > 0))
        waiting = ",".join(sorted(a for a, n in self._lora_waiting.items() if n > 0))
        series = self._metrics.lora_info.labels(self._max_lora, running, waiting)
        series.set(int(time.time()))

    def prefix_lookup(self, queried_tokens: int, hit_tokens: int) -> None:
        model = self._model
        self._metrics.prefix_queries.labels(model).inc(queried_tokens)
        self._metrics.prefix_hits.labels(model).inc(hit_tokens)

    def _record_end(self, seq: Sequence, reason: str, generated: int) -> None:
        # Runs once per sequence on the request path: observations are inlined (bisect and
        # two additions each) rather than made through _observe calls.
        success = self._success.get(reason)
        if success is None:
            success = self._metrics.request_success.labels(self._model, reason)
            self._success[reason] = success
        success.value += 1
        prompt = seq.prompt_tokens
        hist = self._prompt_hist
        hist.counts[bisect_left(hist.bounds, prompt)] += 1
        hist.sum += prompt
        if seq.t_first_token is not None:
            self._prompt_total.value += prompt  # its prefill did happen
        self._generation_total.value += generated
        hist = self._generation_hist
        hist.counts[bisect_left(hist.bounds, generated)] += 1
        hist.sum += generated
        max_tokens = seq.request.max_tokens
        if max_tokens is not None:
            hist = self._params_max_tokens
            hist.counts[bisect_left(hist.bounds, max_tokens)] += 1
            hist.sum += max_tokens
        end = seq.t_finished
        if end is None:
            return
        _observe(self._e2e, end - seq.t_submitted)
        started = seq.t_started
        if started is None:
            return
        _observe(self._inference, end - started)
        first = seq.t_first_token
        if first is None:
            return
        decode = end - first
        _observe(self._decode, decode)
        gaps = generated - 1
        _observe(self._request_tpot, decode / gaps if gaps > 0 else 0.0)
