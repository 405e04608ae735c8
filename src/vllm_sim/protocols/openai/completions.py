"""POST /v1/completions: the legacy text API, with its four prompt forms."""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_sim.engine.request import Prompt
from vllm_sim.engine.sequence import Sequence
from vllm_sim.engine.tokenizer import Tokenizer
from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import PARSE_ERROR_PREFIX
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.endpoint import Call, Endpoint, Options, Plan
from vllm_sim.protocols.common.encoding import (
    AnswerShape,
    OpenAIChunks,
    answer_shape,
    encoded_choices,
    json_str,
    openai_object,
    plain_object,
    plain_sequence,
    plain_template,
    prompt_details,
)
from vllm_sim.protocols.common.logprobs import (
    CompletionLogprobs,
    check_logprobs_count,
    prompt_logprobs,
)
from vllm_sim.protocols.common.prompts import in_vocabulary
from vllm_sim.protocols.common.sampling import CompletionSampling, sampling_options

PROMPT_FORMS = (
    "prompt must be a string, an array of strings, an array of token ids, "
    "or an array of arrays of token ids"
)
_MAX_TOKEN_ID = 2**32 - 1
# What vLLM generates for a completion that sets no max_tokens.
DEFAULT_MAX_TOKENS = 16
_encode = msgspec.json.encode


class CompletionRequest(CompletionSampling, kw_only=True):
    # One of four shapes msgspec cannot express as a union (it allows one array type in a
    # union), so parse_prompts checks it.
    prompt: Any = None
    n: int | None = None
    max_tokens: int | None = None
    cache_hit_threshold: float | None = None
    logprobs: int | None = None


def _is_token_id(value: object) -> bool:
    return type(value) is int and 0 <= value <= _MAX_TOKEN_ID


def parse_prompts(
    prompt: object, tokenizer: Tokenizer, add_special_tokens: bool = True
) -> list[Prompt]:
    """The prompt field as a list of prompts, each tokenized (or taken as token ids)."""
    if prompt is None or prompt == []:
        raise RequestError(400, "prompt array must contain at least one prompt", "prompt")
    if isinstance(prompt, str):
        prompt = [prompt]
    if not isinstance(prompt, list):
        raise RequestError(400, PARSE_ERROR_PREFIX + PROMPT_FORMS, "prompt")
    if all(isinstance(item, str) for item in prompt):
        if any(item == "" for item in prompt):
            raise RequestError(400, "prompt must not contain an empty string", "prompt")
        return [Prompt(tokenizer.encode(text, add_special_tokens), text) for text in prompt]
    if all(_is_token_id(item) for item in prompt):
        return [Prompt(in_vocabulary(prompt, tokenizer))]
    if all(isinstance(item, list) and all(_is_token_id(i) for i in item) for item in prompt):
        if any(not item for item in prompt):
            raise RequestError(400, "prompt must not contain an empty token-id array", "prompt")
        return [Prompt(in_vocabulary(item, tokenizer)) for item in prompt]
    raise RequestError(400, PARSE_ERROR_PREFIX + PROMPT_FORMS, "prompt")


class CompletionsEndpoint(Endpoint[CompletionRequest]):
    decoder = msgspec.json.Decoder(CompletionRequest)

    def options(self, body: CompletionRequest) -> Options:
        max_tokens = DEFAULT_MAX_TOKENS if body.max_tokens is None else body.max_tokens
        options = Options.of(
            body, max_tokens, "max_tokens", body.n, body.cache_hit_threshold, body.logprobs
        )
        return sampling_options(options, body)

    def plan(self, ctx: ApiContext, body: CompletionRequest) -> Plan:
        check_logprobs_count(body.logprobs, "logprobs")
        plan = Plan(parse_prompts(body.prompt, ctx.tokenizer, body.add_special_tokens))
        service = ctx.render_service
        if service is not None:
            plan.render = [
                None if p.echo_text is None else service.completion_call(p.echo_text)
                for p in plan.prompts
            ]
        return plan

    def chunks(self, call: Call[CompletionRequest]) -> CompletionChunks:
        return CompletionChunks(call, answer_shape(call, "cmpl-"))

    def answer(self, call: Call[CompletionRequest]) -> dict[str, Any] | bytes:
        plain = _plain_completion(call)
        if plain is not None:
            return plain
        shape = answer_shape(call, "cmpl-")
        how = ChoiceShape(call, shape)
        stream = call.stream
        answer = openai_object(
            stream, shape, "text_completion", encoded_choices(stream, _choice, how)
        )
        answer["kv_transfer_params"] = None
        answer["ec_transfer_params"] = None
        answer["metrics"] = None
        return answer


