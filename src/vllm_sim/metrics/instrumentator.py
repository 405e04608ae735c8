"""The HTTP families vLLM exposes through prometheus-fastapi-instrumentator.

vLLM runs the instrumentator with its defaults, excluding some handlers. What it records,
for every request that reaches the application (past vLLM's API-key and CORS layers):
- `handler`: the path template of the route that serves the request; a path no route
  serves, or a method its route does not take, is "none";
- `status`: grouped by its first digit ("2xx");
- request size: the request's Content-Length header (0 without one); response size: the
  answer's Content-Length header (0 for a stream, which has none);
- duration: from arrival until the answer's last byte is handed to the server.
Requests whose handler (or, with no route, whose path) a pattern of vLLM's exclusion list
finds record nothing: a regular-expression search, so `/health` also excludes `/health/ready`
and an unknown `/healthz`, and `/load` excludes `/v1/load_lora_adapter`.

The request path updates one `_Traffic` per (handler, method, status): its byte and second
sums, and its durations in the finer (highr) buckets, whose total is its request count. The
five families are summed from those when scraped: every low-resolution bound is also a
high-resolution one.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from vllm_sim.metrics.families import (
    Counter,
    Histogram,
    HistogramSeries,
    Summary,
)

EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
UNTEMPLATED = "none"
LATENCY_HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5,
    3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0,
)  # fmt: skip
LATENCY_LOWR_BUCKETS = (0.1, 0.5, 1.0)
_FASTEST = LATENCY_HIGHR_BUCKETS[0]
# For each low-resolution bucket, the high-resolution buckets it gathers (+Inf last).
_LOWR_ENDS = [LATENCY_HIGHR_BUCKETS.index(b) + 1 for b in LATENCY_LOWR_BUCKETS]
_LOWR_SLICES = list(
    zip([0, *_LOWR_ENDS], [*_LOWR_ENDS, len(LATENCY_HIGHR_BUCKETS) + 1], strict=True)
)

REQUESTS_HELP = "Total number of requests by method, status and handler."
SIZE_HELP = (
    "Content length of {} by handler. Only value of header is respected. Otherwise ignored. "
    "No percentile calculated. "
)
HIGHR_HELP = (
    "Latency with many buckets but no API specific labels. "
    "Made for more accurate percentile calculations. "
)
LOWR_HELP = (
    "Latency with only few buckets by handler. "
    "Made to be only used if aggregation by handler is important. "
)


class _Traffic:
    """What one (handler, method, status) has answered."""

    __slots__ = (
        "buckets",
        "created",
        "handler",
        "method",
        "request_bytes",
        "response_bytes",
        "seconds",
        "status",
    )

    def __init__(self, handler: str, method: str, status: int) -> None:
        self.handler = handler
        self.method = method
        self.status = status
        self.request_bytes = 0
        self.response_bytes = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(LATENCY_HIGHR_BUCKETS) + 1)
        self.created = time.time()


class HttpMetrics:
    """The instrumentator's families (a prometheus_client collector), and `record`, which the
    HTTP kernel calls once per answered request (injected by the server layer)."""

    def __init__(self) -> None:
        self._traffic: dict[tuple[str | None, str, int], _Traffic | None] = {}
        self._latest: dict[str | None, _Traffic] = {}  # per route, the last one it updated
        self._highr_created = time.time()

    def record(
        self,
        route: str | None,
        path: str,
        method: str,
        status: int,
        request_bytes: int,
        response_bytes: int,
        seconds: float,
    ) -> None:
        """One answered request: `route` is the template of the route that took it (None:
        no route, or not this method), `path` the path asked for."""
        if route is None and _excluded(path):
            return  # decided each time: unknown paths must not grow the table
        traffic = self._latest.get(route)
        if traffic is None or traffic.status != status or traffic.method != method:
            traffic = self._traffic_of(route, method, status)
            if traffic is None:
                return  # an excluded route
        traffic.request_bytes += request_bytes
        traffic.response_bytes += response_bytes
        traffic.seconds += seconds
        if seconds <= _FASTEST:
            traffic.buckets[0] += 1
        else:
            traffic.buckets[bisect_left(LATENCY_HIGHR_BUCKETS, seconds)] += 1

    def _traffic_of(self, route: str | None, method: str, status: int) -> _Traffic | None:
        """The traffic of (route, method, status), made on first use; None (remembered) for
        a route vLLM excludes."""
        key = (route, method, status)
        if key in self._traffic:
            traffic = self._traffic[key]
        elif route is not None and _excluded(route):
            traffic = self._traffic[key] = None
        else:
            handler = UNTEMPLATED if route is None else route
            traffic = self._traffic[key] = _Traffic(handler, method, status)
        if traffic is not None:
            self._latest[route] = traffic
        return traffic

    def collect(self) -> Iterator[Metric]:
        """The five families, in the instrumentator's order, summed from the traffic."""
        traffic = [t for t in self._traffic.values() if t is not None]
        # Labelled families are shown without series too, as the client library shows them.
        requests = Counter(
            "http_requests", REQUESTS_HELP, ("method", "status", "handler"), shown_empty=True
        )
        in_size = Summary(
            "http_request_size_bytes", SIZE_HELP.format("incoming requests"), ("handler",), True
        )
        out_size = Summary(
            "http_response_size_bytes", SIZE_HELP.format("outgoing responses"), ("handler",), True
        )
        highr = Histogram(
            "http_request_duration_highr_seconds", HIGHR_HELP, (), LATENCY_HIGHR_BUCKETS
        )
        lowr = Histogram(
            "http_request_duration_seconds",
            LOWR_HELP,
            ("method", "handler"),
            LATENCY_LOWR_BUCKETS,
            shown_empty=True,
        )
        everything = highr.labels()
        everything.created = self._highr_created
        for t in traffic:
            count = sum(t.buckets)  # each request is in one bucket
            series = requests.labels(t.method, f"{str(t.status)[0]}xx", t.handler)
            series.value += count
            series.created = min(series.created, t.created)
            for summary, size in ((in_size, t.request_bytes), (out_size, t.response_bytes)):
                entry = summary.labels(t.handler)
                entry.count += count
                entry.sum += size
                entry.created = min(entry.created, t.created)
            _add(everything, t.buckets, t.seconds)
            coarse = [sum(t.buckets[start:end]) for start, end in _LOWR_SLICES]
            latency = lowr.labels(t.method, t.handler)
            _add(latency, coarse, t.seconds)
            latency.created = min(latency.created, t.created)
        for family in (requests, in_size, out_size, highr, lowr):
            metric = family.collect()
            if metric is not None:
                yield metric


def _add(series: HistogramSeries, counts: list[int], seconds: float) -> None:
    for index, count in enumerate(counts):
        series.counts[index] += count
    series.sum += seconds


def _excluded(handler: str) -> bool:
    return any(pattern in handler for pattern in EXCLUDED_HANDLERS)
