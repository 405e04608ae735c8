"""Fake metrics: configured values and generated gauges on /metrics.

The driver owns every fake-driven family. Startup builds them all from the config; an update
rebuilds only what the merged config changed, because the config layer already folds the
update rules (replace vs add, derived totals, success replaced whole) into the merged object,
and real traffic never writes these families in fake mode, so "add to what exists" is "set".
Leaving unchanged fields alone keeps running generators and the default LoRA timestamp steady.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator

from vllm_sim.config.fake_metrics import FakeGauge, FakeGenerator, FakeLora, FakeMetrics
from vllm_sim.metrics.catalogue import VllmMetrics
from vllm_sim.metrics.families import Counter, Gauge, Histogram

_GAUGE_ATTRS = ("running_requests", "waiting_requests", "kv_cache_usage")
_RUNNING, _WAITING, _KV = range(3)


def _oscillate(start: float, end: float, period: float, t: float) -> float:
    return (start + end) / 2 + (end - start) / 2 * math.sin(2 * math.pi * t / period)


def _ramp(start: float, end: float, period: float, t: float) -> float:
    return end if t >= period else start + t / period * (end - start)


def _rampreset(start: float, end: float, period: float, t: float) -> float:
    return start + (t % period) / period * (end - start)


def _squarewave(start: float, end: float, period: float, t: float) -> float:
    return start if t % period < period / 2 else end


_FUNCTIONS: dict[str, Callable[[float, float, float, float], float]] = {
    "oscillate": _oscillate,
    "ramp": _ramp,
    "rampreset": _rampreset,
    "squarewave": _squarewave,
}


def evaluate(generator: FakeGenerator, t: float) -> float:
    """The generator's value `t` seconds after the generator clock started."""
    return _FUNCTIONS[generator.function](
        generator.start, generator.end, generator.period_seconds, t
    )


def _samples(bounds: tuple[float, ...], counts: tuple[int, ...]) -> Iterator[tuple[float, int]]:
    """(value, times) to observe: bucket i at its bound, +Inf and extra entries past the last."""
    if not bounds:
        return  # the reference skips a histogram with no finite bucket
    beyond = bounds[-1] + 1
    for index, count in enumerate(counts):
        if count:
            yield (bounds[index] if index < len(bounds) else beyond), count


def _derived_total(bounds: tuple[float, ...], counts: tuple[int, ...] | None) -> int | None:
    """The token counter an array implies; None (counter absent) for a missing or empty one."""
    if not counts or not bounds:
        return None
    return math.trunc(sum(value * times for value, times in _samples(bounds, counts)))


