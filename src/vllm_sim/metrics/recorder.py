"""Records vLLM's request metrics from the engine's lifecycle events and the front end's
writes.

Every observation is what happened to the sequence: the measured times between its
transitions. Nothing is read from the config. What the client sees is taken where the
client's bytes are written (output_written), so that a process that writes later than its
engine released (one that cannot keep up with its load) shows it in the latencies: a
streamed answer's TTFT, inter-token gaps and end-to-end latency at the writes of its
chunks, a whole answer's end-to-end latency at its one write, and each write's lag behind
the release in the simulator's own gauges (lag.py). The engine's phases (queue, prefill,
decode, inference and the per-request TPOT) stay on the engine's clock, as vLLM takes them
from its engine core's timestamps. A request no write is reported for (a what-if replay,
embeddings) is observed at the release, as the engine's events come.

Observations are made at once (holding sequences for a later batch would keep them alive
into older GC generations, which costs more than it saves), on series looked up once.
Families that restate what another family already holds for the common request (n = 1, no
preemption, no cached prompt) are derived from it when scraped, so that request pays
nothing for them: see `_derive`.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter

from vllm_sim.engine.finish import Finish
from vllm_sim.engine.observer import EngineObserver
from vllm_sim.engine.request import Delivery, GenerationRequest
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.metrics.catalogue import SpecDecodeFamilies, VllmMetrics
from vllm_sim.metrics.families import (
    DerivedHistogram,
    HistogramSeries,
    LabelValues,
    Snapshot,
    ValueSeries,
)
from vllm_sim.metrics.lag import OutputLag, write_lag

ABORT = "abort"
# vLLM's engine ends a tool-calling turn as `stop`; the API layer alone says `tool_calls`.
_ENGINE_REASON = {Finish.TOOL_CALLS: Finish.STOP}
# The simulator's only admission cap (--max-waiting-queue-length) counts requests.
_QUEUE_CAP = "max_num_queued_reqs"

ParentKey = tuple[RequestStream, int]  # a request's choices of one prompt: vLLM's parent
# Read once per token: module constants rather than the enum's attributes.
_STREAM = Delivery.STREAM
_RELEASED = Delivery.RELEASED


def _observe(series: HistogramSeries, value: float) -> None:
    series.counts[bisect_left(series.bounds, value)] += 1
    series.sum += value


class _SpecDecodeSeries:
    """One engine's speculative-decoding counters, looked up once."""

    def __init__(self, families: SpecDecodeFamilies, labels: LabelValues) -> None:
        self.drafts = families.drafts.labels(*labels)
        self.draft_tokens = families.draft_tokens.labels(*labels)
        self.accepted = families.accepted.labels(*labels)
        self.per_position: list[ValueSeries] = [
            families.accepted_per_pos.labels(*labels, str(position))
            for position in range(families.positions)
        ]

    def record(self, drafts: int, accepted: int) -> None:
        """One draft of `drafts` tokens, its first `accepted` accepted."""
        self.drafts.value += 1
        self.draft_tokens.value += drafts
        self.accepted.value += accepted
        per_position = self.per_position
        for position in range(accepted):
            per_position[position].value += 1


