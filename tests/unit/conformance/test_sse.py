"""SSE parsing, framing facts and chunk-kind runs."""

from __future__ import annotations

from conformance.shape import ShapeRules
from conformance.sse import parse_sse, runs, summary

CHAT_STREAM = (
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":"c"},"finish_reason":"length"}]}\n\n'
    b"data: [DONE]\n\n"
)


def test_events_and_framing() -> None:
    events, framing = parse_sse(CHAT_STREAM)
    assert len(events) == 5
    assert events[-1].data == "[DONE]" and events[0].name is None
    assert framing.line_end == "\\n"
    assert framing.field_prefixes == ("data: ",)
    assert framing.terminator == "[DONE]"
    assert framing.ends_with_blank_line


def test_named_events_and_crlf() -> None:
    body = b'event: ping\r\ndata: {"type":"ping"}\r\n\r\nevent: done\r\ndata: {}\r\n\r\n'
    events, framing = parse_sse(body)
    assert [e.name for e in events] == ["ping", "done"]
    assert framing.line_end == "\\r\\n"
    assert framing.field_prefixes == ("event: ", "data: ")
    assert framing.terminator is None


def test_a_stream_cut_short_has_no_blank_line_at_the_end() -> None:
    _, framing = parse_sse(b'data: {"a":1}\n\ndata: {"a":2}')
    assert not framing.ends_with_blank_line


def test_runs_collapse_chunks_of_one_kind() -> None:
    events, _ = parse_sse(CHAT_STREAM)
    found = runs(events, ShapeRules())
    assert [r.count for r in found] == [1, 2, 1, 1]


def test_summary_names_a_chunk_kind() -> None:
    events, _ = parse_sse(CHAT_STREAM)
    last = runs(events, ShapeRules())[2].as_shape()
    text = summary(last)
    assert 'choices[].finish_reason="length"' in text
    assert "choices[].delta.content" in text
