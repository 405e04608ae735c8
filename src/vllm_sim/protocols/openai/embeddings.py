"""POST /v1/embeddings: deterministic unit-length vectors made from the input's token ids.

A vector is a pure function of the token ids and the dimension count, so the same input
always embeds the same way, whatever the seed. The request itself runs through the engine
as vLLM runs a pooling request: its inputs are prompts that queue, take running slots and
are prefilled (timed by the prefill model) with nothing generated, and the metrics count it.
"""

from __future__ import annotations

import base64
import math
import sys
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from vllm_sim.engine.errors import EngineError, RequestAborted
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.engine.tokenizer import Tokenizer
from vllm_sim.errors import RequestError
from vllm_sim.frontend.body import decode_body, json_kind
from vllm_sim.frontend.caller import Caller
from vllm_sim.frontend.context import ApiContext
from vllm_sim.frontend.driver import wait_for_result
from vllm_sim.frontend.envelope import encode_json
from vllm_sim.frontend.errors import refusal_error
from vllm_sim.http.messages import AnyResponse, Headers, HttpRequest, Response
from vllm_sim.protocols.common.answers import json_response

TOKEN_ID_LIMIT = 2**32
# Guards, not vLLM behaviour: one request must not make the server allocate gigabytes.
# 2**20 values (1024 inputs of 1024 dimensions) answer in about 25 MB of JSON and stay
# under 100 MB while the answer is built; 2**24 took 369 MB.
MAX_DIMENSIONS = 65536
MAX_VALUES = 2**20
ENCODING_FORMATS = ("float", "base64")
INPUT_REQUIRED = "input is required and must be a non-empty string or array"
EMPTY_STRING = "input cannot be an empty string"


class EmbeddingRequest(msgspec.Struct):
    # One of four shapes msgspec cannot express as a union; checked by parse_input.
    input: Any = None
    model: str | None = None
    dimensions: int | None = None
    encoding_format: str | None = None
    user: str | None = None


_decoder = msgspec.json.Decoder(EmbeddingRequest)


