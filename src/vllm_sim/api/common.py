"""What every protocol handler shares: the API context, body decoding, streaming."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from typing import TypeVar

import msgspec

from vllm_sim.api.failures import FailureInjector
from vllm_sim.api.omni import ImageEmission
from vllm_sim.engine.core import Engine
from vllm_sim.engine.errors import RequestError
from vllm_sim.engine.sequence import RequestStream
from vllm_sim.engine.tokenizer import Tokenizer
from vllm_sim.server.http import Headers, HttpRequest

T = TypeVar("T")

PARSE_ERROR_PREFIX = "Failed to read and parse request body, "
_PATH = re.compile(r" - at `\$\.?([^`]*)`$")


class RequestIds:
    """Request ids as the reference makes them: uuid5 of "<seed>-<port>-<counter>".

    Computed from one SHA-1 per id rather than through uuid.uuid5, which costs several
    times more on the request path; a test checks both agree.
    """

    __slots__ = ("_counter", "_prefix")

    def __init__(self, seed: int, port: int) -> None:
        self._prefix = uuid.NAMESPACE_URL.bytes + f"{seed}-{port}-".encode()
        self._counter = 0

    def next(self) -> str:
        digest = bytearray(hashlib.sha1(self._prefix + str(self._counter).encode()).digest())
        self._counter += 1
        digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
        digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
        h = digest[:16].hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class ApiContext:
    """The state protocol handlers read: engine, tokenizer, names, response headers."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: Tokenizer,
        served_model_names: tuple[str, ...],
        base_model: str,
        max_model_len: int,
        request_ids: RequestIds,
        pod_headers: Headers,
        echo_request_id: bool,
        mode: str,
        failures: FailureInjector,
        images: ImageEmission,
        skip_tool_validation: bool = False,
        block_size: int = 16,
        pod_ip: str = "",
        kv_enabled: bool = False,
        mm_encoder_only: bool = False,
        default_embedding_dimensions: int = 384,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.served_model_names = served_model_names
        self.display_model = served_model_names[0]
        self.base_model = base_model
        self.max_model_len = max_model_len
        self.request_ids = request_ids
        self.pod_headers = pod_headers
        self.echo_request_id = echo_request_id
        self.mode = mode
        self.failures = failures
        self.images = images
        self.skip_tool_validation = skip_tool_validation
        self.block_size = block_size
        self.pod_ip = pod_ip
        self.kv_enabled = kv_enabled
        self.mm_encoder_only = mm_encoder_only
        self.default_embedding_dimensions = default_embedding_dimensions
        self._served = frozenset(served_model_names)

    def resolve_model(self, name: str | None) -> str:
        """The model name a response carries; 404 for a model this server does not serve.

        A missing model means the default one, as in vLLM.
        """
        if not name or name in self._served:
            return self.display_model
        if name in self.engine.loras:
            return name  # an adapter keeps its own name in answers, metrics and KV events
        raise RequestError(404, f"The model `{name}` does not exist.", param="model")

    def request_id(self, request: HttpRequest) -> str:
        """The request's id, made once: the client's X-Request-Id if echoed, else a new one."""
        if request.request_id is not None:
            return request.request_id
        given = request.header(b"x-request-id") if self.echo_request_id else None
        request.request_id = given or self.request_ids.next()
        return request.request_id

    def response_headers(self, request_id: str) -> Headers:
        """Pod headers, and X-Request-Id when --enable-request-id-headers is on."""
        if not self.echo_request_id:
            return self.pod_headers
        return [*self.pod_headers, (b"x-request-id", request_id.encode())]


def decode_body(
    body: bytes, decoder: msgspec.json.Decoder[T], prefix: str = PARSE_ERROR_PREFIX
) -> T:
    """Decodes and type-checks a JSON body; a 400 naming the offending field otherwise."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        deduplicated = _last_key_wins(body)
        if deduplicated is not None:
            return decode_body(deduplicated, decoder, prefix)
        text = str(exc)
        match = _PATH.search(text)
        param = match.group(1) if match else None
        raise RequestError(400, prefix + text, param=param) from None
    except msgspec.DecodeError as exc:
        raise RequestError(400, prefix + str(exc)) from None
    except RecursionError:
        raise RequestError(400, prefix + "JSON is nested too deeply") from None


def _last_key_wins(body: bytes) -> bytes | None:
    """The body with every duplicate key reduced to its last value, as Python's json
    (and so vLLM) reads it; None when it has no duplicate keys.

    msgspec checks each occurrence of a key, so `{"n": "x", "n": 2}` would fail there
    while vLLM accepts it. Only a failed decode pays for this second look.
    """
    found = False

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal found
        result = dict(items)
        found = found or len(result) < len(items)
        return result

    try:
        value = json.loads(body, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None
    return msgspec.json.encode(value) if found else None


def unix_now() -> int:
    return int(time.time())


async def wait_for_result(stream: RequestStream, request: HttpRequest) -> None:
    """Waits for a whole non-streaming request; the client leaving aborts it."""
    if not stream.done:
        stop_watching = request.on_disconnect(stream.abort)
        try:
            await stream.wait_done()
        finally:
            stop_watching()
            stream.abort()
    stream.raise_if_failed()


def check_output_limit(max_tokens: int | None, param: str, ignore_eos: bool | None) -> None:
    """vLLM's two rules on the output limit, the same on every generation endpoint."""
    if max_tokens is not None and max_tokens <= 0:
        raise RequestError(400, "Max completion tokens and max tokens should be positive", param)
    if ignore_eos and max_tokens is None:
        raise RequestError(
            400,
            "Ignore_eos is true but max_completion_tokens (or max_tokens) is not set",
            param="ignore_eos",
        )
