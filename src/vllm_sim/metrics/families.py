"""Counter, gauge and histogram families with labelled series, cheap to update.

The request path holds direct references to the series it updates, so an observation is
a bisect and two additions: no label lookup, no lock (one event loop owns the registry).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

from vllm_sim.metrics.exposition import format_value, label_text

LabelValues = tuple[str, ...]


def _series_name(name: str, names: tuple[str, ...], values: LabelValues, extra: str = "") -> str:
    pairs = label_text(names, values)
    if extra:
        pairs = f"{pairs},{extra}" if pairs else extra
    return f"{name}{{{pairs}}}" if pairs else name


class _Family:
    kind = ""

    def __init__(self, name: str, help_text: str, label_names: Sequence[str]) -> None:
        self.name = name
        self.help = help_text
        self.label_names = tuple(label_names)

    def exposed_name(self) -> str:
        return self.name

    def _header(self, out: list[str]) -> None:
        name = self.exposed_name()
        out.append(f"# HELP {name} {self.help}")
        out.append(f"# TYPE {name} {self.kind}")


S = TypeVar("S")


class _SeriesFamily(_Family, Generic[S]):
    """A family whose series are created on first use of their label values."""

    def __init__(self, name: str, help_text: str, label_names: Sequence[str]) -> None:
        super().__init__(name, help_text, label_names)
        self.series: dict[LabelValues, S] = {}

    def _new_series(self) -> S:
        raise NotImplementedError

    def labels(self, *values: str) -> S:
        series = self.series.get(values)
        if series is None:
            if len(values) != len(self.label_names):
                raise ValueError(f"{self.name} takes labels {self.label_names}, got {values}")
            series = self.series[values] = self._new_series()
        return series

    def remove(self, *values: str) -> None:
        self.series.pop(values, None)

    def clear(self) -> None:
        self.series.clear()


class ValueSeries:
    """One counter or gauge series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def set(self, value: float) -> None:
        self.value = value


class _ValueFamily(_SeriesFamily[ValueSeries]):
    def _new_series(self) -> ValueSeries:
        return ValueSeries()

    def render(self, out: list[str]) -> None:
        if not self.series:
            return
        self._header(out)
        name = self.exposed_name()
        for values, series in self.series.items():
            out.append(
                f"{_series_name(name, self.label_names, values)} {format_value(series.value)}"
            )


class Counter(_ValueFamily):
    """Exposed as `<name>_total`, as vLLM's client library names counters."""

    kind = "counter"

    def exposed_name(self) -> str:
        return f"{self.name}_total"


class Gauge(_ValueFamily):
    kind = "gauge"


class CallbackGauge(_Family):
    """A gauge whose samples are read from live state at scrape time.

    Reading at scrape time costs the request path nothing and never drifts from the state.
    """

    kind = "gauge"

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str],
        samples: Callable[[], Iterable[tuple[LabelValues, float]]],
    ) -> None:
        super().__init__(name, help_text, label_names)
        self.samples = samples

    def render(self, out: list[str]) -> None:
        rows = list(self.samples())
        if not rows:
            return
        self._header(out)
        for values, value in rows:
            out.append(f"{_series_name(self.name, self.label_names, values)} {format_value(value)}")


class HistogramSeries:
    """Per-bucket (not cumulative) counts, the last one being +Inf, and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times

    @property
    def count(self) -> int:
        return sum(self.counts)


class Histogram(_SeriesFamily[HistogramSeries]):
    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, label_names: Sequence[str], bounds: Sequence[float]
    ) -> None:
        super().__init__(name, help_text, label_names)
        self.bounds = tuple(float(b) for b in bounds)
        self._le = [format_value(b) for b in self.bounds] + ["+Inf"]

    def _new_series(self) -> HistogramSeries:
        return HistogramSeries(self.bounds)

    def share(self, values: LabelValues, series: HistogramSeries) -> None:
        """Exposes `series` (of a family with the same buckets) under this family too."""
        if series.bounds != self.bounds:
            raise ValueError(f"{self.name}: a shared series must have the same buckets")
        self.series[values] = series

    def render(self, out: list[str]) -> None:
        if not self.series:
            return
        self._header(out)
        names = self.label_names
        for values, series in self.series.items():
            running = 0
            for le, count in zip(self._le, series.counts, strict=True):
                running += count
                head = _series_name(f"{self.name}_bucket", names, values, f'le="{le}"')
                out.append(f"{head} {format_value(running)}")
            out.append(
                f"{_series_name(self.name + '_count', names, values)} {format_value(running)}"
            )
            out.append(
                f"{_series_name(self.name + '_sum', names, values)} {format_value(series.sum)}"
            )
