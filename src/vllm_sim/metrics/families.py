"""Counter, gauge, histogram and summary families with labelled series, cheap to update.

The request path holds direct references to the series it updates, so an observation is
a bisect and two additions: no label lookup, no lock (one event loop owns every series).
prometheus_client's own Counter.inc and Histogram.observe take a lock and cost about ten
times as much (README.md, "Metrics"), so the series are ours: at scrape time `collect()`
turns each family into prometheus_client's metric family, which prometheus_client then
prints exactly as vLLM's (HELP, TYPE, `_created` samples, number format, label order).

Some series are *derived*: computed when scraped from series the request path keeps
anyway (`DerivedValue`, `DerivedHistogram`), so that an observation which only restates
another one costs the request path nothing.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.utils import floatToGoString

# How vLLM's client library prints an `le` bound ("0.001", "1.0", "+Inf"); it has no
# annotations, hence the typed alias.
format_bound: Callable[[float], str] = floatToGoString

LabelValues = tuple[str, ...]
Snapshot = tuple[Sequence[int], float]  # per-bucket (not cumulative) counts, +Inf last; sum


class ValueSeries:
    """One counter or gauge series, and when it was created (a counter's `_created`)."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def set(self, value: float) -> None:
        self.value = value


class DerivedValue:
    """A counter series computed at scrape time from others."""

    __slots__ = ("_read", "created")

    def __init__(self, read: Callable[[], float]) -> None:
        self._read = read
        self.created = time.time()

    @property
    def value(self) -> float:
        return self._read()


class HistogramSeries:
    """Per-bucket (not cumulative) counts, the last one being +Inf, and the sum."""

    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times

    @property
    def count(self) -> int:
        return sum(self.counts)

    def snapshot(self) -> Snapshot:
        return self.counts, self.sum


class DerivedHistogram:
    """A histogram series computed at scrape time from others."""

    __slots__ = ("_read", "bounds", "created")

    def __init__(self, bounds: tuple[float, ...], read: Callable[[], Snapshot]) -> None:
        self.bounds = bounds
        self._read = read
        self.created = time.time()

    def snapshot(self) -> Snapshot:
        return self._read()


class SummarySeries:
    """A summary without quantiles (the instrumentator's): a count and a sum."""

    __slots__ = ("count", "created", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.created = time.time()


class Family(Protocol):
    """One metric family: prometheus_client's view of it, or None when it has no series."""

    name: str

    def collect(self) -> Metric | None: ...


class _Family:
    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str],
        shown_empty: bool = False,
    ) -> None:
        self.name = name
        self.help = help_text
        self.label_names = tuple(label_names)
        # A family with no series is left out of the exposition, except where vLLM's
        # client library would show it (HELP and TYPE alone): its labelled HTTP families.
        self.shown_empty = shown_empty

    def _check(self, values: LabelValues) -> None:
        if len(values) != len(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {values}")

    def _labels(self, values: LabelValues) -> dict[str, str]:
        return dict(zip(self.label_names, values, strict=True))


class _ValueFamily(_Family):
    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str],
        shown_empty: bool = False,
    ) -> None:
        super().__init__(name, help_text, label_names, shown_empty)
        self.series: dict[LabelValues, ValueSeries | DerivedValue] = {}

    def labels(self, *values: str) -> ValueSeries:
        """The series of these label values, created at 0 on first use."""
        series = self.series.get(values)
        if series is None:
            self._check(values)
            series = self.series[values] = ValueSeries()
        if not isinstance(series, ValueSeries):
            raise TypeError(f"{self.name}{values} is derived: it cannot be written")
        return series

    def ensure(self, *values: str) -> None:
        """Creates the series at 0 unless it exists (plain or derived)."""
        if values not in self.series:
            self.labels(*values)

    def derive(self, values: LabelValues, read: Callable[[], float]) -> None:
        self._check(values)
        self.series[values] = DerivedValue(read)

    def remove(self, *values: str) -> None:
        self.series.pop(values, None)

    def clear(self) -> None:
        self.series.clear()


