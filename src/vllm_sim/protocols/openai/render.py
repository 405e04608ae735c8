"""POST /v1/completions/render and /v1/chat/completions/render: the prompt as tokens.

Nothing is generated, queued or counted; the answer is what the engine would receive.
"""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import decode_body
from vllm_sim.frontend.context import ApiContext
from vllm_sim.http.messages import AnyResponse, HttpRequest
from vllm_sim.protocols.common.answers import json_response
from vllm_sim.protocols.common.chat_messages import ChatMessage
from vllm_sim.protocols.common.conversation import mm_features, read_conversation, render
from vllm_sim.protocols.openai.chat import ChatRequest
from vllm_sim.protocols.openai.completions import parse_prompts


class CompletionRenderRequest(msgspec.Struct):
    model: str | None = None
    prompt: Any = None
    add_special_tokens: bool = True


_completion_decoder = msgspec.json.Decoder(CompletionRenderRequest)


class ChatRenderRequest(ChatRequest, kw_only=True):
    """A chat request whose messages may be missing: render names that in its own words."""

    messages: list[ChatMessage] = msgspec.field(default_factory=list)


_chat_decoder = msgspec.json.Decoder(ChatRenderRequest)


def render_completion(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _completion_decoder)
    ctx.resolve_model(body.model)
    prompts = parse_prompts(body.prompt, ctx.tokenizer, body.add_special_tokens)
    headers = ctx.response_headers(ctx.request_id(request))
    return json_response([{"token_ids": p.token_ids} for p in prompts], headers=headers)


def render_chat(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _chat_decoder)
    ctx.resolve_model(body.model)
    if not body.messages:
        raise RequestError(400, "messages must not be empty", "messages")
    conversation = read_conversation(body.messages)
    text = render(ctx.tokenizer, body.messages, conversation, body)
    ids, pieces = ctx.tokenizer.tokenize(text, body.add_special_tokens)
    answer: dict[str, Any] = {"token_ids": ids}
    features = mm_features(conversation, text, pieces)
    if features is not None:
        answer["features"] = features
    return json_response(answer, headers=ctx.response_headers(ctx.request_id(request)))
