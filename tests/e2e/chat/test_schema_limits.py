"""Hostile schemas (tool parameters, response_format, Responses text.format) are answered
quickly with a 400 naming the schema path, and the server stays responsive meanwhile."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.http import CHAT, chat_body, post

RESPONSES = "/v1/responses"


def _nested_arrays(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "minItems": 10}
    return schema


def _object(prop: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": prop}, "required": ["x"]}


# Each freezes an unbounded generator for minutes or more; the fragment names the problem.
HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    "backtracking": (
        _object({"type": "string", "pattern": "^(a+)+$", "enum": ["a" * 34 + "!"]}),
        "at $.properties.x",
    ),
    "min_items": (
        _object({"type": "array", "items": {"type": "string"}, "minItems": 10**9}),
        "at $.properties.x",
    ),
    "min_length": (_object({"type": "string", "minLength": 10**30}), "at $.properties.x"),
    "huge_repeat": (_object({"type": "string", "pattern": "^a{1000000000}$"}), "limit"),
    "nested_arrays": (_object(_nested_arrays(10)), "too expensive"),
    "float_step": (_object({"type": "number", "multipleOf": 1e-310}), "at $.properties.x"),
    "bad_type": (_object({"allOf": [{"type": "string"}, {"type": 5}]}), "at $.properties.x"),
}

# Keywords the default server's tool validation refuses before any value is generated.
STRICT_TOOL_REFUSALS = frozenset({"float_step", "bad_type"})


def _tool_body(schema: dict[str, Any]) -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    return chat_body(tools=[tool], tool_choice="required")


def _format_body(schema: dict[str, Any]) -> dict[str, Any]:
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    return chat_body(response_format=fmt)


def _responses_body(schema: dict[str, Any]) -> dict[str, Any]:
    fmt = {"type": "json_schema", "name": "answer", "schema": schema}
    return {"input": "Hi", "max_output_tokens": 8, "text": {"format": fmt}}


SURFACES = {
    "tools": (CHAT, _tool_body),
    "response_format": (CHAT, _format_body),
    "text.format": (RESPONSES, _responses_body),
}


def _send(http: httpx.Client, surface: str, name: str) -> httpx.Response:
    path, body = SURFACES[surface]
    return post(http, path, body(HOSTILE[name][0]))


@pytest.mark.parametrize("surface", sorted(SURFACES))
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_schema_is_a_400_naming_the_problem(
    http: httpx.Client, surface: str, name: str
) -> None:
    response = _send(http, surface, name)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    if surface == "tools" and name in STRICT_TOOL_REFUSALS:
        assert "is not allowed" in message, message  # the tool keyword check comes first
    else:
        assert HOSTILE[name][1] in message, message


def test_unsatisfiable_any_of_branch_is_skipped(http: httpx.Client) -> None:
    bad = {"type": "string", "minLength": 5, "maxLength": 2}
    schema = _object({"anyOf": [bad, {"type": "integer"}]})
    for _ in range(5):
        response = post(http, CHAT, _format_body(schema))
        assert response.status_code == 200, response.text


@pytest.mark.timing
def test_hostile_schemas_are_fast_and_health_keeps_answering(http: httpx.Client) -> None:
    jobs = [(surface, name) for surface in SURFACES for name in HOSTILE]
    started = time.perf_counter()
    with (
        httpx.Client(base_url=str(http.base_url), timeout=5) as side,
        ThreadPoolExecutor(4) as pool,
    ):
        futures = [pool.submit(_send, http, surface, name) for surface, name in jobs]
        health = []
        while not all(f.done() for f in futures):
            before = time.perf_counter()
            status = side.get("/health").status_code
            health.append((status, time.perf_counter() - before))
        responses = [f.result() for f in futures]
    elapsed = time.perf_counter() - started
    assert all(r.status_code == 400 for r in responses)
    assert elapsed < 1.0 * len(jobs) / 4 + 1.0, elapsed
    assert all(status == 200 and took < 1.0 for status, took in health), health
    assert http.get("/health").status_code == 200


@pytest.mark.timing
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_schema_is_answered_within_a_second(http: httpx.Client, name: str) -> None:
    for surface in SURFACES:
        started = time.perf_counter()
        assert _send(http, surface, name).status_code == 400
        assert time.perf_counter() - started < 1.0, (surface, name)
