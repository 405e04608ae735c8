"""What the OpenAI-style protocols' answers share: streamed chunks spliced from bytes
precomputed per request, the plain answer written straight from parts, SSE framing of
named events, and the keys every chat or completion answer starts with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgspec
from mypy_extensions import mypyc_attr

from vllm_sim.engine.finish import Finish
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.errors import RequestError
from vllm_sim.frontend.endpoint import Call
from vllm_sim.frontend.envelope import error_body
from vllm_sim.frontend.usage import PromptDetails, usage_of

L = TypeVar("L")


def error_event(error: RequestError) -> bytes:
    return b"data: " + error_body(error) + b"\n\ndata: [DONE]\n\n"


# Compiled by mypyc (setup.py): the chunk encoders of some protocols, interpreted, derive
# from it.
@mypyc_attr(allow_interpreted_subclasses=True)
class OpenAIStreamErrors:
    """The error event of OpenAI-style streams: the error body, then [DONE]."""

    def error(self, error: RequestError) -> bytes:
        return error_event(error)


@dataclass(frozen=True, slots=True)
class AnswerShape:
    """What a chat or completion answer carries beside its tokens, fixed per request."""

    rid: str
    model: str
    include_usage: bool = False  # stream_options.include_usage: a usage chunk at the end
    continuous_usage: bool = False  # ...and continuous_usage_stats: usage on every chunk
    token_ids: bool = False  # return_token_ids: the tokens' ids, and the prompt's
    fingerprint: str = ""  # system_fingerprint, on the answer or the stream's last chunk
    details: PromptDetails = "none"  # --enable-prompt-tokens-details


def answer_shape(call: Call[Any], prefix: str) -> AnswerShape:
    """What a chat or completion answer carries beside its choices; its id is `prefix`
    and the request id."""
    options, settings = call.options, call.ctx.settings
    return AnswerShape(
        prefix + call.request_id,
        call.model,
        options.include_usage,
        options.continuous_usage,
        options.token_ids,
        settings.system_fingerprint,
        prompt_details(settings.prompt_tokens_details, prefix == "chatcmpl-"),
    )


@mypyc_attr(allow_interpreted_subclasses=True)
class OpenAIChunks(OpenAIStreamErrors):
    """What chat and completion chunks share: one choice per chunk, spliced from bytes
    precomputed per request around each token; the last token's chunk carries the finish
    (vLLM sends no chunk of its own for it); then the usage chunk and [DONE]."""

    def __init__(self, stream: RequestStream, shape: AnswerShape, kind: str) -> None:
        """`kind`: the chunks' `object` (a subclass's own: compiled, a class attribute
        overridden by an interpreted subclass would not be seen here)."""
        self._object = kind
        self._stream = stream
        self._shape = shape
        self._created = int(stream.request.arrival_time)
        self._unfinished = len(stream.sequences)
        self._folded: set[int] = set()  # choices whose finish rode on a token chunk
        self._head = (
            b'data: {"id":'
            + json_str(shape.rid)
            + b',"object":'
            + json_str(kind)
            + b',"created":'
            + str(self._created).encode()
            + b',"model":'
            + json_str(shape.model)
            + b',"choices":[{"index":'
        )
        self._fingerprint = b',"system_fingerprint":' + json_str(shape.fingerprint)
        self._plain = not (shape.continuous_usage or shape.token_ids)

    def _folds(self, seq: Sequence, end: int) -> bool:
        """Whether the token chunk ending at `end` carries the finish: it is the last token
        of a choice that has ended (an omni choice ends with its image chunk instead)."""
        if end != len(seq.output_ids) or not seq.finished or seq.request.with_image:
            return False
        self._folded.add(seq.index)
        return True

    @staticmethod
    def _ending(seq: Sequence, finish_reason: str | None) -> bytes:
        """The finish keys of a choice's last chunk: finish_reason and stop_reason."""
        reason = seq.stop_reason
        stop = b"null" if reason is None else _encode(reason)
        return (
            b',"finish_reason":'
            + json_str(finish_reason or Finish.STOP)
            + b',"stop_reason":'
            + stop
        )

    def _top(self, seq: Sequence, completion_tokens: int, last: bool) -> bytes:
        """The keys after `choices`: running usage, and the fingerprint on the last chunk."""
        extra = b""
        if self._shape.continuous_usage:
            extra = b',"usage":' + _encode(running_usage(seq, completion_tokens))
        if last:
            self._unfinished -= 1
            if self._unfinished == 0 and not self._shape.include_usage:
                extra += self._fingerprint
        return extra

    def _token_ids(self, seq: Sequence, i: int) -> bytes:
        if not self._shape.token_ids:
            return b'"token_ids":null'
        return b'"token_ids":[' + str(seq.output_ids[i]).encode() + b"]"

    def closing(self, stream: RequestStream) -> bytes:
        """The optional usage chunk (no choices, carrying the fingerprint), then [DONE]."""
        if not self._shape.include_usage:
            return b"data: [DONE]\n\n"
        chunk = {
            "id": self._shape.rid,
            "object": self._object,
            "created": self._created,
            "model": self._shape.model,
            "choices": [],
            "usage": usage_of(stream.sequences).stream_json(self._shape.details),
            "system_fingerprint": self._shape.fingerprint,
        }
        return b"data: " + _encode(chunk) + b"\n\ndata: [DONE]\n\n"