def raw_embedding(token_ids: Sequence[int], dimensions: int) -> list[float]:
    """The reference simulator's values, before normalisation; each an exact binary fraction.

    Element i is `2*(t[i] mod 1024)/1024 - 1` while i < n; past the last token the ids repeat,
    as `2*(t[i mod n] mod 256)/256 - 1`; with no tokens at all every element is 0.
    """
    n = len(token_ids)
    if n == 0:
        return [0.0] * dimensions
    head = [(t % 1024) / 512 - 1 for t in token_ids[:dimensions]]
    if dimensions <= n:
        return head
    # Index i >= n reads t[i mod n], which walks the ids from the start again and again.
    cycle = [(t % 256) / 128 - 1 for t in token_ids]
    rest = dimensions - n
    return head + (cycle * -(-rest // n))[:rest]


def embedding_vector(token_ids: Sequence[int], dimensions: int) -> array[float]:
    """The unit-length float32 embedding of `token_ids`: raw_embedding scaled to L2 norm 1.

    When every raw value is 0 (no tokens, or each of the first `dimensions` ids is 512 mod
    1024) there is no direction to keep; the answer is then the first basis vector
    [1, 0, ..., 0], which is exactly unit length in float32 and the same for every such input.
    """
    raw = raw_embedding(token_ids, dimensions)
    # fsum: the squares are exact binary fractions, so the norm is correctly rounded.
    norm = math.sqrt(math.fsum(v * v for v in raw))
    if norm == 0.0:
        return array("f", [1.0] + [0.0] * (dimensions - 1))
    return array("f", [v / norm for v in raw])


def encode_embedding(vector: array[float], encoding_format: str) -> list[float] | str:
    """The vector as JSON floats (each equal to its float32 value) or base64 float32 bytes."""
    if encoding_format == "float":
        return vector.tolist()
    if sys.byteorder == "big":  # the wire format is little-endian whatever the host is
        vector = array("f", vector)
        vector.byteswap()
    return base64.b64encode(vector.tobytes()).decode("ascii")


def parse_input(value: object, tokenizer: Tokenizer) -> list[list[int]]:
    """The token ids of each input; a 400 naming the offending field (`input[2][0]`) otherwise.

    The form (strings, token ids, arrays of token ids) is decided by the first element, as in
    the reference, and every element must then have it.
    """
    if isinstance(value, str):
        return [_text_ids(value, "input", tokenizer)]
    if not isinstance(value, list) or not value:
        raise RequestError(400, INPUT_REQUIRED, "input")
    first = value[0]
    if isinstance(first, str):
        return [_text_ids(item, f"input[{i}]", tokenizer) for i, item in enumerate(value)]
    if _is_number(first):
        return [[_token_id(item, f"input[{i}]") for i, item in enumerate(value)]]
    if isinstance(first, list):
        return [_id_sequence(item, f"input[{i}]") for i, item in enumerate(value)]
    raise RequestError(
        400,
        f"{INPUT_REQUIRED}: input[0] must be a string, a token id or an array of token ids",
        "input[0]",
    )


def _is_number(value: object) -> bool:
    # JSON true/false decode to bool, which Python counts as int: they are not token ids.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text_ids(item: object, param: str, tokenizer: Tokenizer) -> list[int]:
    if not isinstance(item, str):
        message = f"{INPUT_REQUIRED}: {param} must be a string, as input[0] is"
        raise RequestError(400, message, param)
    if not item:
        raise RequestError(400, EMPTY_STRING, param)
    return tokenizer.encode(item, add_special_tokens=True)


def _id_sequence(item: object, param: str) -> list[int]:
    if not isinstance(item, list):
        message = f"{INPUT_REQUIRED}: {param} must be an array of token ids, as input[0] is"
        raise RequestError(400, message, param)
    # An empty sequence is allowed, as in the reference: 0 tokens, the all-zero case.
    return [_token_id(token, f"{param}[{j}]") for j, token in enumerate(item)]


def _token_id(value: object, param: str) -> int:
    # vLLM rejects what cannot be a token id; the reference's truncating and clamping would
    # silently embed a different input. The value is not echoed: a huge int cannot be printed.
    if type(value) is int and 0 <= value < TOKEN_ID_LIMIT:
        return value
    problem = "is out of range" if type(value) is int else f"is {_json_kind(value)}"
    message = f"{param} {problem}: a token id is an integer from 0 to {TOKEN_ID_LIMIT - 1}"
    raise RequestError(400, message, param)


def _json_kind(value: object) -> str:
    """What a value that is no token id is, with its article."""
    kind = json_kind(value)
    return _WITH_ARTICLE.get(kind, f"a {kind}")


_WITH_ARTICLE = {
    "null": "null",
    "number": "a non-integer number",
    "array": "an array",
    "object": "an object",
}


def _check_options(body: EmbeddingRequest, default_dimensions: int) -> tuple[str, int]:
    encoding_format = "float" if body.encoding_format is None else body.encoding_format
    if encoding_format not in ENCODING_FORMATS:
        # vLLM and OpenAI refuse an unknown format; the reference silently sends floats.
        raise RequestError(400, 'encoding_format must be "float" or "base64"', "encoding_format")
    if body.dimensions is None:
        return encoding_format, default_dimensions  # the operator's choice, not capped
    if body.dimensions < 1:
        raise RequestError(400, "dimensions must be at least 1", "dimensions")
    if body.dimensions > MAX_DIMENSIONS:
        raise RequestError(400, f"dimensions must be at most {MAX_DIMENSIONS}", "dimensions")
    return encoding_format, body.dimensions


async def handle(ctx: ApiContext, request: HttpRequest) -> AnyResponse:
    body = decode_body(request.body, _decoder)
    model = ctx.resolve_model(body.model)
    encoding_format, dimensions = _check_options(body, ctx.settings.default_embedding_dimensions)
    request_id = ctx.request_id(request)
    headers = ctx.response_headers(request_id)
    shape = _Shape(f"embd-{request_id}", model, encoding_format, dimensions, headers)
    large = len(request.body) > ctx.worker_body_bytes
    if large:
        sequences = await ctx.off_loop(parse_input, body.input, ctx.tokenizer)
    else:
        sequences = parse_input(body.input, ctx.tokenizer)
    _check_size(sequences, dimensions)  # before any work is admitted
    try:
        await prefill(ctx, request, request_id, model, sequences)
    except RequestAborted:
        return Response(499, b"")  # the client is gone; nobody will read it
    if large or len(sequences) * dimensions > INLINE_VALUES:
        return await ctx.off_loop(_answer, sequences, shape)
    return _answer(sequences, shape)


async def prefill(
    ctx: ApiContext,
    caller: Caller,
    request_id: str,
    model: str,
    sequences: list[list[int]],
) -> None:
    """Runs the inputs through the engine as one pooling request, each a prompt."""
    pooling = GenerationRequest(
        request_id=request_id,
        model=model,
        prompts=[Prompt(ids) for ids in sequences],
        max_tokens=0,
        arrival_time=int(time.time()),
        received=caller.received,
        pooling=True,
    )
    try:
        stream = ctx.engine.submit(pooling)
    except EngineError as error:
        raise refusal_error(error) from None
    await wait_for_result(stream, caller)


def _check_size(sequences: list[list[int]], dimensions: int) -> None:
    if len(sequences) * dimensions > MAX_VALUES:
        message = (
            f"input has {len(sequences)} items of {dimensions} dimensions, more than the "
            f"{MAX_VALUES} values one response may carry"
        )
        raise RequestError(400, message, "input")


@dataclass(frozen=True, slots=True)
class _Shape:
    """What an answer is, besides its vectors."""

    id: str
    model: str
    encoding_format: str
    dimensions: int
    headers: Headers


# Embedding values made on the event loop at most (~50 ns each); more are made on the
# worker thread.
INLINE_VALUES = 65536


def _answer(sequences: list[list[int]], shape: _Shape) -> Response:
    """vLLM's answer of a pooling model: every key it sends, with its defaults."""
    dimensions, encoding_format = shape.dimensions, shape.encoding_format
    # Each item encoded on its own: on the worker thread, one encode of a million values
    # would hold the GIL for tens of milliseconds.
    data = [
        msgspec.Raw(
            encode_json(
                {
                    "object": "embedding",
                    "index": index,
                    "embedding": encode_embedding(
                        embedding_vector(ids, dimensions), encoding_format
                    ),
                }
            )
        )
        for index, ids in enumerate(sequences)
    ]
    tokens = sum(len(ids) for ids in sequences)
    answer = {
        "id": shape.id,
        "object": "list",
        "created": int(time.time()),
        "model": shape.model,
        "data": data,
        "usage": {
            "prompt_tokens": tokens,
            "total_tokens": tokens,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
        },
    }
    return json_response(answer, headers=shape.headers)
