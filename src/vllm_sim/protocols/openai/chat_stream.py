"""The chunks of a streamed chat completion, spliced from bytes precomputed per request
around each token. Compiled by mypyc (setup.py): it runs for every token of every stream,
so it lives apart from the request types (msgspec Structs, which stay interpreted)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from vllm_sim.engine.finish import Finish
from vllm_sim.engine.generation.toolcalls import ToolCallOutput
from vllm_sim.engine.sequence import RequestStream, Sequence
from vllm_sim.frontend.omni import image_block
from vllm_sim.protocols.common.encoding import AnswerShape, OpenAIChunks, json_str
from vllm_sim.protocols.common.logprobs import ChatLogprobs

# How a request chose its tools (tool_choice): it decides how a call is reported.
ToolMode = Literal["auto", "required", "named"]
_encode = msgspec.json.encode


def finish_reason(seq: Sequence, tool_mode: ToolMode) -> str | None:
    """vLLM reports a call to a named tool as an ordinary stop."""
    if tool_mode == "named" and seq.finish_reason == Finish.TOOL_CALLS:
        return Finish.STOP
    return seq.finish_reason


TOOL_CALL_PREFIX = "chatcmpl-tool-"
_IMAGE_DELTA = msgspec.json.encode({"content": [image_block()]})


def _tool_call_delta(calls: list[ToolCallOutput], i: int, piece: str) -> bytes:
    """One argument token of a call; its first also names the call, as the OpenAI SDK's
    stream helper expects (it concatenates repeated string fields)."""
    index = next(k for k, call in enumerate(calls) if call.start <= i < call.end)
    call = calls[index]
    entry: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
    if i == call.start:
        entry = {
            "index": index,
            "id": TOOL_CALL_PREFIX + call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": piece},
        }
    return msgspec.json.encode({"content": None, "tool_calls": [entry]})


def _text_block_delta(piece: str) -> bytes:
    return b'{"content":[{"type":"text","text":' + json_str(piece) + b"}]}"


class ChatChunks(OpenAIChunks):
    """Chat completion chunks, spliced from precomputed bytes around each token."""

    def __init__(
        self,
        stream: RequestStream,
        shape: AnswerShape,
        top: int,
        tool_mode: ToolMode,
        hide_reasoning: bool = False,
    ) -> None:
        super().__init__(stream, shape, "chat.completion.chunk")
        self._logprobs = ChatLogprobs(top) if top >= 0 else None
        self._tool_mode = tool_mode
        # include_reasoning false: reasoning tokens send no chunk (the last one, if it ends
        # the answer, an empty delta with the finish), content ones `"reasoning":null`.
        self._hide_reasoning = hide_reasoning
        self._plain_tail = b'},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'

    def opening(self, seq: Sequence) -> bytes:
        if seq.finish_reason == Finish.CACHE_THRESHOLD:
            return b""  # a refused choice is one finish chunk, nothing before it
        prompt_ids = _encode(seq.prompt.token_ids) if self._shape.token_ids else b"null"
        return (
            self._head
            + str(seq.index).encode()
            + b',"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
            + self._top(seq, 0, False)
            + b',"prompt_token_ids":'
            + prompt_ids
            + b',"prompt_text":null}\n\n'
        )

    def tokens(self, seq: Sequence, start: int, end: int) -> bytes:
        folds = self._folds(seq, end)
        stop = end - 1 if folds else end
        pieces = seq.output_pieces
        hidden = self._hide_reasoning
        plain = self._plain and self._logprobs is None and seq.tool_calls is None
        if plain and not seq.request.with_image and start >= seq.reasoning_tokens and not hidden:
            head = self._head + str(seq.index).encode() + b',"delta":{"content":'
            tail = self._plain_tail
            encode = _encode  # not json_str: one Python call less per token
            parts = [head + encode(piece) + tail for piece in pieces[start:stop]]
            if folds:
                parts.append(self._token_chunk(seq, end - 1, True))
            return b"".join(parts)
        # Hidden reasoning tokens send nothing (but the last one, if it ends the answer).
        first = max(start, seq.reasoning_tokens) if hidden else start
        parts = [self._token_chunk(seq, i, False) for i in range(first, stop)]
        if folds:
            parts.append(self._token_chunk(seq, end - 1, True))
        return b"".join(parts)

    def _token_chunk(self, seq: Sequence, i: int, last: bool) -> bytes:
        return self._choice_chunk(seq, self._delta(seq, i), self._token_logprobs(seq, i), i, last)

    def _choice_chunk(
        self, seq: Sequence, delta: bytes, logprobs: bytes, i: int, last: bool
    ) -> bytes:
        """One choice's chunk for its token `i` (-1: none); `last` adds its finish."""
        reason = self._finish_reason_of(seq)
        ending = self._ending(seq, reason) if last else b',"finish_reason":null'
        token_ids = self._token_ids(seq, i) if i >= 0 else b'"token_ids":null'
        return (
            self._head
            + str(seq.index).encode()
            + b',"delta":'
            + delta
            + b',"logprobs":'
            + logprobs
            + ending
            + b","
            + token_ids
            + b"}]"
            + self._top(seq, i + 1 if i >= 0 else seq.emitted, last)
            + b"}\n\n"
        )

    def _finish_reason_of(self, seq: Sequence) -> str | None:
        return finish_reason(seq, self._tool_mode)

    def _delta(self, seq: Sequence, i: int) -> bytes:
        piece = seq.output_pieces[i]
        if seq.eos and i == len(seq.output_ids) - 1:
            return b"{}"  # the end-of-sequence step says nothing, as vLLM's does
        if seq.tool_calls is not None:
            return _tool_call_delta(seq.tool_calls, i, piece)
        if i < seq.reasoning_tokens:
            if self._hide_reasoning:
                return b"{}"
            return b'{"reasoning":' + json_str(piece) + b"}"  # vLLM's parsers' delta key
        if self._hide_reasoning and seq.request.reasoning is not None:
            return b'{"content":' + json_str(piece) + b',"reasoning":null}'
        if seq.request.with_image:
            return _text_block_delta(piece)  # an omni answer streams its text as blocks
        return b'{"content":' + json_str(piece) + b"}"

    def _token_logprobs(self, seq: Sequence, i: int) -> bytes:
        if self._logprobs is None or seq.tool_calls is not None:
            return b"null"
        return b'{"content":[' + self._logprobs.entry(seq.output_pieces[i], i) + b"]}"

    def finish(self, seq: Sequence) -> bytes:
        """The finish of a choice no token chunk could carry: one refused before any
        token, or an omni answer, whose image follows its text."""
        if seq.index in self._folded:
            return b""
        done = self._choice_chunk(seq, b"{}", b"null", -1, True)
        if not seq.request.with_image:
            return done
        image = self._choice_chunk(seq, _IMAGE_DELTA, b"null", -1, False)
        # The image chunk names its modality beside the choices, as omni servers do.
        return image.replace(b"}\n\n", b',"modality":"image"}\n\n', 1) + done
