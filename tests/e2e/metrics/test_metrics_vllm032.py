"""/metrics against vLLM 0.32's: its families (names, types, help texts, order), label names
and buckets (the facts in tests/data/vllm-0.32-*), the HTTP instrumentator's families after
a few requests, and what a load leaves in the request-parameter histograms."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.metrics import (
    CHAT,
    COMPLETIONS,
    METRICS_CONTENT_TYPE,
    PARAMS_MAX_TOKENS,
    PARAMS_N,
    Metrics,
    chat,
    scrape,
    timed_stream,
)
from tests.support.server import SimServer
from vllm_sim.metrics.catalogue import one_two_five_buckets

DATA = Path(__file__).parents[2] / "data"
LISTING = DATA / "vllm-0.32-metrics.txt"
FACTS: dict[str, Any] = tomllib.loads((DATA / "vllm-0.32-metric-labels.toml").read_text())
MAX_MODEL_LEN = 512  # the oracle's
# Families vllm-sim shows that vLLM 0.32 does not at default flags: lora_requests_info (vLLM:
# with --enable-lora only; routers read it) and the TPOT histogram (hidden since vLLM 0.12;
# llm-d's fake-metrics contract drives it).
EXTRA = ("vllm:lora_requests_info", "vllm:time_per_output_token_seconds")
# The simulator's own families, outside vLLM's namespace and after its families.
OWN = ("vllm_sim:output_lag_seconds", "vllm_sim:output_lag_max_seconds")


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    with SimServer(["--max-model-len", str(MAX_MODEL_LEN)]) as server:
        yield server


@pytest.fixture(scope="module")
def page(sim: SimServer) -> Metrics:
    """The page after a few requests, so that every family vLLM's has shows its series."""
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        assert client.post(CHAT, json=chat(max_tokens=3)).status_code == 200
        return scrape(client)


def _headers(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("# HELP ", "# TYPE "))]


def _is_extra(line: str) -> bool:
    name = line.split(" ")[2]
    return any(name.startswith(extra) for extra in EXTRA)


def _is_own(line: str) -> bool:
    return line.split(" ")[2].startswith("vllm_sim:")


def test_families_types_help_and_order_are_vllms(page: Metrics) -> None:
    """Every HELP and TYPE line of vLLM 0.32's page, in its order, and no other but the
    simulator's two extras and, last, its own families."""
    expected = _headers(LISTING.read_text())
    ours = _headers(page.text)
    vllms = [line for line in ours if not _is_own(line)]
    assert [line for line in vllms if not _is_extra(line)] == expected
    assert {line.split(" ")[2] for line in ours if _is_extra(line)} == {
        "vllm:lora_requests_info",
        "vllm:time_per_output_token_seconds",
        "vllm:time_per_output_token_seconds_created",
    }
    own = [line.split(" ")[2] for line in ours[len(vllms) :]]
    assert own == [name for name in OWN for _ in ("HELP", "TYPE")]


def test_label_names_are_vllms(page: Metrics, sim: SimServer) -> None:
    labels: dict[str, list[str]] = FACTS["labels"]
    for family, names in labels.items():
        samples = [s for s in _samples(page, family) if s[0] != family + _CREATED]
        assert samples, family
        for _, sample_labels in samples:
            assert set(sample_labels) - {"le"} == set(names), family
            if "engine" in names:
                assert sample_labels["engine"] == "0", family
            if "model_name" in names:
                assert sample_labels["model_name"] == sim.model, family
    for key, values in FACTS["label_values"].items():
        family, label = key.split(".")
        found = [lbl[label] for name, lbl in _samples(page, family) if name != family + _CREATED]
        assert sorted(set(found)) == sorted(values), key


def test_buckets_are_vllms(page: Metrics) -> None:
    for family, bounds in FACTS["buckets"].items():
        if bounds == "tokens":
            bounds = list(one_two_five_buckets(MAX_MODEL_LEN))
        les = [lbl["le"] for name, lbl in _samples(page, family) if name == f"{family}_bucket"]
        series = len(les) // (len(bounds) + 1)
        assert series >= 1, family
        assert les == [*[repr(float(b)) for b in bounds], "+Inf"] * series, family


def test_every_counter_and_histogram_series_has_its_created_sample(page: Metrics) -> None:
    for family in page.types:
        kind = page.types[family]
        if kind not in ("counter", "histogram", "summary") or family.startswith(
            ("python_", "process_")
        ):
            continue
        main = [lbl for name, lbl in _samples(page, family) if name.endswith(("_total", "_count"))]
        created = page.series(family + _CREATED)
        assert sorted(map(_key, main)) == sorted(_key(lbl) for lbl, _ in created), family
        assert all(value > 1.7e9 for _, value in created), family  # a Unix time


