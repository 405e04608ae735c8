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


@dataclass
class StreamedChoice:
    """One choice of a chat or completion stream, as its chunks told it."""

    role_chunks: int = 0
    pieces: list[str] = field(default_factory=list)  # token texts, the end of sequence aside
    finish_reason: str | None = None
    stop_reason: object = None
    eos: bool = False  # ended by its end-of-sequence token: an empty last chunk

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def tokens(self) -> int:
        """The tokens usage counts for it: its text tokens and its end of sequence."""
        return len(self.pieces) + self.eos


@dataclass
class Stream:
    """A chat or completion stream read whole: its choices, usage, ids and fingerprint."""

    choices: dict[int, StreamedChoice]
    usage: dict[str, Any] | None
    ids: set[str]
    fingerprint: str


_CHUNK_KEYS = frozenset({"id", "object", "created", "model", "choices"})
_CHAT_ROLE_KEYS = frozenset({"index", "delta", "logprobs", "finish_reason"})
_CHAT_TOKEN_KEYS = _CHAT_ROLE_KEYS | {"token_ids"}
_COMPLETION_CHUNK_KEYS = frozenset(
    {"index", "text", "logprobs", "finish_reason", "stop_reason", "prompt_token_ids", "token_ids"}
)


def _stream_chunks(
    sse: SSE, obj: str, include_usage: bool
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, str]:
    """Checks what every chunk shares; returns the choice chunks (their keys are left to the
    caller, the fingerprint removed), the usage (or None) and the system fingerprint, which
    rides on the usage chunk, or without one on the stream's last chunk."""
    chunks = [dict(chunk) for chunk in sse.chunks]
    assert chunks, "a stream has chunks before [DONE]"
    first = chunks[0]
    for chunk in chunks:
        assert chunk["object"] == obj, chunk
        assert chunk["id"] == first["id"]
        assert chunk["created"] == first["created"]
        assert chunk["model"] == first["model"]
        assert type(chunk["created"]) is int
        assert "usage" not in chunk or include_usage, "usage only when asked for"
    last = chunks.pop()
    fingerprint = last.pop("system_fingerprint", None)
    assert isinstance(fingerprint, str), f"the last chunk carries the fingerprint: {last}"
    assert re.fullmatch(FINGERPRINT_RE, fingerprint), fingerprint
    assert not any("system_fingerprint" in chunk for chunk in chunks), "only on the last"
    usage_value = None
    if include_usage:
        assert set(last) == _CHUNK_KEYS | {"usage"}, last
        assert last["choices"] == []
        usage_value = last["usage"]
        assert isinstance(usage_value, dict)
    else:
        chunks.append(last)
    for chunk in chunks:
        assert "usage" not in chunk, "usage rides on the usage chunk alone"
        assert len(chunk["choices"]) == 1, chunk
    return chunks, usage_value, fingerprint


def _finish(state: StreamedChoice, choice: dict[str, Any], text: str) -> None:
    """Records a choice's finish, carried by the chunk of its last token: with an empty text,
    its end-of-sequence token, which only a stop by the model itself has."""
    assert choice["finish_reason"] in ("stop", "length"), choice
    state.finish_reason = choice["finish_reason"]
    state.stop_reason = choice["stop_reason"]
    state.eos = text == ""
    natural = state.finish_reason == "stop" and state.stop_reason is None
    assert state.eos == natural, f"an end of sequence is a natural stop's last token: {choice}"


def chat_stream(sse: SSE, include_usage: bool = False, one_token: bool = True) -> Stream:
    """Parses a plain chat stream (no logprobs, token ids or tools), checking each choice's
    chunks: the role chunk first, then one chunk per token with its content, the last
    carrying the finish, and nothing after. The end-of-sequence token's chunk has an empty
    delta, as vLLM 0.32 sends it (its step adds no text)."""
    chunks, usage_value, fingerprint = _stream_chunks(sse, "chat.completion.chunk", include_usage)
    choices: dict[int, StreamedChoice] = {}
    for chunk in chunks:
        [choice] = chunk["choices"]
        state = choices.setdefault(choice["index"], StreamedChoice())
        assert state.finish_reason is None, "nothing after a choice's finish"
        delta = choice["delta"]
        if state.role_chunks == 0:
            assert set(chunk) == _CHUNK_KEYS | {"prompt_token_ids", "prompt_text"}, chunk
            assert chunk["prompt_token_ids"] is None and chunk["prompt_text"] is None
            assert set(choice) == _CHAT_ROLE_KEYS, choice
            assert delta == {"role": "assistant", "content": ""}, "role chunk comes first"
            assert choice["finish_reason"] is None
            assert choice["logprobs"] is None
            state.role_chunks = 1
            continue
        assert set(chunk) == _CHUNK_KEYS, chunk
        assert choice["token_ids"] is None and choice["logprobs"] is None
        if choice["finish_reason"] is None:
            assert set(choice) == _CHAT_TOKEN_KEYS, choice
        else:
            assert set(choice) == _CHAT_TOKEN_KEYS | {"stop_reason"}, choice
        if delta == {}:
            assert choice["finish_reason"] is not None, "an empty delta ends its choice"
            _finish(state, choice, "")
            continue
        assert set(delta) == {"content"}, delta
        content = delta["content"]
        assert isinstance(content, str)
        # Only the end of sequence has no text, and it has no `content` key at all.
        assert content, delta
        if choice["finish_reason"] is not None:
            _finish(state, choice, content)
        if one_token:
            assert is_one_token(content), content
        state.pieces.append(content)
    for state in choices.values():
        assert state.finish_reason is not None, "every choice ends with a finish"
    assert sorted(choices) == list(range(len(choices)))
    return Stream(choices, usage_value, {c["id"] for c in sse.chunks}, fingerprint)


