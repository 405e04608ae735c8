"""Failure injection and X-Return-Error, end to end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.support.errors import (
    assert_openai_error,
    assert_validation_error,
    prompt_too_long_message,
)
from tests.support.fixtures import server_fixture
from tests.support.metrics import (
    CHAT,
    COMPLETIONS,
    E2E,
    GENERATION_TOTAL,
    HISTOGRAMS,
    PROMPT_TOTAL,
    RUNNING,
    WAITING,
    Metrics,
    chat,
    scrape,
)
from tests.support.server import SimServer

ALIAS = "served-alias"  # messages name the base --model, never the alias
MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "user", "content": "Hello"}
]


@dataclass(frozen=True)
class Failure:
    status: int
    exception: type[openai.APIStatusError]
    type: str
    param: str | None
    message: str


MAX_MODEL_LEN = 2048
FAILURES = {
    "rate_limit": Failure(
        429,
        openai.RateLimitError,
        "RateLimitError",
        None,
        "Rate limit reached for test-model in organization org-xxx on requests per min (RPM): "
        "Limit 3, Used 3, Requested 1.",
    ),
    "invalid_api_key": Failure(
        401, openai.AuthenticationError, "AuthenticationError", None, "Incorrect API key provided."
    ),
    "context_length": Failure(
        400,
        openai.BadRequestError,
        "BadRequestError",
        "input_tokens",
        prompt_too_long_message(MAX_MODEL_LEN),
    ),
    "server_error": Failure(
        503,
        openai.InternalServerError,
        "InternalServerError",
        None,
        "The server is overloaded or not ready yet.",
    ),
    "invalid_request": Failure(
        400,
        openai.BadRequestError,
        "BadRequestError",
        "model",
        "Invalid request: missing required parameter 'model'.",
    ),
    "model_not_found": Failure(
        404,
        openai.NotFoundError,
        "NotFoundError",
        "model",
        "The model 'test-model-nonexistent' does not exist",
    ),
}


def sdk(sim: SimServer) -> openai.OpenAI:
    # The SDK retries 429 and 5xx by default: one request must be one request.
    return openai.OpenAI(base_url=sim.openai_url, api_key="none", max_retries=0)


def assert_untouched(metrics: Metrics) -> None:
    """Real mode, nothing recorded: every series still at its start-up 0."""
    assert metrics.value(RUNNING) == 0 and metrics.value(WAITING) == 0
    assert set(metrics.success(ALIAS).values()) == {0.0}
    assert metrics.value(PROMPT_TOTAL) == 0 and metrics.value(GENERATION_TOTAL) == 0
    for name in HISTOGRAMS:
        assert metrics.value(name + "_count") == 0, name


# ----------------------------------------------------------------- each type at rate 100


@pytest.fixture(scope="module", params=sorted(FAILURES))
def injected(request: pytest.FixtureRequest) -> Iterator[tuple[str, SimServer]]:
    kind: str = request.param
    args = ["--served-model-name", ALIAS, "--failure-injection-rate", "100"]
    args += ["--max-model-len", str(MAX_MODEL_LEN)]  # named by the context_length failure
    with SimServer([*args, "--failure-types", kind]) as sim:
        yield kind, sim


def _calls(client: openai.OpenAI) -> list[Callable[[], object]]:
    return [
        lambda: client.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=3),
        lambda: client.chat.completions.create(
            model=ALIAS, messages=MESSAGES, max_tokens=3, stream=True
        ),
        lambda: client.completions.create(model=ALIAS, prompt="Hello", max_tokens=3),
        lambda: client.completions.create(model=ALIAS, prompt=["a", "b"], n=2, stream=True),
        # injection comes before the model check: an unknown model still gets the failure
        lambda: client.chat.completions.create(model="unknown", messages=MESSAGES),
    ]


def test_every_request_gets_the_configured_failure(injected: tuple[str, SimServer]) -> None:
    kind, sim = injected
    expected = FAILURES[kind]
    with sdk(sim) as client:
        for call in _calls(client):
            with pytest.raises(expected.exception) as info:
                call()
            error = info.value
            assert error.status_code == expected.status
            assert error.body == {
                "message": expected.message,
                "type": expected.type,
                "param": expected.param,
                "code": expected.status,
            }
            assert error.response.headers["content-type"].startswith("application/json")


def test_injected_failures_record_nothing(injected: tuple[str, SimServer]) -> None:
    _, sim = injected
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        for _ in range(5):
            assert client.post(CHAT, json=chat(model=ALIAS, max_tokens=2)).status_code >= 400
        assert_untouched(scrape(client))


def test_x_return_error_beats_injection_and_unknown_model(
    injected: tuple[str, SimServer],
) -> None:
    _, sim = injected
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        for path, body in [
            (CHAT, chat(model="unknown", stream=True)),
            (COMPLETIONS, {"model": "unknown", "prompt": "x"}),
        ]:
            response = client.post(path, json=body, headers={"X-Return-Error": "422"})
            assert_openai_error(
                response,
                422,
                "Simulated error triggered by X-Return-Error header (code 422)",
                error_type="UnprocessableEntityError",
                param=None,
            )


def test_malformed_json_is_a_parse_error_before_injection(
    injected: tuple[str, SimServer],
) -> None:
    _, sim = injected
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        for path in (CHAT, COMPLETIONS):
            headers = {"X-Return-Error": "503", "content-type": "application/json"}
            response = client.post(path, content=b'{"prompt": ', headers=headers)
            assert_validation_error(response, "body.11", "json_invalid")


# ----------------------------------------------------------------- mixed types, rates


def test_two_types_share_the_failures() -> None:
    args = ["--failure-injection-rate", "100"]
    with (
        SimServer([*args, "--failure-types", "invalid_api_key", "server_error"]) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as client,
    ):
        statuses = Counter(
            client.post(CHAT, json=chat(max_tokens=1)).status_code for _ in range(100)
        )
        assert set(statuses) == {401, 503}
        assert 25 <= statuses[401] <= 75  # uniform over the two types
        config = client.get("/admin/config").json()
        assert config["failure-types"] == ["invalid_api_key", "server_error"]


def test_rate_30_fails_about_30_percent() -> None:
    args = ["--failure-injection-rate", "30", "--failure-types", "server_error"]
    with (
        SimServer(args) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as client,
    ):
        body = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}'
        headers = {"content-type": "application/json"}
        statuses = Counter(
            client.post(CHAT, content=body, headers=headers).status_code for _ in range(1000)
        )
        assert set(statuses) == {200, 503}
        # Binomial(1000, 0.3): mean 300, sd 14.5
        assert 240 <= statuses[503] <= 360, statuses
        metrics = scrape(client)
        # only the requests that got through were recorded
        assert sum(metrics.success(sim.model).values()) == statuses[200]
        assert metrics.value(E2E + "_count") == statuses[200]


switchable = server_fixture(["--served-model-name", ALIAS])


def _post_config(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/admin/config", json=body)
    assert response.status_code == 200, response.text
    config: dict[str, Any] = response.json()
    return config


def test_rate_0_injects_nothing(switchable: SimServer) -> None:
    with httpx.Client(base_url=switchable.url, timeout=30) as client:
        assert client.get("/admin/config").json()["failure-injection-rate"] == 0
        for i in range(100):
            path, body = (
                (CHAT, chat(max_tokens=1))
                if i % 2
                else (COMPLETIONS, {"prompt": "x", "max_tokens": 1})
            )
            assert client.post(path, json=body).status_code == 200


def test_admin_switches_injection_for_the_next_request(switchable: SimServer) -> None:
    with (
        httpx.Client(base_url=switchable.url, timeout=30) as client,
        sdk(switchable) as api,
    ):
        before = scrape(client)
        config = _post_config(
            client, {"failure-injection-rate": 100, "failure-types": ["rate_limit"]}
        )
        assert config["failure-injection-rate"] == 100
        assert config["failure-types"] == ["rate_limit"]
        with pytest.raises(openai.RateLimitError) as info:
            api.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=2)
        assert info.value.body == {
            "message": FAILURES["rate_limit"].message,
            "type": "RateLimitError",
            "param": None,
            "code": 429,
        }
        with pytest.raises(openai.RateLimitError):
            api.completions.create(model=ALIAS, prompt="x", max_tokens=2)
        # nothing was recorded for the two failures
        assert scrape(client).value(E2E + "_count") == before.value(E2E + "_count")

        _post_config(client, {"failure-types": ["model_not_found"]})
        with pytest.raises(openai.NotFoundError):
            api.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=2)

        config = _post_config(client, {"failure-injection-rate": 0})
        assert config["failure-injection-rate"] == 0
        reply = api.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=2)
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert scrape(client).value(E2E + "_count") == before.value(E2E + "_count") + 1


# ----------------------------------------------------------------- X-Return-Error values


@pytest.mark.parametrize(
    ("value", "status", "error_type"),
    [
        ("400", 400, "BadRequestError"),
        ("401", 401, "AuthenticationError"),
        ("404", 404, "NotFoundError"),
        ("429", 429, "RateLimitError"),
        ("500", 500, "InternalServerError"),
        ("503", 503, "InternalServerError"),
    ],
)
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_x_return_error_status(
    switchable: SimServer, path: str, value: str, status: int, error_type: str
) -> None:
    body = chat(stream=True) if path == CHAT else {"prompt": "x", "stream": True}
    with httpx.Client(base_url=switchable.url, timeout=30) as client:
        response = client.post(path, json=body, headers={"X-Return-Error": value})
        message = f"Simulated error triggered by X-Return-Error header (code {status})"
        assert_openai_error(response, status, message, error_type=error_type, param=None)


@pytest.mark.parametrize("value", ["abc", "4.5", "0x1f"])
def test_x_return_error_not_an_integer(switchable: SimServer, value: str) -> None:
    with httpx.Client(base_url=switchable.url, timeout=30) as client:
        response = client.post(CHAT, json=chat(), headers={"X-Return-Error": value})
        message = f'Invalid X-Return-Error header value "{value}": must be an integer'
        assert_openai_error(response, 400, message, error_type="BadRequestError", param=None)


@pytest.mark.parametrize("value", ["0", "99", "600", "-1", "1000"])
def test_x_return_error_out_of_range(switchable: SimServer, value: str) -> None:
    with httpx.Client(base_url=switchable.url, timeout=30) as client:
        response = client.post(COMPLETIONS, json={"prompt": "x"}, headers={"X-Return-Error": value})
        error = assert_openai_error(response, 400, error_type="BadRequestError", param=None)
        assert "must be between 100 and 599" in error["message"], error
        assert f'"{value}"' in error["message"], error


def test_x_return_error_only_on_generation_endpoints(switchable: SimServer) -> None:
    with httpx.Client(base_url=switchable.url, timeout=30) as client:
        headers = {"X-Return-Error": "503"}
        for path in ("/v1/models", "/health", "/metrics", "/admin/config"):
            assert client.get(path, headers=headers).status_code == 200, path
