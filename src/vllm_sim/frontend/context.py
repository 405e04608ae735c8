"""What protocol handlers read: the engine, the tokenizer, the served names and settings."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar, TypeVarTuple

from vllm_sim.engine.core import Engine
from vllm_sim.engine.tokenizer import Tokenizer
from vllm_sim.errors import RequestError
from vllm_sim.frontend.access import Drain
from vllm_sim.frontend.caller import Caller, Headers
from vllm_sim.frontend.failures import FailureInjector
from vllm_sim.frontend.omni import ImageEmission
from vllm_sim.frontend.render_service import RenderService

# Bodies above this size are parsed and tokenized on the worker thread (see off_loop):
# tokenizing 64 KiB of text takes a few milliseconds, a 4 MiB body a quarter second; a
# tokenizer slower than that lowers the bound (`worker_body_bytes`).
WORKER_BODY_BYTES = 64 * 1024

Ts = TypeVarTuple("Ts")
T = TypeVar("T")

# A client's X-Request-Id is copied into every chunk of a stream; a longer one is refused
# rather than multiplied (ids are uuids in practice: 36 characters).
MAX_REQUEST_ID_LENGTH = 256


class RequestIds:
    """Request ids in vLLM's form (16 hex characters), reproducible as the reference's
    are: the first half of the hex of uuid5 of "<seed>-<port>-<counter>".

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
        return digest[:8].hex()


@dataclass(frozen=True, slots=True)
class ServingSettings:
    """The part of the configuration protocols read; fixed while the server runs."""

    served_model_names: tuple[str, ...]
    base_model: str
    max_model_len: int
    max_request_output_tokens: int = 0  # 0: no limit
    block_size: int = 16
    pod_ip: str = ""
    prefix_caching: bool = True  # prompts carry their media features, for block hashes
    mm_encoder_only: bool = False
    skip_tool_validation: bool = False
    default_embedding_dimensions: int = 384
    echo_request_id: bool = False  # --enable-request-id-headers
    prompt_tokens_details: bool = False  # --enable-prompt-tokens-details
    reasoning_parser: str = ""  # --reasoning-parser: answers open with reasoning
    reasoning_ratio: float = 0.5  # the share of an answer's tokens that is reasoning
    system_fingerprint: str = ""
    pod_headers: tuple[tuple[bytes, bytes], ...] = ()

    @property
    def display_model(self) -> str:
        """The name answers carry for the base model: the first served name."""
        return self.served_model_names[0]


@dataclass(slots=True)
class ApiContext:
    """One served instance as the protocol handlers see it."""

    engine: Engine
    tokenizer: Tokenizer
    settings: ServingSettings
    request_ids: RequestIds
    failures: FailureInjector
    images: ImageEmission
    # Does, one at a time, what is too large to do on the event loop (see off_loop).
    worker: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="vllm-sim-worker")
    )
    # Where prompt token ids come from when not from `tokenizer` (--render-url).
    render_service: RenderService | None = None
    # Set when the server stops taking new work; read by every transport's admission gate.
    drain: Drain = field(default_factory=Drain)
    # Read on every request, so copied out of the settings once.
    # Bodies above this size are handled on the worker thread.
    worker_body_bytes: int = field(init=False)
    _served: frozenset[str] = field(init=False)
    _display_model: str = field(init=False)
    _echo_request_id: bool = field(init=False)
    _pod_headers: Headers = field(init=False)

    def __post_init__(self) -> None:
        self.worker_body_bytes = min(WORKER_BODY_BYTES, self.tokenizer.inline_body_bytes)
        self._served = frozenset(self.settings.served_model_names)
        self._display_model = self.settings.display_model
        self._echo_request_id = self.settings.echo_request_id
        self._pod_headers = list(self.settings.pod_headers)

    async def off_loop(self, func: Callable[[*Ts], T], *args: *Ts) -> T:
        """`func(*args)` on the worker thread. The interpreter hands the GIL back to the
        event loop every few milliseconds, so other clients are served meanwhile; one
        worker thread keeps it so however many large requests arrive."""
        return await asyncio.get_running_loop().run_in_executor(self.worker, func, *args)

    def resolve_model(self, name: str | None) -> str:
        """The model name a response carries; 404 for a model this server does not serve.

        A missing model means the default one, as in vLLM.
        """
        if not name or name in self._served:
            return self._display_model
        if name in self.engine.view.loras:
            return name  # an adapter keeps its own name in answers, metrics and KV events
        aliases = ", ".join(self.settings.served_model_names)
        message = f"The model `{name}` does not exist. Valid aliases: {aliases}."
        raise RequestError(404, message, param="model")

    def request_id(self, request: Caller) -> str:
        """The request's id, made once: the client's X-Request-Id if it sent one (as vLLM
        does: P/D proxies send both legs of a request under one id), else a new one."""
        if request.request_id is not None:
            return request.request_id
        given = request.header(b"x-request-id")
        if given is not None and len(given) > MAX_REQUEST_ID_LENGTH:
            request.request_id = self.request_ids.next()  # what the refusal is answered under
            message = f"X-Request-Id is longer than {MAX_REQUEST_ID_LENGTH} characters"
            raise RequestError(400, message)
        request.request_id = given or self.request_ids.next()
        return request.request_id

    def response_headers(self, request_id: str) -> Headers:
        """Pod headers, and X-Request-Id when --enable-request-id-headers is on."""
        if not self._echo_request_id:
            return self._pod_headers
        return [*self._pod_headers, (b"x-request-id", request_id.encode())]
