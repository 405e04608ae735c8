"""HttpMetrics: the instrumentator's five families, summed at scrape time from what `record`
was told, with vLLM's excluded handlers."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from vllm_sim.metrics.exposition import render
from vllm_sim.metrics.instrumentator import HttpMetrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(http: HttpMetrics) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(render(http))
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def test_counts_group_statuses_and_sizes_sum_per_handler() -> None:
    http = HttpMetrics()
    http.record("/v1/chat/completions", "/v1/chat/completions", "POST", 200, 100, 700, 0.002)
    http.record("/v1/chat/completions", "/v1/chat/completions", "POST", 201, 50, 0, 0.2)
    http.record("/v1/chat/completions", "/v1/chat/completions", "POST", 429, 10, 80, 0.001)
    http.record("/v1/models", "/v1/models", "GET", 200, 0, 300, 2.0)
    found = samples(http)
    chat = {"handler": "/v1/chat/completions"}
    assert value(found, "http_requests_total", **chat, method="POST", status="2xx") == 2
    assert value(found, "http_requests_total", **chat, method="POST", status="4xx") == 1
    assert value(found, "http_request_size_bytes_count", **chat) == 3
    assert value(found, "http_request_size_bytes_sum", **chat) == 160
    assert value(found, "http_response_size_bytes_sum", **chat) == 780
    assert value(found, "http_response_size_bytes_sum", handler="/v1/models") == 300


def test_both_duration_histograms_come_from_the_fine_buckets() -> None:
    http = HttpMetrics()
    for seconds in (0.004, 0.02, 0.3, 0.75, 1.2, 45.0):
        http.record("/v1/completions", "/v1/completions", "POST", 200, 0, 0, seconds)
    found = samples(http)
    highr = "http_request_duration_highr_seconds_bucket"
    assert value(found, highr, le="0.01") == 1
    assert value(found, highr, le="0.025") == 2
    assert value(found, highr, le="0.75") == 4  # a bound is inclusive
    assert value(found, highr, le="30.0") == 5
    assert value(found, highr, le="+Inf") == 6
    assert value(found, "http_request_duration_highr_seconds_sum") == sum(
        (0.004, 0.02, 0.3, 0.75, 1.2, 45.0)
    )
    lowr = {"handler": "/v1/completions", "method": "POST"}
    buckets = [
        value(found, "http_request_duration_seconds_bucket", **lowr, le=le)
        for le in ("0.1", "0.5", "1.0", "+Inf")
    ]
    assert buckets == [2, 3, 4, 6]


def test_vllms_excluded_handlers_record_nothing() -> None:
    """A regular-expression search of vLLM's patterns: /health excludes /health/ready, /load
    the LoRA loading route, and an unknown path is searched as it was asked."""
    http = HttpMetrics()
    for route, path in (
        ("/metrics", "/metrics"),
        ("/health", "/health"),
        ("/health/ready", "/health/ready"),
        ("/v1/load_lora_adapter", "/v1/load_lora_adapter"),
        ("/ping", "/ping"),
        ("/version", "/version"),
        (None, "/healthz"),
    ):
        http.record(route, path, "GET", 200, 0, 10, 0.001)
    http.record(None, "/unknown", "GET", 404, 0, 10, 0.001)
    found = samples(http)
    handlers = {
        dict(labels)["handler"] for (name, labels) in found if name == "http_requests_total"
    }
    assert handlers == {"none"}
    assert value(found, "http_request_duration_highr_seconds_count") == 1


def test_labelled_families_are_described_before_any_request() -> None:
    """As the client library shows a labelled family with no series: HELP and TYPE alone."""
    text = render(HttpMetrics())
    for name in ("http_requests_total", "http_request_size_bytes", "http_response_size_bytes"):
        assert f"# TYPE {name} " in text
    assert "http_request_duration_highr_seconds_count 0.0\n" in text
    assert "# TYPE http_request_duration_seconds histogram\n" in text
    assert "http_request_duration_seconds_count" not in text
