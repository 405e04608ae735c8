"""GET/POST /admin/config and POST /fake_metrics over HTTP."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.errors import assert_openai_error
from tests.support.fixtures import server_fixture
from tests.support.metrics import (
    COMPLETIONS,
    FAKE_PREFIX,
    KV_USAGE,
    REAL_METRICS_ONLY,
    RUNNING,
    WAITING,
    Metrics,
    scrape,
    timed_stream,
)
from tests.support.server import SimServer

BASE_TTFT = "20ms"


admin = server_fixture(["--time-to-first-token", BASE_TTFT, "--max-num-seqs", "8"])


@pytest.fixture
def client(admin: SimServer) -> Iterator[httpx.Client]:
    """A client; the latency settings are put back after each test."""
    with httpx.Client(base_url=admin.url, timeout=30) as http:
        yield http
        restore = {"time-to-first-token": BASE_TTFT, "inter-token-latency": "0s"}
        assert http.post("/admin/config", json=restore).status_code == 200


def get_config(client: httpx.Client) -> dict[str, Any]:
    response = client.get("/admin/config")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    config: dict[str, Any] = response.json()
    return config


def observed_ttft(client: httpx.Client, max_tokens: int = 2) -> float:
    """Seconds from sending a streamed completion to its first token."""
    body = {"prompt": "time me", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    result = timed_stream(client, COMPLETIONS, body)
    assert result.status == 200 and result.done
    return result.token_times[0]


def test_get_shape(admin: SimServer, client: httpx.Client) -> None:
    config = get_config(client)
    assert list(config) == sorted(config)
    assert config["time-to-first-token"] == BASE_TTFT
    assert config["inter-token-latency"] == "0s"
    assert config["time-to-first-token-std-dev"] == "0s"
    assert config["fake-metrics-refresh-interval"] == "100ms"
    assert config["port"] == admin.port
    assert config["model"] == admin.model
    assert config["served-model-name"] == [admin.model]
    assert config["max-num-seqs"] == 8
    assert config["seed"] == 42
    assert config["failure-injection-rate"] == 0
    assert config["failure-types"] is None
    assert config["fake-metrics"] is None
    assert config["time-factor-under-load"] == 1.0
    for key in ("IP", "DisplayModelName", "PodName", "PodNameSpace", "VllmDevMode"):
        assert key in config
    assert config["DisplayModelName"] == admin.model


@pytest.mark.timing
def test_post_returns_the_full_config_and_changes_the_next_ttft(client: httpx.Client) -> None:
    assert observed_ttft(client) < 0.2
    response = client.post("/admin/config", json={"time-to-first-token": "300ms"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    updated = response.json()
    assert updated["time-to-first-token"] == "300ms"
    assert updated == get_config(client)
    assert 0.29 <= observed_ttft(client) < 1.5
    response = client.post("/admin/config", json={"time-to-first-token": 50_000_000})
    assert response.status_code == 200
    assert response.json()["time-to-first-token"] == "50ms"
    assert observed_ttft(client) < 0.2


@pytest.mark.timing
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"time-to-first-token": "300ms", "failure-injection-rate": 101},
            "failure injection rate should be between 0 and 100",
        ),
        (
            {"time-to-first-token": "300ms", "failure-types": ["rate_limit", "nope"]},
            "invalid failure type 'nope', valid types are: rate_limit, invalid_api_key, "
            "context_length, server_error, invalid_request, model_not_found",
        ),
        (
            {"time-to-first-token": "300ms", "time-to-first-token-std-dev": "100ms"},
            "time to first token standard deviation cannot be more than 30% of time to first token",
        ),
        (
            {"time-to-first-token": "300ms", "latency-calculator": "magic"},
            "unknown latency-calculator magic, supported calculators are: constant and per-token",
        ),
        (
            {"time-to-first-token": "300ms", "time-factor-under-load": 0.5},
            "time factor under load cannot be less than 1.0",
        ),
        ({"model": "x"}, "field 'model' is not admin-configurable"),
        ({"time-to-first-token": "300ms", "port": 1}, "field 'port' is not admin-configurable"),
    ],
)
def test_invalid_update_is_rejected_whole(
    client: httpx.Client, body: dict[str, Any], message: str
) -> None:
    before = get_config(client)
    response = client.post("/admin/config", json=body)
    assert_openai_error(response, 400, message, error_type="BadRequestError", param=None)
    assert get_config(client) == before
    assert observed_ttft(client) < 0.2  # the valid part was not applied either


@pytest.mark.parametrize("payload", [b"", b"[1]", b'"x"', b"{oops"])
def test_not_a_json_object(client: httpx.Client, payload: bytes) -> None:
    before = get_config(client)
    response = client.post("/admin/config", content=payload)
    assert_openai_error(
        response,
        400,
        error_type="BadRequestError",
        param=None,
        prefix="failed to unmarshal payload: ",
    )
    assert get_config(client) == before


@pytest.mark.parametrize("payload", [b"{}", b"null"])
def test_empty_update_is_a_no_op_success(client: httpx.Client, payload: bytes) -> None:
    before = get_config(client)
    response = client.post("/admin/config", content=payload)
    assert response.status_code == 200
    assert response.json() == before == get_config(client)


@pytest.mark.timing
def test_concurrent_updates_never_half_apply(admin: SimServer, client: httpx.Client) -> None:
    """Two coherent configs alternate while streams run: every stream times as one of them.

    A: TTFT 30 ms, ITL 5 ms.  B: TTFT 300 ms, ITL 60 ms.  A mix (fast TTFT with slow ITL,
    or the reverse) would mean a request saw half an update.
    """
    configs = [
        {"time-to-first-token": "30ms", "inter-token-latency": "5ms"},
        {"time-to-first-token": "300ms", "inter-token-latency": "60ms"},
    ]
    stop = threading.Event()
    jitter = random.Random()
    admin_statuses: list[int] = []
    timings: list[tuple[float, float]] = []
    errors: list[BaseException] = []

    def toggle() -> None:
        try:
            with httpx.Client(base_url=admin.url, timeout=30) as own:
                i = 0
                while not stop.is_set():
                    response = own.post("/admin/config", json=configs[i % 2])
                    admin_statuses.append(response.status_code)
                    i += 1
                    # A fixed period could lock in phase with the 600 ms B streams (a 50 ms
                    # half-period divides it) and show every stream the same config.
                    time.sleep(jitter.uniform(0.01, 0.07))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def stream_requests() -> None:
        try:
            with httpx.Client(base_url=admin.url, timeout=30) as own:
                while not stop.is_set():
                    body = {"prompt": "mix", "max_tokens": 6, "ignore_eos": True, "stream": True}
                    result = timed_stream(own, COMPLETIONS, body)
                    assert result.status == 200 and result.done
                    times = result.token_times
                    assert len(times) == 6
                    timings.append((times[0], (times[-1] - times[0]) / 5))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=toggle)]
    threads += [threading.Thread(target=stream_requests) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(3.0)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert admin_statuses and set(admin_statuses) == {200}
    kinds = []
    for ttft, itl in timings:
        ttft_kind = "A" if ttft < 0.15 else "B"
        itl_kind = "A" if itl < 0.03 else "B"
        assert ttft_kind == itl_kind, (ttft, itl, timings)
        kinds.append(ttft_kind)
    assert {"A", "B"} <= set(kinds), timings
    final = get_config(client)
    pair = {k: final[k] for k in ("time-to-first-token", "inter-token-latency")}
    assert pair in configs


# ----------------------------------------------------------------- fake metrics


@pytest.mark.timing
def test_fake_update_on_a_real_server_is_refused(client: httpx.Client) -> None:
    before = get_config(client)
    body = {"fake-metrics": {"running-requests": 3}, "time-to-first-token": "300ms"}
    response = client.post("/admin/config", json=body)
    assert_openai_error(response, 400, REAL_METRICS_ONLY, error_type="BadRequestError", param=None)
    assert get_config(client) == before
    assert observed_ttft(client) < 0.2
    metrics = scrape(client)
    assert metrics.value(RUNNING) == 0


def test_deprecated_fake_endpoint_on_a_real_server_is_500(client: httpx.Client) -> None:
    response = client.post("/fake_metrics", json={"running-requests": 3})
    assert_openai_error(
        response, 500, FAKE_PREFIX + REAL_METRICS_ONLY, error_type="InternalServerError", param=None
    )
    assert scrape(client).value(RUNNING) == 0


fake = server_fixture(["--fake-metrics", json.dumps({"running-requests": 3})])


def wait_for_value(client: httpx.Client, name: str, value: float) -> Metrics:
    deadline = time.monotonic() + 2.0
    while True:
        metrics = scrape(client)
        if metrics.series(name) and metrics.value(name) == value:
            return metrics
        assert time.monotonic() < deadline, metrics.series(name)
        time.sleep(0.02)


def test_fake_metrics_updates_over_http(fake: SimServer) -> None:
    with httpx.Client(base_url=fake.url, timeout=30) as client:
        metrics = scrape(client)
        assert metrics.series(RUNNING) == [({"engine": "0", "model_name": fake.model}, 3.0)]
        assert metrics.series(WAITING) == [] and metrics.series(KV_USAGE) == []

        response = client.post("/fake_metrics", json={"running-requests": 7})
        assert response.status_code == 204
        assert response.content == b""
        assert "content-type" not in response.headers  # nothing to describe
        wait_for_value(client, RUNNING, 7.0)

        response = client.post("/admin/config", json={"fake-metrics": {"waiting-requests": 2}})
        assert response.status_code == 200
        assert response.json()["fake-metrics"]["waiting-requests"] == 2
        metrics = wait_for_value(client, WAITING, 2.0)
        assert metrics.value(RUNNING) == 7.0  # absent from the update: unchanged


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"running-requests": -1}', "fake metrics request counters cannot be negative"),
        (b'{"kv-cache-usage": 2}', "fake metrics KV cache usage must be between 0 and 1"),
        (b"", None),
    ],
)
def test_fake_metrics_errors_are_500_and_change_nothing(
    fake: SimServer, payload: bytes, message: str | None
) -> None:
    with httpx.Client(base_url=fake.url, timeout=30) as client:
        before = scrape(client).series(RUNNING)
        response = client.post("/fake_metrics", content=payload)
        if message is None:
            assert_openai_error(
                response,
                500,
                error_type="InternalServerError",
                param=None,
                prefix=FAKE_PREFIX + "failed to unmarshal",
            )
        else:
            assert_openai_error(
                response, 500, FAKE_PREFIX + message, error_type="InternalServerError", param=None
            )
            # the admin endpoint says the same, as a 400
            admin_response = client.post("/admin/config", content=b'{"fake-metrics": %s}' % payload)
            assert_openai_error(
                admin_response, 400, message, error_type="BadRequestError", param=None
            )
        time.sleep(0.15)  # over one refresh interval
        assert scrape(client).series(RUNNING) == before


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b'{"time-factor-under-load": 1e400}',
         "failed to unmarshal payload: json: cannot unmarshal number into Go struct field "
         "Configuration.time-factor-under-load of type float64"),
        (b'{"time-factor-under-load": 1e308}', "time factor under load cannot be more than 100"),
        (b'{"time-to-first-token": "1000000h"}', "time to first token cannot be more than 1h"),
    ],
)  # fmt: skip
def test_the_wedging_update_is_refused_and_the_server_keeps_serving(
    client: httpx.Client, payload: bytes, message: str
) -> None:
    """The probe: an infinite factor was accepted, then every request failed with 500 and
    kept its slot, until --max-num-seqs of them left nothing to serve with."""
    before = get_config(client)
    response = client.post("/admin/config", content=payload)
    assert_openai_error(response, 400, message, error_type="BadRequestError", param=None)
    assert "\n" not in response.json()["error"]["message"]
    assert get_config(client) == before
    for _ in range(before["max-num-seqs"] + 2):  # more than the slots there are
        assert observed_ttft(client) < 0.2
    assert scrape(client).value(RUNNING) == 0