class MetricsRecorder(EngineObserver):
    """An EngineObserver that keeps the request families of a VllmMetrics current."""

    def __init__(
        self, metrics: VllmMetrics, max_loras: int = 1, lag: OutputLag | None = None
    ) -> None:
        labels = metrics.labels
        self.lag = OutputLag() if lag is None else lag
        self._max_lora = str(max_loras)
        self._lora_waiting: Counter[str] = Counter()
        self._lora_running: Counter[str] = Counter()
        self._model = metrics.model_name
        self._max_model_len = metrics.max_model_len
        self._metrics = metrics
        self._itl = metrics.itl.labels(*labels)
        # Each sub-request has one choice and every gap is both a TPOT and an ITL sample,
        # so these families always hold the same series: one object serves both.
        metrics.tpot.share(labels, self._itl)
        self._generation_hist = metrics.generation_tokens_hist.labels(*labels)
        self._prompt_total = metrics.prompt_tokens.labels(*labels)
        self._generation_total = metrics.generation_tokens.labels(*labels)
        self._prompt_hist = metrics.prompt_tokens_hist.labels(*labels)
        self._params_max_tokens = metrics.params_max_tokens.labels(*labels)
        self._queue = metrics.queue_time.labels(*labels)
        self._ttft = metrics.ttft.labels(*labels)
        self._prefill = metrics.prefill_time.labels(*labels)
        self._e2e = metrics.e2e.labels(*labels)
        self._inference = metrics.inference_time.labels(*labels)
        self._decode = metrics.decode_time.labels(*labels)
        self._request_tpot = metrics.request_tpot.labels(*labels)
        self._iteration = metrics.iteration_tokens.labels(*labels)
        self._success = {
            reason: metrics.request_success.labels(*labels, reason)
            for reason in (Finish.STOP, Finish.LENGTH, ABORT)
        }
        spec = metrics.spec_decode
        self._spec = None if spec is None else _SpecDecodeSeries(spec, labels)
        self._cache_series(metrics)
        self._derive(metrics)

    def _cache_series(self, metrics: VllmMetrics) -> None:
        labels = metrics.labels
        self._prefix_queries = metrics.prefix_queries.labels(*labels)
        self._prefix_hits = metrics.prefix_hits.labels(*labels)
        self._external_queries = metrics.external_prefix_queries.labels(*labels)
        self._external_hits = metrics.external_prefix_hits.labels(*labels)
        self._host_hits = 0  # of the external hits, those the CPU offloading tier supplied
        self._prompt_cached = metrics.prompt_tokens_cached.labels(*labels)
        # Prompt tokens whose KV a connector supplied (counted with prompt_tokens).
        self._prompt_external = metrics.prompt_tokens_by_source.labels(
            *labels, "external_kv_transfer"
        )
        self._preemptions = metrics.num_preemptions.labels(*labels)
        self._rejections = metrics.admission_rejections.labels(self._model, _QUEUE_CAP)

    def _derive(self, metrics: VllmMetrics) -> None:
        """Series computed at scrape time. The request path keeps only what differs from
        the common request: the requests with n > 1 (params_n, max generation), those
        preempted (num_preemptions), those with cached prompt tokens (KV computed)."""
        labels = metrics.labels
        self._ended_in_parents = 0  # ended choices of requests with n > 1
        self._parents: dict[ParentKey, list[int]] = {}  # unfinished n > 1: tokens per choice
        self._params_n_multi = HistogramSeries(metrics.params_n.bounds)
        self._not_longest = HistogramSeries(metrics.generation_tokens_hist.bounds)
        self._preempted_hist = HistogramSeries(metrics.num_preemptions_hist.bounds)
        self._preempted: dict[int, int] = {}  # sequence uid -> preemptions, while it runs
        self._kv_shift = HistogramSeries(metrics.prompt_tokens_hist.bounds)
        self._external: dict[int, int] = {}  # sequence uid -> tokens a connector supplied
        for family, read in (
            (metrics.params_n, self._params_n),
            (metrics.max_generation_tokens, self._max_generation),
            (metrics.num_preemptions_hist, self._num_preemptions),
            (metrics.prefill_kv_computed, self._prefill_kv_computed),
        ):
            family.share(labels, DerivedHistogram(family.bounds, read))
        by_source = metrics.prompt_tokens_by_source
        by_source.derive(
            (*labels, "local_compute"), lambda: self._prompt_total.value - self._prompt_cached.value
        )
        by_source.derive(
            (*labels, "local_cache_hit"),
            lambda: self._prompt_cached.value - self._prompt_external.value,
        )
        cached_by_source = metrics.prompt_tokens_cached_by_source
        # Counted at lookup: the local hits come from the device, the offloading connector's
        # from host memory, a P/D connector's from a peer.
        cached_by_source.derive((*labels, "device"), lambda: self._prefix_hits.value)
        cached_by_source.derive((*labels, "host"), lambda: self._host_hits)
        cached_by_source.derive(
            (*labels, "p2p"), lambda: self._external_hits.value - self._host_hits
        )

    # ----------------------------------------------------------------- derived families
    def _params_n(self) -> Snapshot:
        """Each request with n = 1 is one observation of 1: every ended choice not in a
        request with n > 1. The others are observed when their last choice ends."""
        single = self._generation_hist.count - self._ended_in_parents
        counts = list(self._params_n_multi.counts)
        counts[0] += single
        return counts, self._params_n_multi.sum + single

    def _max_generation(self) -> Snapshot:
        """The generation-token observations, less every choice of a request with n > 1
        that is not its longest (vLLM observes the longest choice, once the last ended)."""
        counts = list(self._generation_hist.counts)
        total = self._generation_hist.sum - self._not_longest.sum
        for index, count in enumerate(self._not_longest.counts):
            counts[index] -= count
        bounds = self._generation_hist.bounds
        for lengths in self._parents.values():  # their longest is not known yet
            for length in lengths:
                counts[bisect_left(bounds, length)] -= 1
                total -= length
        return counts, total

    def _num_preemptions(self) -> Snapshot:
        """Every ended choice never preempted is an observation of 0."""
        preempted = self._preempted_hist
        counts = list(preempted.counts)
        counts[0] += self._generation_hist.count - preempted.count
        return counts, preempted.sum

    def _prefill_kv_computed(self) -> Snapshot:
        """The prompt-token observations, each moved down by its cached tokens."""
        prompt, shift = self._prompt_hist, self._kv_shift
        counts = [a + b for a, b in zip(prompt.counts, shift.counts, strict=True)]
        return counts, prompt.sum - shift.sum

    # ----------------------------------------------------------------- engine events
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
        # Once per sequence: observed inline (a bisect and two additions each). From the
        # request's arrival, as the client sees it: queueing counts. A streamed answer's
        # is taken when its first token is written (output_written).
        first = seq.t_first_token
        if first is None:
            return
        if seq.request.delivery is not _STREAM:
            ttft = first - seq.t_submitted
            hist = self._ttft
            hist.counts[bisect_left(hist.bounds, ttft)] += 1
            hist.sum += ttft
        if seq.t_started is not None:
            prefill = first - seq.t_started
            hist = self._prefill
            hist.counts[bisect_left(hist.bounds, prefill)] += 1
            hist.sum += prefill

    def inter_tokens(self, seq: Sequence, delay: float, count: int) -> None:
        if seq.request.delivery is _STREAM:
            # Observed as the client gets them: one gap per gap the engine made, whatever
            # number of tokens each carried (a speculative step's burst is one gap).
            seq.gaps_unwritten += count
            return
        itl = self._itl
        itl.counts[bisect_left(itl.bounds, delay)] += count
        itl.sum += delay * count

    def output_written(
        self, seq: Sequence, start: int, end: int, finished: bool, now: float
    ) -> None:
        lag = write_lag(seq, start, end, finished, now)
        if lag < 0.0:
            return  # neither a token nor an end: nothing was written of it
        self.lag.sample(lag, now)
        request = seq.request
        if request.delivery is _STREAM:
            if start == 0 and seq.t_first_token is not None:
                # Its first piece (an answer with no token: just its end) is its TTFT.
                ttft = now - seq.t_submitted
                hist = self._ttft
                hist.counts[bisect_left(hist.bounds, ttft)] += 1
                hist.sum += ttft
            if seq.gaps_unwritten and end > start:
                self._written_gaps(seq, start, end, now)
            seq.t_written = now
        # The end as the client got it, unless observed when the engine ended it: a
        # sequence ended by the server (pause) is observed there, as one its client left.
        if finished and seq.finish_reason != ABORT and seq.t_finished is not None:
            value = now - seq.t_submitted
            hist = self._e2e
            hist.counts[bisect_left(hist.bounds, value)] += 1
            hist.sum += value

    def _written_gaps(self, seq: Sequence, start: int, end: int, now: float) -> None:
        """The gaps the engine made among tokens [start, end), as the client got them: the
        first since the previous write (none if this write carries the first token), the
        others 0, having come in the same write. As many as the engine made (a tool call's
        first token and a speculative burst's tokens follow without a gap of their own),
        and no more than the tokens written: a slice of a long tail leaves the rest for the
        next slice."""
        count = end - (start if start > 0 else 1)
        pending = seq.gaps_unwritten
        if pending < count:
            count = pending
        if count <= 0:
            return
        seq.gaps_unwritten = pending - count
        itl = self._itl
        if start > 0:
            gap = now - seq.t_written
            itl.counts[bisect_left(itl.bounds, gap)] += 1
            itl.sum += gap
            count -= 1
        # Every bound is positive: a gap of 0 is in the first bucket.
        itl.counts[0] += count

    def drafts_verified(self, seq: Sequence, drafts: int, accepted: int) -> None:
        spec = self._spec
        if spec is not None:  # an engine decodes speculatively only with its families
            spec.record(drafts, accepted)

    def engine_step(self, tokens: int) -> None:
        hist = self._iteration
        hist.counts[bisect_left(hist.bounds, tokens)] += 1
        hist.sum += tokens

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
        # Its parent never ends: the choices that did are taken out of max_generation too.
        for length in self._parents.pop((seq.stream, seq.prompt_index), ()):
            _observe(self._not_longest, length)
        self._preempted.pop(seq.uid, None)
        self._external.pop(seq.uid, None)

    def sequence_preempted(self, seq: Sequence) -> None:
        self._preemptions.value += 1
        self._preempted[seq.uid] = self._preempted.get(seq.uid, 0) + 1

    def admission_rejected(self, request: GenerationRequest) -> None:
        self._rejections.value += 1  # once per request, whatever its n (as vLLM)

    def prefix_lookup(self, queried_tokens: int, hit_tokens: int) -> None:
        self._prefix_queries.value += queried_tokens
        self._prefix_hits.value += hit_tokens

    def external_prefix_lookup(self, seq: Sequence, queried_tokens: int, hit_tokens: int) -> None:
        self._external_queries.value += queried_tokens
        self._external_hits.value += hit_tokens
        if hit_tokens:
            self._external[seq.uid] = hit_tokens

    def offloaded_prefix_lookup(self, seq: Sequence, queried_tokens: int, hit_tokens: int) -> None:
        self.external_prefix_lookup(seq, queried_tokens, hit_tokens)
        self._host_hits += hit_tokens

    # ----------------------------------------------------------------- LoRA
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

    # ----------------------------------------------------------------- the end
    def _record_end(self, seq: Sequence, reason: str, generated: int) -> None:
        # Runs once per sequence on the request path: observations are inlined (bisect and
        # two additions each) rather than made through _observe calls; the rare cases
        # (cached prompt, n > 1, preempted) are the calls.
        success = self._success.get(reason)
        if success is None:
            success = self._metrics.request_success.labels(*self._metrics.labels, reason)
            self._success[reason] = success
        success.value += 1
        prompt = seq.prompt_tokens
        hist = self._prompt_hist
        hist.counts[bisect_left(hist.bounds, prompt)] += 1
        hist.sum += prompt
        if seq.t_first_token is not None:
            self._prompt_total.value += prompt  # its prefill did happen
        if seq.cached_tokens:
            self._cached_prompt(seq, prompt)
        self._generation_total.value += generated
        hist = self._generation_hist
        hist.counts[bisect_left(hist.bounds, generated)] += 1
        hist.sum += generated
        request = seq.request
        if request.n != 1:
            self._choice_ended(seq, generated)
        if self._preempted:
            self._preemptions_ended(seq)
        # vLLM's effective max_tokens: the client's, else the room the context leaves.
        max_tokens = request.max_tokens
        if max_tokens is None:
            max_tokens = self._max_model_len - prompt
        if max_tokens:  # vLLM skips 0 (an echo that generates nothing)
            hist = self._params_max_tokens
            hist.counts[bisect_left(hist.bounds, max_tokens)] += 1
            hist.sum += max_tokens
        if seq.t_finished is not None:
            # Its end-to-end latency when the client gets its end (output_written), unless
            # no write is reported or the client left (or the server ended it).
            e2e = reason == ABORT or request.delivery is _RELEASED
            self._record_times(seq, seq.t_finished, generated, e2e)

    def _record_times(self, seq: Sequence, end: float, generated: int, e2e: bool) -> None:
        """The phase times of an ended sequence, observed inline (bisect and two additions
        each): this runs once per sequence."""
        if e2e:
            value = end - seq.t_submitted
            hist = self._e2e
            hist.counts[bisect_left(hist.bounds, value)] += 1
            hist.sum += value
        started = seq.t_started
        if started is None:
            return
        value = end - started
        hist = self._inference
        hist.counts[bisect_left(hist.bounds, value)] += 1
        hist.sum += value
        first = seq.t_first_token
        if first is None:
            return
        decode = end - first
        hist = self._decode
        hist.counts[bisect_left(hist.bounds, decode)] += 1
        hist.sum += decode
        gaps = generated - 1
        value = decode / gaps if gaps > 0 else 0.0
        hist = self._request_tpot
        hist.counts[bisect_left(hist.bounds, value)] += 1
        hist.sum += value

    def _cached_prompt(self, seq: Sequence, prompt: int) -> None:
        """A prompt with cached tokens: its KV-computed observation moves down, and (once
        prefilled) its cached tokens count, by source."""
        cached = seq.cached_tokens
        shift = self._kv_shift
        shift.counts[bisect_left(shift.bounds, prompt)] -= 1
        shift.counts[bisect_left(shift.bounds, prompt - cached)] += 1
        shift.sum += cached
        external = self._external.pop(seq.uid, 0) if self._external else 0
        if seq.t_first_token is not None:
            self._prompt_cached.value += cached
            self._prompt_external.value += external

    def _choice_ended(self, seq: Sequence, generated: int) -> None:
        """One choice of a request with n > 1 ended; the last one observes n and the
        longest choice's tokens (the others are taken out of max_generation)."""
        n = seq.request.n
        self._ended_in_parents += 1
        key = (seq.stream, seq.prompt_index)
        lengths = self._parents.setdefault(key, [])
        lengths.append(generated)
        if len(lengths) < n:
            return
        del self._parents[key]
        _observe(self._params_n_multi, n)
        lengths.remove(max(lengths))
        for length in lengths:
            _observe(self._not_longest, length)

    def _preemptions_ended(self, seq: Sequence) -> None:
        count = self._preempted.pop(seq.uid, 0)
        if count:
            _observe(self._preempted_hist, count)
