"""The comparison of two answers to one case, aspect by aspect."""

from __future__ import annotations

import json
from typing import Any

from conformance.case import Case, merged
from conformance.compare import Exchange, compare, mask_digits

JSON = {"content-type": "application/json"}
SSE = {"content-type": "text/event-stream; charset=utf-8"}
CASE = Case("c", "/v1/x", method="POST", body={})


def answer(document: Any, status: int = 200, **headers: str) -> Exchange:
    return Exchange(status, {**JSON, **headers}, json.dumps(document).encode())


def stream(*chunks: Any, done: bool = True) -> Exchange:
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return Exchange(200, dict(SSE), body + (b"data: [DONE]\n\n" if done else b""))


def aspects(case: Case, oracle: Exchange, sim: Exchange) -> list[tuple[str, str]]:
    return [(d.aspect, d.path) for d in compare(case, oracle, sim)]


def test_same_structure_different_content_is_no_difference() -> None:
    a = answer({"id": "cmpl-1a", "choices": [{"text": "hi", "index": 0}]})
    b = answer({"id": "cmpl-2b", "choices": [{"text": "yo", "index": 0}]})
    assert compare(CASE, a, b) == []


def test_status_header_and_keys() -> None:
    a = answer({"error": {"message": "m", "param": None}}, status=400)
    b = Exchange(404, {"content-type": "text/plain"}, b"nope")
    assert aspects(CASE, a, b) == [("status", ""), ("header", "content-type"), ("body-kind", "")]


def test_compared_headers_by_value() -> None:
    case = Case("c", "/", compare_headers=("allow",))
    a = answer({}, allow="POST")
    b = answer({}, allow="POST, OPTIONS")
    [diff] = compare(case, a, b)
    assert (diff.aspect, diff.path, diff.oracle, diff.sim) == (
        "header", "allow", "POST", "POST, OPTIONS",
    )  # fmt: skip


def test_error_messages_exact_masked_or_skipped() -> None:
    a = answer({"error": {"message": "limit 512, got 600"}}, status=400)
    b = answer({"error": {"message": "limit 512, got 613"}}, status=400)
    [diff] = compare(CASE, a, b)
    assert (diff.aspect, diff.path) == ("message", "error.message")
    assert compare(Case("c", "/", message="masked"), a, b) == []
    assert compare(Case("c", "/", message="skip"), a, b) == []
    assert mask_digits("max_tokens=5000 > 512") == "max_tokens=N > N"


def test_fastapi_detail_is_a_message_too() -> None:
    a = answer({"detail": "Not Found"}, status=404)
    b = answer({"detail": "Not found"}, status=404)
    assert aspects(CASE, a, b) == [("message", "detail")]


def test_transport_failure_is_reported_alone() -> None:
    broken = Exchange(0, error="ConnectionResetError: reset")
    [diff] = compare(CASE, answer({}), broken)
    assert diff.aspect == "transport" and "reset" in diff.sim


def role(index: int = 0) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": {"role": "assistant", "content": ""}}]}


def token(text: str, index: int = 0, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": {"content": text}, "finish_reason": finish}]}


def test_streams_of_one_chunk_per_token_match_whatever_the_text() -> None:
    a = stream(role(), token("a"), token("b"), token("c", finish="length"))
    b = stream(role(), token("x"), token("y"), token("z", finish="length"))
    assert compare(CASE, a, b) == []


def test_stream_chunk_counts_and_extra_chunks() -> None:
    a = stream(role(), token("a"), token("b"), token("c", finish="length"))
    b = stream(role(), token("a"), token("bc"), token("d"), token("", finish="length"))
    assert [d.aspect for d in compare(CASE, a, b)] == ["stream-count"]
    relaxed = Case("c", "/", counts=False)
    assert compare(relaxed, a, b) == []
    separate_finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    c = stream(role(), token("a"), token("b"), token("c"), separate_finish)
    found = aspects(CASE, a, c)
    assert ("stream-chunk", "choices[].delta.content") in found


def test_stream_terminator_and_chunk_keys() -> None:
    a = stream(role(), token("a", finish="length"))
    b = stream(role(), {**token("a", finish="length"), "usage": None}, done=False)
    found = aspects(CASE, a, b)
    assert ("framing", "terminator") in found
    assert ("stream-chunk", "usage") in found


def test_each_choice_is_compared_apart_and_interleaving_once() -> None:
    usage = {"choices": [], "usage": {"completion_tokens": 2}}
    a = stream(role(0), role(1), token("a", 0), token("b", 1), usage)
    b = stream(role(0), token("a", 0), role(1), token("b", 1), usage)
    [order] = compare(CASE, a, b)
    assert (order.aspect, order.oracle, order.sim) == (
        "stream-order",
        "interleaved: 0 1 0 1",
        "one after another: 0x2 1x2",
    )
    c = stream(role(0), token("a", 0), role(1), token("b", 1), token("c", 1), usage)
    assert [d.aspect for d in compare(CASE, b, c)] == ["stream-count"]


def test_merged_body_helper() -> None:
    base = {"a": 1, "b": 2}
    assert merged(base, b=None, c=3) == {"a": 1, "c": 3}
    assert base == {"a": 1, "b": 2}


def test_an_error_against_an_answer_shows_the_error_not_every_key() -> None:
    error = answer({"error": {"message": "suffix is not supported", "param": "suffix"}}, 400)
    ok = answer({"id": "cmpl-1", "choices": [], "usage": {}})
    found = compare(CASE, error, ok)
    assert [(d.aspect, d.oracle, d.sim) for d in found] == [
        ("status", "400", "200"),
        ("message", "suffix is not supported", "(no error)"),
    ]