class FakeMetricsDriver:
    """Applies fake metrics to one engine's families and moves the generated gauges."""

    def __init__(
        self,
        metrics: VllmMetrics,
        gauges: tuple[Gauge, Gauge, Gauge],
        fake: FakeMetrics,
        max_loras: int,
        refresh_interval: float,
        set_load_running: Callable[[int | None], None],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._metrics = metrics
        self._labels = metrics.labels  # (model_name, engine) of every fake series
        self._gauges = gauges
        self._max_loras = str(max_loras)
        self._interval = refresh_interval
        self._set_load_running = set_load_running
        self._clock = clock
        self._wall = wall
        self._generators: dict[int, FakeGenerator] = {}
        self._clock_start: float | None = None
        self._fake = fake
        self._apply(fake, None)

    def update(self, fake: FakeMetrics) -> None:
        """Show the merged config `fake` after a successful runtime update."""
        old, self._fake = self._fake, fake
        self._apply(fake, old)

    def refresh(self) -> None:
        """Evaluate every active generator on the shared generator clock."""
        if self._clock_start is None:
            return
        t = self._clock() - self._clock_start
        for slot, generator in self._generators.items():
            self._show_generated(slot, evaluate(generator, t))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.refresh()

    def _apply(self, new: FakeMetrics, old: FakeMetrics | None) -> None:
        def changed(*attrs: str) -> bool:
            return old is None or any(getattr(new, a) != getattr(old, a) for a in attrs)

        self._apply_gauges(new, changed)
        for attr, families in self._histograms().items():
            if changed(attr):
                for family in families:
                    self._fill_histogram(family, getattr(new, attr))
        for array, total, counter, histogram in self._token_counters():
            if changed(array, total):
                derived = _derived_total(histogram.bounds, getattr(new, array))
                explicit: int | None = getattr(new, total)
                self._set_counter(counter, derived if explicit is None else explicit)
        if changed("request_success_total"):
            self._set_success(new.request_success_total)
        if changed("prefix_cache_hits"):
            self._set_counter(self._metrics.prefix_hits, new.prefix_cache_hits)
        if changed("prefix_cache_queries"):
            self._set_counter(self._metrics.prefix_queries, new.prefix_cache_queries)
        if changed("loras"):
            self._set_loras(new.loras)

    # Gauges and the generator clock

    def _apply_gauges(self, new: FakeMetrics, changed: Callable[[str], bool]) -> None:
        had_generators = bool(self._generators)
        for slot, attr in enumerate(_GAUGE_ATTRS):
            if changed(attr):
                self._set_gauge(slot, getattr(new, attr))
        # Like the reference's ticker: the clock runs while at least one generator exists,
        # so a generator swapped within one update keeps the clock going.
        if not self._generators:
            self._clock_start = None
        elif not had_generators:
            self._clock_start = self._clock()

    def _set_gauge(self, slot: int, value: FakeGauge | None) -> None:
        family = self._gauges[slot]
        self._generators.pop(slot, None)
        load: int | None = None
        if value is None:
            family.clear()
        elif isinstance(value, FakeGenerator):
            self._generators[slot] = value
            start = evaluate(value, 0.0)
            # The exact start value; from the first refresh on, counts are truncated to whole
            # requests (see _show_generated).
            family.labels(*self._labels).set(start)
            load = math.trunc(start)
        else:
            family.labels(*self._labels).set(value)
        if slot == _RUNNING:
            # Only generated running values feed the engine's load factor, so a generator can
            # simulate changing load; a fixed or absent value leaves the real running count.
            self._set_load_running(load)

    def _show_generated(self, slot: int, value: float) -> None:
        if slot == _KV:
            self._gauges[slot].labels(*self._labels).set(value)
            return
        count = math.trunc(value)
        self._gauges[slot].labels(*self._labels).set(float(count))
        if slot == _RUNNING:
            self._set_load_running(count)

    # Histograms and counters

    def _histograms(self) -> dict[str, tuple[Histogram, ...]]:
        m = self._metrics
        return {
            "ttft_buckets_values": (m.ttft,),
            "tpot_buckets_values": (m.tpot, m.itl),
            "request_tpot_buckets_values": (m.request_tpot,),
            "e2erl_buckets_values": (m.e2e,),
            "queue_time_buckets_values": (m.queue_time,),
            "inf_time_buckets_values": (m.inference_time,),
            "prefill_time_buckets_values": (m.prefill_time,),
            "decode_time_buckets_values": (m.decode_time,),
            "request_prompt_tokens": (m.prompt_tokens_hist,),
            "request_generation_tokens": (m.generation_tokens_hist,),
            "request_params_max_tokens": (m.params_max_tokens,),
            "request_max_generation_tokens": (m.max_generation_tokens,),
        }

    def _token_counters(self) -> tuple[tuple[str, str, Counter, Histogram], ...]:
        m = self._metrics
        return (
            ("request_prompt_tokens", "total_prompt_tokens", m.prompt_tokens, m.prompt_tokens_hist),
            (
                "request_generation_tokens",
                "total_generation_tokens",
                m.generation_tokens,
                m.generation_tokens_hist,
            ),
        )

    def _fill_histogram(self, family: Histogram, counts: tuple[int, ...] | None) -> None:
        family.clear()
        samples = list(_samples(family.bounds, counts or ()))
        if not samples:
            return  # an empty or all-zero array leaves the family absent
        series = family.labels(*self._labels)
        for value, times in samples:
            series.observe(value, times)

    def _set_counter(self, counter: Counter, value: int | None) -> None:
        counter.clear()
        if value is not None:
            counter.labels(*self._labels).set(float(value))

    def _set_success(self, counts: tuple[tuple[str, int], ...] | None) -> None:
        family = self._metrics.request_success
        family.clear()
        for reason, count in counts or ():
            family.labels(*self._labels, reason).set(float(count))

    def _set_loras(self, loras: tuple[FakeLora, ...] | None) -> None:
        family = self._metrics.lora_info
        family.clear()
        for lora in loras or ():
            family.labels(self._max_loras, lora.running, lora.waiting).set(lora.timestamp)
        if not loras:
            # Whole seconds, as real mode and the reference stamp this series.
            family.labels(self._max_loras, "", "").set(float(math.trunc(self._wall())))
