"""POST /tokenize and /detokenize, shaped as vLLM answers them."""

from __future__ import annotations

from typing import Any

import msgspec

from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import decode_body
from vllm_sim.frontend.context import ApiContext
from vllm_sim.http.messages import AnyResponse, HttpRequest
from vllm_sim.protocols.common.answers import json_response
from vllm_sim.protocols.common.chat_messages import ChatMessage
from vllm_sim.protocols.common.conversation import read_conversation, render


class TokenizeRequest(msgspec.Struct):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    return_token_strs: bool | None = None
    add_special_tokens: bool | None = None  # default: True for a prompt, False for a chat
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Any] | None = None
    documents: list[dict[str, str]] | None = None


class DetokenizeRequest(msgspec.Struct):
    tokens: list[int]
    model: str | None = None


_tokenize_decoder = msgspec.json.Decoder(TokenizeRequest)
_detokenize_decoder = msgspec.json.Decoder(DetokenizeRequest)


def tokenize(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _tokenize_decoder)
    if body.prompt and body.messages is not None:
        raise RequestError(400, "both prompt and messages fields in tokenize request", "prompt")
    if body.prompt:
        ids = ctx.tokenizer.encode(body.prompt, _special(body.add_special_tokens, True))
    elif body.messages:
        conversation = read_conversation(body.messages)
        text = render(ctx.tokenizer, body.messages, conversation, body)
        ids = ctx.tokenizer.encode(text, _special(body.add_special_tokens, False))
    else:
        ids = []
    strs = ctx.tokenizer.token_strs(ids) if body.return_token_strs else None
    return json_response(
        {
            "count": len(ids),
            "max_model_len": ctx.settings.max_model_len,
            "tokens": ids,
            "token_strs": strs,
        }
    )


def _special(given: bool | None, default: bool) -> bool:
    return default if given is None else given


def detokenize(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _detokenize_decoder)
    limit = ctx.settings.max_request_output_tokens
    if limit and len(body.tokens) > limit:
        message = (
            f"{len(body.tokens)} tokens are more than the {limit} a request may ask for "
            "(--max-request-output-tokens)"
        )
        raise RequestError(400, message, "tokens")
    for index, token in enumerate(body.tokens):
        if not 0 <= token <= ctx.tokenizer.max_token_id:
            raise RequestError(400, f"token id {token} is out of range", f"tokens[{index}]")
    return json_response({"prompt": ctx.tokenizer.decode(body.tokens)})
