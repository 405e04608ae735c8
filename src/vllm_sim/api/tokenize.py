"""POST /tokenize and /detokenize, shaped as vLLM answers them."""

from __future__ import annotations

import msgspec

from vllm_sim.api.body import decode_body
from vllm_sim.api.context import ApiContext
from vllm_sim.api.conversation import ChatMessage, read_conversation
from vllm_sim.engine.tokenizer import chat_from_turns
from vllm_sim.errors import RequestError
from vllm_sim.http.messages import AnyResponse, HttpRequest, json_response

_MAX_TOKEN_ID = 2**32 - 1


class TokenizeRequest(msgspec.Struct):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    return_token_strs: bool | None = None


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
        text = body.prompt
    else:
        turns = read_conversation(body.messages or []).turns
        text = ctx.tokenizer.render_chat(chat_from_turns(turns)) if turns else ""
    ids, pieces = ctx.tokenizer.tokenize(text)
    return json_response(
        {
            "count": len(ids),
            "max_model_len": ctx.settings.max_model_len,
            "tokens": ids,
            "token_strs": pieces if body.return_token_strs else None,
        }
    )


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
        if not 0 <= token <= _MAX_TOKEN_ID:
            raise RequestError(400, f"token id {token} is out of range", f"tokens[{index}]")
    return json_response({"prompt": ctx.tokenizer.decode(body.tokens)})