def running_usage(seq: Sequence, completion_tokens: int) -> dict[str, object]:
    """The usage a chunk carries with continuous_usage_stats: its choice's tokens so far
    (with a reasoning parser, the reasoning ones among them)."""
    prompt = seq.prompt_tokens
    details = None
    if seq.request.reasoning is not None:
        details = {"reasoning_tokens": min(completion_tokens, seq.reasoning_tokens)}
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion_tokens,
        "completion_tokens": completion_tokens,
        "completion_tokens_details": details,
    }


def named_event(name: str, payload: object) -> bytes:
    """`event: <name>` framing, as the Responses and Anthropic streams use."""
    return b"event: " + name.encode() + b"\ndata: " + _encode(payload) + b"\n\n"


_encode = msgspec.json.encode


def json_str(text: str) -> bytes:
    """A JSON string literal (with quotes), for splicing into precomputed chunks."""
    return _encode(text)


def encoded_choices(
    stream: RequestStream, choice: Callable[[Sequence, L], dict[str, Any]], how: L
) -> list[Any]:
    """`choice(seq, how)` of each sequence, each encoded on its own: an answer too large
    for the event loop is built on a thread, and one encode of all of it would hold the
    GIL throughout."""
    sequences = stream.sequences
    if len(sequences) == 1:
        return [choice(sequences[0], how)]  # nothing to split: encoded with the answer
    return [msgspec.Raw(_encode(choice(seq, how))) for seq in sequences]


class PlainTest(Protocol):
    """What a request asked for that rules out a plain answer (the protocol's options)."""

    @property
    def logprobs(self) -> int | None: ...
    @property
    def token_ids(self) -> bool: ...
    @property
    def prompt_logprobs(self) -> int | None: ...
    @property
    def transfer(self) -> object | None: ...


def plain_sequence(options: PlainTest, stream: RequestStream) -> Sequence | None:
    """The one sequence of a request whose answer may be written plain: one choice with no
    logprobs, token ids, prompt logprobs, transfer, tools or image. None otherwise."""
    sequences = stream.sequences
    if len(sequences) != 1 or options.logprobs is not None or options.token_ids:
        return None
    if options.prompt_logprobs is not None or options.transfer is not None:
        return None
    seq = sequences[0]
    if seq.tool_calls is not None or seq.request.with_image or seq.finish_reason in _NOT_PLAIN:
        return None
    if seq.request.reasoning is not None:  # a reasoning part, reasoning tokens in the usage
        return None
    return seq


_NOT_PLAIN = (Finish.CACHE_THRESHOLD, Finish.TOOL_CALLS)


def plain_template(obj: bytes, choice_tail: bytes, answer_tail: bytes) -> PlainTemplate:
    """A protocol's plain answer around the parts that vary: its `object` (JSON), the keys
    of its choice after `token_ids`, and those of the answer after `usage`."""
    return (
        b',"object":' + obj + b',"created":',
        b',"token_ids":null' + choice_tail + b'}],"service_tier":null,"system_fingerprint":',
        answer_tail,
    )


PlainTemplate = tuple[bytes, bytes, bytes]


def plain_object(
    stream: RequestStream, rid: str, model: str, template: PlainTemplate, text: bytes, shape: Plain
) -> bytes:
    """The bytes `openai_object` encodes for a plain answer (see plain_sequence), from the
    protocol's `plain_template` and its one choice's keys up to its text (`text`); `shape`
    is the fingerprint and which prompt token details are listed."""
    fingerprint, details = shape
    seq = stream.sequences[0]
    usage = usage_of(stream.sequences).openai_json(details)
    head, middle, tail = template
    return b"".join(
        (
            b'{"id":',
            _encode(rid),
            head,
            str(int(stream.request.arrival_time)).encode(),
            b',"model":',
            _encode(model),
            b',"choices":[',
            text,
            b',"finish_reason":',
            _encode(seq.finish_reason),
            b',"stop_reason":',
            _encode(seq.stop_reason),
            middle,
            _encode(fingerprint),
            b',"usage":',
            _encode(usage),
            tail,
        )
    )


Plain = tuple[str, PromptDetails]


def prompt_details(enabled: bool, chat: bool) -> PromptDetails:
    """The prompt token details an answer lists: none without
    --enable-prompt-tokens-details; a chat answer's count what the prompt stored too."""
    if not enabled:
        return "none"
    return "created" if chat else "cached"


def openai_object(
    stream: RequestStream, shape: AnswerShape, obj: str, choices: list[Any]
) -> dict[str, Any]:
    """The keys a chat or text completion starts with, as vLLM sends them."""
    return {
        "id": shape.rid,
        "object": obj,
        "created": int(stream.request.arrival_time),
        "model": shape.model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": shape.fingerprint,
        "usage": usage_of(stream.sequences).openai_json(shape.details),
    }