_PLAIN_TEMPLATE = plain_template(
    b'"text_completion"',
    b',"prompt_logprobs":null,"prompt_token_ids":null,"routed_experts":null',
    b',"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}',
)


def _plain_completion(call: Call[CompletionRequest]) -> bytes | None:
    """The common answer (one prompt and choice; no echo, logprobs, ids or transfer)
    written from precomputed parts: the same bytes as the general path's. None for any
    other answer."""
    if call.options.echo:
        return None
    stream = call.stream
    seq = plain_sequence(call.options, stream)
    if seq is None:
        return None
    text = b'{"index":0,"text":' + _encode("".join(seq.output_pieces)) + b',"logprobs":null'
    settings = call.ctx.settings
    shape = (settings.system_fingerprint, prompt_details(settings.prompt_tokens_details, False))
    return plain_object(stream, "cmpl-" + call.request_id, call.model, _PLAIN_TEMPLATE, text, shape)


class ChoiceShape:
    """How each choice of a request is written: its logprobs, the echoed prompt, ids."""

    def __init__(self, call: Call[CompletionRequest], shape: AnswerShape) -> None:
        top = call.body.logprobs
        self.logprobs = CompletionLogprobs(top) if top is not None else None
        self.echo = call.options.echo
        self.token_ids = shape.token_ids
        # An echo with logprobs lists the prompt's logprobs too, as vLLM computes them for it.
        prompt_logprobs = call.options.prompt_logprobs
        if prompt_logprobs is None and self.echo and top is not None:
            prompt_logprobs = top
        self.prompt_logprobs = prompt_logprobs
        self.tokenizer = call.ctx.tokenizer

    def prompt_text(self, prompt: Prompt) -> str:
        if prompt.echo_text is not None:
            return prompt.echo_text
        return self.tokenizer.decode(prompt.token_ids, skip_special_tokens=True)

    def prompt_pieces(self, prompt: Prompt) -> list[str]:
        """Each prompt token's text: the text's own pieces when they are its tokens, else
        each token decoded alone (the special tokens a tokenizer added show as themselves)."""
        if prompt.echo_text is not None:
            ids, pieces = self.tokenizer.tokenize(prompt.echo_text)
            if ids == prompt.token_ids:
                return pieces
        return [self.tokenizer.piece(token) for token in prompt.token_ids]


def _choice(seq: Sequence, how: ChoiceShape) -> dict[str, Any]:
    pieces = seq.output_pieces
    prompt = seq.prompt
    text = "".join(pieces)
    if how.echo:
        text = how.prompt_text(prompt) + text
    return {
        "index": seq.index,
        "text": text,
        "logprobs": _logprobs(seq, how),
        "finish_reason": seq.finish_reason,
        "stop_reason": seq.stop_reason,
        "token_ids": seq.output_ids if how.token_ids else None,
        "prompt_logprobs": prompt_logprobs(
            prompt.token_ids, how.prompt_logprobs, how.tokenizer.piece
        ),
        "prompt_token_ids": prompt.token_ids if how.token_ids else None,
        "routed_experts": None,
    }


