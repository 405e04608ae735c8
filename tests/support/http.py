"""Wire-level helpers for the chat/completions HTTP tests: posting, SSE parsing, checks."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.errors import VALIDATION_PREFIX as VALIDATION_PREFIX

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"
# How this server words a body only it refuses (NaN, a lone surrogate, too deep).
PARSE_PREFIX = "Failed to read and parse request body, "
PROMPT_FORMS = (
    "prompt must be a string, an array of strings, an array of token ids, "
    "or an array of arrays of token ids"
)

# The 11-sentence bank of random mode (the reference's sentences).
SENTENCES = (
    "Testing@, #testing 1$ ,2%,3^, [4&*5], 6~, 7-_ + (8 : 9) / \\ < > . ",
    "Testing, testing 1,2,3. ",
    "I am fine, how are you today? ",
    "I am your AI assistant, how can I help you today? ",
    "Today is a nice sunny day. ",
    "The temperature here is twenty-five degrees centigrade. ",
    "Today it is partially cloudy and raining. ",
    "To be or not to be that is the question. ",
    "Alas, poor Yorick! I knew him, Horatio: A fellow of infinite jest ",
    "The rest is silence. ",
    "Give a man a fish and you feed him for a day; "
    "teach a man to fish and you feed him for a lifetime ",
)

# The simulated tokenizer on ASCII text: one punctuation character or one word run, each
# followed by its trailing whitespace.
_PUNCT = r"""[{}:,\-.?!;@#$%^&*()+_~/\\><\[\]="']"""
_TOKEN = rf"(?:{_PUNCT}|[A-Za-z0-9_]+)[ \t\n\f\r]*"
_TOKEN_RE = re.compile(_TOKEN)
_ONE_TOKEN_RE = re.compile(rf"^{_TOKEN}$")


REQUEST_ID_RE = r"[0-9a-f]{16}"  # vLLM's request ids: 16 hex characters


def ascii_tokens(text: str) -> list[str]:
    """The simulated tokenizer's pieces of an ASCII text (they must join back to it)."""
    pieces = _TOKEN_RE.findall(text)
    assert "".join(pieces) == text, f"not tokenizable as ASCII simulated tokens: {text!r}"
    return pieces


def is_one_token(piece: str) -> bool:
    return bool(_ONE_TOKEN_RE.match(piece))


def logprob(position: int) -> float:
    """The synthetic logprob of the token at position p: L(p) = -1.0 - (p mod 3) * 0.1."""
    return -(10 + position % 3) / 10


def is_bank_text(text: str) -> bool:
    """Whole sentences of the bank, then a (possibly empty) prefix of one more."""
    if any(sentence.startswith(text) for sentence in SENTENCES):
        return True
    return any(text.startswith(s) and is_bank_text(text[len(s) :]) for s in SENTENCES)


def post(
    client: httpx.Client,
    path: str,
    body: Any,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """POSTs `body` (bytes/str sent verbatim, anything else as JSON) as application/json,
    unless `headers` names another content type."""
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    given = {name.lower(): value for name, value in (headers or {}).items()}
    headers = {"content-type": "application/json", **given}
    return client.post(path, content=content, headers=headers, **kwargs)


def json_ok(response: httpx.Response) -> dict[str, Any]:
    """The JSON body of an answer that must be a 200 in application/json."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    return body


def chat_body(content: str = "Hello", **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], **extra}


@dataclass
class SSE:
    """A parsed server-sent-events body: JSON chunks, in order, before `[DONE]`."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    raw: bytes = b""


def parse_sse(raw: bytes) -> SSE:
    """Strict framing: only `data: <json>\\n\\n` events, ending with `data: [DONE]\\n\\n`."""
    assert raw.endswith(b"data: [DONE]\n\n"), raw[-200:]
    events = raw.split(b"\n\n")
    assert events[-1] == b"", "body must end right after the last event"
    events = events[:-1]
    assert events[-1] == b"data: [DONE]"
    result = SSE(raw=raw)
    for event in events[:-1]:
        assert event.startswith(b"data: "), event
        assert b"\n" not in event, f"one line per event: {event!r}"
        payload = event[len(b"data: ") :]
        assert payload != b"[DONE]", "[DONE] must come last, once"
        chunk = json.loads(payload)
        assert isinstance(chunk, dict)
        result.chunks.append(chunk)
    return result


def stream_post(client: httpx.Client, path: str, body: dict[str, Any]) -> SSE:
    response = post(client, path, body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.content)


def usage(prompt: int, completion: int) -> dict[str, Any]:
    """The usage object every non-streaming response (and usage chunk) carries."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


@dataclass
class SseReply:
    """A streamed answer read whole: each SSE `data:` payload (`[DONE]` included) with its
    arrival time in seconds from the send, or for a status other than 200 the body."""

    status: int
    headers: httpx.Headers
    data: list[tuple[float, str]]
    body: bytes = b""


def post_sse(
    client: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> SseReply:
    """POSTs a (streaming) request and reads the answer line by line as it arrives."""
    start = time.monotonic()
    with client.stream("POST", path, json=body, headers=headers) as response:
        if response.status_code != 200:
            return SseReply(response.status_code, response.headers, [], response.read())
        data = [
            (time.monotonic() - start, line[len("data: ") :])
            for line in response.iter_lines()
            if line.startswith("data: ")
        ]
        return SseReply(response.status_code, response.headers, data)


def sse_events(
    data: Sequence[tuple[float, str]],
) -> tuple[list[tuple[float, dict[str, Any]]], bool]:
    """The JSON events of timed `data:` payloads, with their times, and whether `[DONE]` came."""
    events = [(at, json.loads(payload)) for at, payload in data if payload != "[DONE]"]
    return events, any(payload == "[DONE]" for _, payload in data)


def token_times(events: list[tuple[float, dict[str, Any]]], *, per_choice: bool) -> list[float]:
    """Arrival times of the (time, chunk) SSE events that carry generated text: one per event,
    or with `per_choice` one per choice that carries text."""
    times = []
    for at, event in events:
        for choice in event.get("choices", []):
            text = choice.get("text")
            if text is None:
                text = (choice.get("delta") or {}).get("content")
            if text:
                times.append(at)
                if not per_choice:
                    break
    return times