def test_classic_text_whatever_the_scraper_asks(sim: SimServer) -> None:
    """vLLM's instrumentator answers GET /metrics in the classic format even to Prometheus,
    which asks for OpenMetrics (whose writer would turn `vllm:` into `vllm_` in the sample
    names, and break every dashboard query), and never gzips it."""
    accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
        "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    headers = {"accept": accept, "accept-encoding": "gzip"}
    response = httpx.get(sim.url + "/metrics", headers=headers, timeout=10)
    assert response.headers["content-type"] == METRICS_CONTENT_TYPE
    assert "content-encoding" not in response.headers
    assert "# EOF" not in response.text
    assert "# TYPE vllm:prompt_tokens_total counter\n" in response.text
    assert "\nvllm:prompt_tokens_total{" in response.text
    # No `vllm:` name escaped (the simulator's own `vllm_sim:` names are not vLLM's).
    assert not re.search(r"^vllm_(?!sim:)", response.text, re.MULTILINE)


def test_http_families_count_by_handler_method_and_status(sim: SimServer) -> None:
    """The instrumentator's view of a few requests: route templates or "none", grouped
    statuses, Content-Length sizes (0 for a stream), and vLLM's excluded handlers."""
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        before = scrape(client)
        plain = client.post(CHAT, json=chat(max_tokens=2))
        stream = timed_stream(client, CHAT, chat(max_tokens=2, stream=True))
        assert (plain.status_code, stream.status) == (200, 200)
        bad = client.post(CHAT, content=b"{", headers={"content-type": "application/json"})
        assert bad.status_code == 400
        assert client.get("/v1/models").status_code == 200
        assert client.get("/no/such/route").status_code == 404
        assert client.delete(CHAT).status_code == 405
        for path in ("/health", "/health/ready", "/ping", "/version", "/load", "/healthz"):
            client.get(path)  # excluded by vLLM's patterns: none of them counts
        after = scrape(client)

    def grown(name: str, **labels: str) -> float:
        return _value(after, name, labels) - _value(before, name, labels)

    chat_ok = {"handler": CHAT, "method": "POST", "status": "2xx"}
    assert grown("http_requests_total", **chat_ok) == 2
    assert grown("http_requests_total", handler=CHAT, method="POST", status="4xx") == 1
    assert grown("http_requests_total", handler="/v1/models", method="GET", status="2xx") == 1
    assert grown("http_requests_total", handler="none", method="GET", status="4xx") == 1
    assert grown("http_requests_total", handler="none", method="DELETE", status="4xx") == 1
    handlers = {lbl["handler"] for lbl, _ in after.series("http_requests_total")}
    assert handlers == {CHAT, "/v1/models", "none"}
    sent = len(plain.request.content) + len(stream_body(chat(max_tokens=2, stream=True))) + 1
    assert grown("http_request_size_bytes_sum", handler=CHAT) == sent
    assert grown("http_request_size_bytes_count", handler=CHAT) == 3
    # the plain answer and the 400's have a Content-Length; the stream has none
    answered = len(plain.content) + len(bad.content)
    assert grown("http_response_size_bytes_sum", handler=CHAT) == answered
    assert grown("http_request_duration_highr_seconds_count") == 6
    assert grown("http_request_duration_seconds_count", handler=CHAT, method="POST") == 3


def test_params_n_and_max_tokens_count_every_finished_request(sim: SimServer) -> None:
    """Each finished request observes its n and its effective max_tokens: the client's, the
    completions default (16), or for a chat what its prompt leaves of the context."""
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        before = scrape(client)
        answers = [
            client.post(CHAT, json=chat(max_tokens=7)),
            client.post(CHAT, json=chat("no limit")),
            client.post(COMPLETIONS, json={"prompt": "no limit either"}),
            client.post(COMPLETIONS, json={"prompt": "a limit", "max_tokens": 3}),
        ]
        after = scrape(client)
    assert [a.status_code for a in answers] == [200] * 4
    unlimited_chat = MAX_MODEL_LEN - answers[1].json()["usage"]["prompt_tokens"]
    effective = [7, unlimited_chat, 16, 3]
    finished = sum(after.success(sim.model).values()) - sum(before.success(sim.model).values())
    assert finished == len(answers)
    n_count, n_sum = _grown_hist(before, after, PARAMS_N)
    assert (n_count, n_sum) == (finished, finished)  # n = 1 each
    max_count, max_sum = _grown_hist(before, after, PARAMS_MAX_TOKENS)
    assert (max_count, max_sum) == (finished, sum(effective))


def stream_body(body: dict[str, Any]) -> bytes:
    """The body httpx sends for a streamed request (timed_stream adds nothing to it)."""
    return httpx.Request("POST", "http://x", json=body).content


_CREATED = "_created"
_SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", _CREATED)


def _samples(page: Metrics, family: str) -> list[tuple[str, dict[str, str]]]:
    """(sample name, labels) of every sample of one family, `_created` ones included."""
    return [
        (name, labels)
        for name in (family + suffix for suffix in _SUFFIXES)
        for labels, _ in page.series(name)
    ]


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def _value(page: Metrics, name: str, labels: dict[str, str]) -> float:
    found = [v for lbl, v in page.series(name) if labels.items() <= lbl.items()]
    return sum(found)


def _grown_hist(before: Metrics, after: Metrics, name: str) -> tuple[float, float]:
    return (
        after.value(name + "_count") - before.value(name + "_count"),
        after.value(name + "_sum") - before.value(name + "_sum"),
    )