def _logprobs(seq: Sequence, how: ChoiceShape) -> dict[str, Any] | None:
    """The choice's logprobs; with echo, the prompt's come first (nothing predicts the
    first prompt token, so its logprob is null)."""
    encoder = how.logprobs
    if encoder is None:
        return None
    if not how.echo:
        return encoder.of(seq.output_pieces, 0, 0)
    prompt_pieces = how.prompt_pieces(seq.prompt)
    echoed = encoder.of(prompt_pieces, 0, 0)
    if prompt_pieces:
        echoed["token_logprobs"][0] = None
        echoed["top_logprobs"][0] = None
    offset = sum(map(len, prompt_pieces))
    output = encoder.of(seq.output_pieces, len(prompt_pieces), offset)
    return {key: echoed[key] + output[key] for key in echoed}


class CompletionChunks(OpenAIChunks):
    """Text completion chunks: no role chunk, one chunk per token, the last carrying the
    finish; an echo leads the first chunk of each choice."""

    def __init__(self, call: Call[CompletionRequest], shape: AnswerShape) -> None:
        super().__init__(call.stream, shape, "text_completion")
        self._how = ChoiceShape(call, shape)
        self._offsets: dict[int, int] = {}
        self._started: set[int] = set()  # choices whose first chunk was sent
        self._plain_tail = (
            b',"logprobs":null,"finish_reason":null,"stop_reason":null,'
            b'"prompt_token_ids":null,"token_ids":null}]}\n\n'
        )

    def opening(self, seq: Sequence) -> bytes:
        return b""

    def tokens(self, seq: Sequence, start: int, end: int) -> bytes:
        folds = self._folds(seq, end)
        stop = end - 1 if folds else end
        parts = []
        if self._plain and self._how.logprobs is None and not self._how.echo:
            head = self._head + str(seq.index).encode() + b',"text":'
            tail = self._plain_tail
            pieces = seq.output_pieces
            encode = _encode  # not json_str: one Python call less per token
            parts = [head + encode(piece) + tail for piece in pieces[start:stop]]
        else:
            parts = [self._chunk(seq, i, False) for i in range(start, stop)]
        if folds:
            parts.append(self._chunk(seq, end - 1, True))
        return b"".join(parts)

    def _chunk(self, seq: Sequence, i: int, last: bool) -> bytes:
        """The chunk of token `i` (-1: a finish with no token); `last` adds the finish."""
        text = seq.output_pieces[i] if i >= 0 else ""
        first = seq.index not in self._started
        self._started.add(seq.index)
        if first and self._how.echo:
            text = self._how.prompt_text(seq.prompt) + text
        ending = (
            self._ending(seq, seq.finish_reason)
            if last
            else b',"finish_reason":null,"stop_reason":null'
        )
        prompt_ids = b"null"
        if first and self._shape.token_ids:
            prompt_ids = _encode(seq.prompt.token_ids)
        token_ids = self._token_ids(seq, i) if i >= 0 else b'"token_ids":null'
        return (
            self._head
            + str(seq.index).encode()
            + b',"text":'
            + json_str(text)
            + b',"logprobs":'
            + self._token_logprobs(seq, i)
            + ending
            + b',"prompt_token_ids":'
            + prompt_ids
            + b","
            + token_ids
            + b"}]"
            + self._top(seq, i + 1 if i >= 0 else seq.emitted, last)
            + b"}\n\n"
        )

    def _token_logprobs(self, seq: Sequence, i: int) -> bytes:
        encoder = self._how.logprobs
        if encoder is None or i < 0:
            return b"null"
        offset = self._offsets.get(seq.index, 0)
        piece = seq.output_pieces[i]
        self._offsets[seq.index] = offset + len(piece)
        return _encode(encoder.of([piece], i, offset))

    def finish(self, seq: Sequence) -> bytes:
        """The finish of a choice with no token to carry it (max_tokens 0, a refusal)."""
        if seq.index in self._folded:
            return b""
        return self._chunk(seq, -1, True)
