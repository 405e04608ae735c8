"""Fuzzes the routes that change or report on the server: /admin/config, /fake_metrics,
LoRA loading and unloading, /sleep and /wake_up, /pause and /resume, /reset_prefix_cache,
the read-only GET routes under every method, and paths no route serves.

The server runs in dev mode with sleep mode and fake metrics on, so that every control
route does its work instead of refusing. /fake_metrics answers a bad update with a 500 on
purpose (as the reference does); the harness counts those apart and checks their message.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.fuzz import (
    EDGE_FLOATS,
    EDGE_INTS,
    JUNK,
    Raw,
    encode,
    route_settings,
)
from tests.support.fuzz_bodies import optional, text
from tests.support.fuzz_harness import (
    Probe,
    Route,
    Target,
    assert_still_serving,
    exchange,
    extra_headers,
    requests,
    target_fixture,
)

ADMIN = Route("/admin/config")
FAKE_METRICS = Route("/fake_metrics", documented_500="Failed to update fake metrics: ")
LOAD = Route("/v1/load_lora_adapter")
UNLOAD = Route("/v1/unload_lora_adapter")
SLEEP = Route("/sleep")
WAKE_UP = Route("/wake_up")
PAUSE = Route("/pause")
RESUME = Route("/resume")
RESET_PREFIX_CACHE = Route("/reset_prefix_cache")
READ_ONLY = (
    "/health",
    "/health/ready",
    "/metrics",
    "/v1/models",
    "/is_sleeping",
    "/admin/config",
    "/ping",
    "/version",
    "/load",
    "/is_paused",
    "/v1/responses/resp_missing",
)
ALL_PATHS = (
    *READ_ONLY,
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/inference/v1/generate",
    "/v1/embeddings",
    "/tokenize",
    "/detokenize",
    "/v1/completions/render",
    "/v1/chat/completions/render",
    "/fake_metrics",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/sleep",
    "/wake_up",
    "/pause",
    "/resume",
    "/reset_prefix_cache",
    "/invocations",
    "/v1/messages/count_tokens",
)
STORED_RESPONSE = Route("/v1/responses/resp_missing", error_types={404: "invalid_request_error"})
KNOWN = {route.path: route for route in (FAKE_METRICS, STORED_RESPONSE)}
STORED = re.compile(r"/v1/responses/[^/]+(/cancel)?")
FAKE_START = {"running-requests": 1}
target = target_fixture(
    ["--max-loras", "4", "--enable-sleep-mode", "--fake-metrics", json.dumps(FAKE_START)],
    env={"VLLM_SERVER_DEV_MODE": "1"},
)

# ------------------------------------------------------------------ admin and fake metrics

durations = st.sampled_from(
    ["0", "0s", "1ms", "250us", "1h", "1h0m1s", "1000000h", "-1s", "1.5s", "10", "", "ms",
     "1e3ms", "9223372036854775807ns", "1h1ns", "Infinityh"]
) | st.integers(-1, 10**10) | JUNK  # fmt: skip
generators = st.sampled_from(
    ["oscillate:0:10:1s", "ramp:0:5:100ms", "rampreset:1:2:1ms", "squarewave:0:1:1ns",
     "bogus:0:1:1s", "ramp:0:1", "ramp:a:b:c", "ramp:0:1e400:1s", "ramp:NaN:1:1s", ""]
)  # fmt: skip
gauges = st.floats(0, 100) | generators | st.sampled_from(EDGE_FLOATS + EDGE_INTS)
buckets = st.lists(st.integers(0, 10**6) | st.sampled_from(EDGE_INTS), max_size=6)
whole = st.integers(0, 10**12) | st.sampled_from(EDGE_INTS)
lora_series = st.fixed_dictionaries(
    {},
    optional={"running": st.sampled_from(["a", "a,b", ""]), "waiting": text, "timestamp": gauges},
)
fake_metrics = optional(
    **{
        "running-requests": gauges,
        "waiting-requests": gauges,
        "kv-cache-usage": st.floats(0, 1) | gauges,
        "loras": st.lists(lora_series, max_size=3),
        "ttft-buckets-values": buckets,
        "tpot-buckets-values": buckets,
        "e2erl-buckets-values": buckets,
        "request-prompt-tokens": buckets,
        "total-prompt-tokens": whole,
        "total-generation-tokens": whole,
        "request-success-total": st.dictionaries(
            st.sampled_from(["stop", "length", "tool_calls", "bogus"]), whole, max_size=3
        ),
        "prefix-cache-hits": whole,
        "prefix-cache-queries": whole,
    }
)
FAKE_FIELDS = {"running-requests": JUNK, "loras": JUNK, "ttft-buckets-values": JUNK}
FAILURE_TYPES = ("rate_limit", "invalid_api_key", "server_error", "model_not_found", "bogus")
admin_bodies = optional(
    **{
        "time-to-first-token": durations,
        "inter-token-latency": durations,
        "inter-token-latency-std-dev": durations,
        "prefill-time-per-token": durations,
        "kv-cache-transfer-latency": durations,
        "time-factor-under-load": st.floats(1, 100) | st.sampled_from(EDGE_FLOATS),
        "failure-injection-rate": st.integers(0, 100),
        "failure-types": st.lists(st.sampled_from(FAILURE_TYPES), max_size=3),
        "image-emission-rate": st.integers(0, 100),
        "latency-calculator": st.sampled_from(["", "constant", "per-token", "bogus"]),
        "fake-metrics": fake_metrics,
    }
)
ADMIN_FIELDS = {
    "time-to-first-token": JUNK,
    "time-factor-under-load": JUNK | st.just(Raw(b"1e400")),
    "failure-injection-rate": JUNK,
    "failure-types": JUNK,
    "fake-metrics": JUNK,
    "max-num-seqs": JUNK,  # not admin-configurable
    "port": st.integers(),
}
# What the server starts with, posted back before the final check.
RESET = {
    "time-to-first-token": "0s",
    "inter-token-latency": "0s",
    "inter-token-latency-std-dev": "0s",
    "prefill-time-per-token": "0s",
    "kv-cache-transfer-latency": "0s",
    "time-factor-under-load": 1.0,
    "failure-injection-rate": 0,
    "image-emission-rate": 0,
    "latency-calculator": "",
}


# ------------------------------------------------------------------ LoRA, sleep

lora_names = st.sampled_from(["a", "b", "c", "test-model", "x" * 257, ""]) | text
lora_bodies = st.fixed_dictionaries(
    {"lora_name": lora_names, "lora_path": st.sampled_from(["/p", "/q", "p" * 4097])},
    optional={"lora_int_id": st.integers(0, 10) | st.sampled_from(EDGE_INTS)},
)
LORA_FIELDS = {"lora_name": JUNK, "lora_path": JUNK, "lora_int_id": JUNK}
queries = st.sampled_from(
    ["", "?tags=weights", "?tags=kv_cache", "?tags=weights&tags=kv_cache", "?tags=bogus",
     "?tags=", "?tags", "?level=2", "?tags=%ff", "?tags=%00", "?&&=&"]
) | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=40).map(
    lambda q: "?" + q
)  # fmt: skip
sleep_bodies = optional(level=st.integers(0, 3) | JUNK, tags=JUNK)
pause_queries = st.sampled_from(
    ["", "?mode=abort", "?mode=wait", "?mode=keep", "?mode=", "?mode=bogus&mode=keep",
     "?wait_for_inflight_requests=true", "?clear_cache=false", "?clear_cache=maybe",
     "?reset_running_requests=1", "?reset_external=on", "?reset_running_requests=%ff"]
) | queries  # fmt: skip


@st.composite
def with_query(draw: st.DrawFn, probes: st.SearchStrategy[Probe]) -> Probe:
    probe = draw(probes)
    return Probe(probe.method, probe.path + draw(queries), probe.headers, probe.content)


# ------------------------------------------------------------------ any method, any path

METHODS = ("GET", "GET", "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
path_text = st.text(
    st.sampled_from("abcxyz019-._~%/"), min_size=1, max_size=30
)  # what a URL path may hold without escaping


@st.composite
def any_requests(draw: st.DrawFn, paths: st.SearchStrategy[str]) -> Probe:
    """Any method on `paths`, with a query, junk headers and a junk body now and then."""
    method = draw(st.sampled_from(METHODS))
    headers = draw(extra_headers())
    if draw(st.booleans()):
        headers["content-type"] = "application/json"
    body = draw(st.just(b"") | st.binary(max_size=60) | JUNK.map(encode))
    return Probe(method, draw(paths) + draw(queries), tuple(headers.items()), body)


@st.composite
def with_pause_query(draw: st.DrawFn, probes: st.SearchStrategy[Probe]) -> Probe:
    probe = draw(probes)
    return Probe(probe.method, probe.path + draw(pause_queries), probe.headers, probe.content)


def _unknown_paths() -> st.SearchStrategy[str]:
    under = st.tuples(st.sampled_from(ALL_PATHS), path_text).map(lambda t: f"{t[0]}/{t[1]}")
    return under | path_text.map(lambda p: "/" + p) | st.just("/v1/messages/batches")


# ------------------------------------------------------------------ tests


@route_settings()
@given(probe=requests(ADMIN.path, admin_bodies, ADMIN_FIELDS))
def test_admin_config(target: Target, probe: Probe) -> None:
    exchange(target, ADMIN, probe)


@route_settings()
@given(probe=requests(FAKE_METRICS.path, fake_metrics, FAKE_FIELDS))
def test_fake_metrics(target: Target, probe: Probe) -> None:
    exchange(target, FAKE_METRICS, probe)


@route_settings()
@given(probe=requests(LOAD.path, lora_bodies, LORA_FIELDS))
def test_load_lora_adapter(target: Target, probe: Probe) -> None:
    exchange(target, LOAD, probe)


@route_settings()
@given(probe=requests(UNLOAD.path, lora_bodies, LORA_FIELDS))
def test_unload_lora_adapter(target: Target, probe: Probe) -> None:
    exchange(target, UNLOAD, probe)


@route_settings()
@given(probe=with_query(requests(SLEEP.path, sleep_bodies, {})))
def test_sleep(target: Target, probe: Probe) -> None:
    exchange(target, SLEEP, probe)


@route_settings()
@given(probe=with_query(requests(WAKE_UP.path, sleep_bodies, {})))
def test_wake_up(target: Target, probe: Probe) -> None:
    exchange(target, WAKE_UP, probe)


@route_settings()
@given(probe=with_pause_query(requests(PAUSE.path, sleep_bodies, {})))
def test_pause(target: Target, probe: Probe) -> None:
    exchange(target, PAUSE, probe)
    resumed = target.client.post(RESUME.path)  # the rest of the suite needs a running engine
    assert resumed.status_code == 200, resumed.text


@route_settings()
@given(probe=with_pause_query(requests(RESUME.path, sleep_bodies, {})))
def test_resume(target: Target, probe: Probe) -> None:
    exchange(target, RESUME, probe)


@route_settings()
@given(probe=with_pause_query(requests(RESET_PREFIX_CACHE.path, sleep_bodies, {})))
def test_reset_prefix_cache(target: Target, probe: Probe) -> None:
    exchange(target, RESET_PREFIX_CACHE, probe)


@pytest.mark.parametrize("path", READ_ONLY)
@route_settings()
@given(data=st.data())
def test_read_only_routes(target: Target, path: str, data: st.DataObject) -> None:
    probe = data.draw(any_requests(st.just(path)))
    exchange(target, KNOWN.get(path, Route(path)), probe, name=f"any {path}")


@route_settings()
@given(probe=any_requests(_unknown_paths()))
def test_unknown_paths(target: Target, probe: Probe) -> None:
    # The path as the server sees it: the client removes dot segments, the server decodes
    # (`/fake_metrics/x/..` is /fake_metrics, with its deliberate 500).
    path = httpx.URL(target.server.url + probe.path).path
    under_messages = path == "/v1/messages" or path.startswith("/v1/messages/")
    route = KNOWN.get(path, Route(path, envelope="anthropic" if under_messages else "openai"))
    if STORED.fullmatch(path):  # a stored response's routes answer vLLM's error type
        route = Route(path, error_types=STORED_RESPONSE.error_types)
    exchange(target, route, probe, name="any unknown path")


def test_still_serving(target: Target) -> None:
    wake = target.client.post("/wake_up")
    assert wake.status_code == 200, wake.text
    resumed = target.client.post(RESUME.path)  # a dot-segment path may have reached /pause
    assert resumed.status_code == 200, resumed.text
    reset = target.client.post(ADMIN.path, json={**RESET, "failure-types": []})
    assert reset.status_code == 200, reset.text
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert_still_serving(target, "/v1/chat/completions", body)
    assert target.client.get("/metrics").status_code == 200