def completion_stream(sse: SSE, include_usage: bool = False, one_token: bool = True) -> Stream:
    """Parses a plain completion stream (no logprobs, token ids or `echo`): one chunk per
    token, the last carrying the finish."""
    chunks, usage_value, fingerprint = _stream_chunks(sse, "text_completion", include_usage)
    choices: dict[int, StreamedChoice] = {}
    for chunk in chunks:
        assert set(chunk) == _CHUNK_KEYS, chunk
        [choice] = chunk["choices"]
        assert set(choice) == _COMPLETION_CHUNK_KEYS, choice
        assert choice["token_ids"] is None and choice["prompt_token_ids"] is None
        assert choice["logprobs"] is None
        state = choices.setdefault(choice["index"], StreamedChoice())
        assert state.finish_reason is None, "nothing after a choice's finish"
        text = choice["text"]
        assert isinstance(text, str)
        if choice["finish_reason"] is None:
            assert choice["stop_reason"] is None
        else:
            _finish(state, choice, text)
            if state.eos:
                continue
        assert text, "only the end of sequence has no text"
        if one_token:
            assert is_one_token(text), text
        state.pieces.append(text)
    for state in choices.values():
        assert state.finish_reason is not None, "every choice ends with a finish"
    assert sorted(choices) == list(range(len(choices)))
    return Stream(choices, usage_value, {c["id"] for c in sse.chunks}, fingerprint)


def usage(prompt: int, completion: int) -> dict[str, Any]:
    """The usage object of a non-streamed chat or completion answer, as vLLM sends it
    without --enable-prompt-tokens-details: its details are null."""
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def stream_usage(prompt: int, completion: int) -> dict[str, Any]:
    """The usage of a stream's usage chunk: the same counts, without the null details."""
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }


# A model that ends its answer by itself emits its end-of-sequence token: one more token
# (counted in completion_tokens, listed in logprobs and token_ids) whose text is empty.
EOS_TOKENS = 1

FINGERPRINT_RE = r"vllm-0\.32\.0-[0-9a-f]{8}"  # system_fingerprint: the release, a config hash

# Every key of vLLM's non-streamed answers, present even when null: chat answers list the
# prompt's logprobs, ids and text beside the keys both share.
COMPLETION_KEYS = frozenset(
    {
        "id",
        "object",
        "created",
        "model",
        "choices",
        "service_tier",
        "system_fingerprint",
        "usage",
        "kv_transfer_params",
        "ec_transfer_params",
        "metrics",
    }
)
CHAT_KEYS = COMPLETION_KEYS | {"prompt_logprobs", "prompt_token_ids", "prompt_text"}
CHAT_CHOICE_KEYS = frozenset(
    {"index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids", "routed_experts"}
)
MESSAGE_KEYS = frozenset(
    {"role", "content", "refusal", "annotations", "audio", "function_call", "reasoning"}
)
COMPLETION_CHOICE_KEYS = frozenset(
    {
        "index",
        "text",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "token_ids",
        "prompt_logprobs",
        "prompt_token_ids",
        "routed_experts",
    }
)


def assert_chat_shape(reply: dict[str, Any]) -> None:
    """Every key of a non-streamed chat answer, with the defaults of a plain request."""
    assert set(reply) == CHAT_KEYS, set(reply) ^ CHAT_KEYS
    assert reply["object"] == "chat.completion"
    assert reply["service_tier"] is None
    assert re.fullmatch(FINGERPRINT_RE, reply["system_fingerprint"]), reply["system_fingerprint"]
    for key in ("prompt_text", "ec_transfer_params", "metrics"):
        assert reply[key] is None, key
    for choice in reply["choices"]:
        assert set(choice) == CHAT_CHOICE_KEYS, set(choice) ^ CHAT_CHOICE_KEYS
        assert choice["routed_experts"] is None
        message = choice["message"]
        extra = {"tool_calls"} if "tool_calls" in message else set()
        assert set(message) == MESSAGE_KEYS | extra, set(message) ^ MESSAGE_KEYS
        assert message["role"] == "assistant"
        for key in ("refusal", "annotations", "audio", "function_call", "reasoning"):
            assert message[key] is None, key


def assert_completion_shape(reply: dict[str, Any]) -> None:
    """Every key of a non-streamed text completion, with the defaults of a plain request."""
    assert set(reply) == COMPLETION_KEYS, set(reply) ^ COMPLETION_KEYS
    assert reply["object"] == "text_completion"
    assert reply["service_tier"] is None
    assert re.fullmatch(FINGERPRINT_RE, reply["system_fingerprint"]), reply["system_fingerprint"]
    for key in ("ec_transfer_params", "metrics"):
        assert reply[key] is None, key
    for choice in reply["choices"]:
        assert set(choice) == COMPLETION_CHOICE_KEYS, set(choice) ^ COMPLETION_CHOICE_KEYS
        assert choice["routed_experts"] is None


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
    """Arrival times of the (time, chunk) SSE events of a text stream that carry a generated
    token: one per event, or with `per_choice` one per choice that carries one. A token is
    text, or the end-of-sequence token: on the chunk that finishes its choice with "stop",
    a completion's empty text or a chat's empty delta (vLLM 0.32 sends it as `{}`)."""
    times = []
    for at, event in events:
        for choice in event.get("choices", []):
            if "text" in choice:
                text = choice["text"]
                eos = text == ""
            else:
                delta = choice.get("delta")
                text = delta.get("content") if isinstance(delta, dict) else None
                eos = delta == {}
            if text or (eos and choice.get("finish_reason") == "stop"):
                times.append(at)
                if not per_choice:
                    break
    return times
