"""POST /invocations: SageMaker's single entry point, dispatched by the body's shape.

As vLLM does for a generative model: a body with `messages` is a chat completion, one
with `prompt` a completion; each is served by that endpoint's own handler (the one
generation pipeline), so answers, errors and streams are exactly theirs.
"""

from __future__ import annotations

import msgspec

from vllm_sim.errors import RequestError
from vllm_sim.http.messages import AnyResponse, Handler, HttpRequest

_NULL = msgspec.Raw(b"null")
NO_HANDLER = (
    "Cannot find suitable handler for request. "
    "Expected one of: ['ChatCompletionRequest', 'CompletionRequest']"
)


class _Shape(msgspec.Struct):
    """Only what decides the dispatch; the values are skipped over, not decoded."""

    messages: msgspec.Raw = _NULL
    prompt: msgspec.Raw = _NULL
    prompt_embeds: msgspec.Raw = _NULL


_shape_decoder = msgspec.json.Decoder(_Shape)


def invocations_handler(chat: Handler, completions: Handler) -> Handler:
    async def invocations(request: HttpRequest) -> AnyResponse:
        try:
            shape = _shape_decoder.decode(request.body)
        except (msgspec.DecodeError, RecursionError):
            # Not a JSON object: chat's own decoding names the problem, as for its route.
            return await chat(request)
        if shape.messages != _NULL:
            return await chat(request)
        if shape.prompt != _NULL or shape.prompt_embeds != _NULL:
            return await completions(request)
        raise RequestError(400, NO_HANDLER)

    return invocations