class Counter(_ValueFamily):
    """Exposed as `<name>_total` with `<name>_created`, as vLLM's client library does."""

    def collect(self) -> Metric | None:
        if not self.series and not self.shown_empty:
            return None
        family = CounterMetricFamily(self.name, self.help, labels=self.label_names)
        for values, series in self.series.items():
            family.add_metric(values, series.value, created=series.created)
        return family


class Gauge(_ValueFamily):
    def collect(self) -> Metric | None:
        if not self.series and not self.shown_empty:
            return None
        family = GaugeMetricFamily(self.name, self.help, labels=self.label_names)
        for values, series in self.series.items():
            family.add_metric(values, series.value)
        return family


class CallbackGauge(_Family):
    """A gauge whose samples are read from live state at scrape time.

    Reading at scrape time costs the request path nothing and never drifts from the state.
    """

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str],
        samples: Callable[[], Iterable[tuple[LabelValues, float]]],
    ) -> None:
        super().__init__(name, help_text, label_names)
        self.samples = samples

    def collect(self) -> Metric | None:
        rows = list(self.samples())
        if not rows:
            return None
        family = GaugeMetricFamily(self.name, self.help, labels=self.label_names)
        for values, value in rows:
            family.add_metric(values, value)
        return family


class Histogram(_Family):
    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str],
        bounds: Sequence[float],
        shown_empty: bool = False,
    ) -> None:
        super().__init__(name, help_text, label_names, shown_empty)
        # Kept as given: an int observation bisects int bounds faster than float ones.
        self.bounds = tuple(bounds)
        self._le = [format_bound(b) for b in self.bounds] + ["+Inf"]
        self.series: dict[LabelValues, HistogramSeries | DerivedHistogram] = {}

    def labels(self, *values: str) -> HistogramSeries:
        """The series of these label values, created empty on first use."""
        series = self.series.get(values)
        if series is None:
            self._check(values)
            series = self.series[values] = HistogramSeries(self.bounds)
        if not isinstance(series, HistogramSeries):
            raise TypeError(f"{self.name}{values} is derived: it cannot be written")
        return series

    def ensure(self, *values: str) -> None:
        """Creates the series empty unless it exists (plain or derived)."""
        if values not in self.series:
            self.labels(*values)

    def share(self, values: LabelValues, series: HistogramSeries | DerivedHistogram) -> None:
        """Exposes `series` (of a family with the same buckets) under this family too."""
        self._check(values)
        if series.bounds != self.bounds:
            raise ValueError(f"{self.name}: a shared series must have the same buckets")
        self.series[values] = series

    def remove(self, *values: str) -> None:
        self.series.pop(values, None)

    def clear(self) -> None:
        self.series.clear()

    def collect(self) -> Metric | None:
        if not self.series and not self.shown_empty:
            return None
        family = HistogramMetricFamily(self.name, self.help, labels=self.label_names)
        for values, series in self.series.items():
            counts, total = series.snapshot()
            running = 0
            buckets: list[tuple[str, float]] = []
            for le, count in zip(self._le, counts, strict=True):
                running += count
                buckets.append((le, float(running)))
            family.add_metric(values, buckets, total)
            family.add_sample(f"{self.name}_created", self._labels(values), series.created)
        return family


class Summary(_Family):
    """A summary without quantiles: `_count`, `_sum` and `_created`."""

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str],
        shown_empty: bool = False,
    ) -> None:
        super().__init__(name, help_text, label_names, shown_empty)
        self.series: dict[LabelValues, SummarySeries] = {}

    def labels(self, *values: str) -> SummarySeries:
        series = self.series.get(values)
        if series is None:
            self._check(values)
            series = self.series[values] = SummarySeries()
        return series

    def collect(self) -> Metric | None:
        if not self.series and not self.shown_empty:
            return None
        family = SummaryMetricFamily(self.name, self.help, labels=self.label_names)
        for values, series in self.series.items():
            family.add_metric(values, series.count, series.sum)
            family.add_sample(f"{self.name}_created", self._labels(values), series.created)
        return family
