"""The Responses API's store: finished responses kept for GET /v1/responses/{id} and for
`previous_response_id`, as vLLM keeps them when VLLM_ENABLE_RESPONSES_API_STORE is set.

vLLM's store grows without bound; this one keeps at most MAX_STORED_RESPONSES responses
and MAX_STORED_BYTES of them (answer JSON plus conversation), evicting the oldest first,
so that no client can make a long-running simulator hold unbounded memory. With the store
off (vLLM's default) nothing is kept, so every id is unknown.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import msgspec

from vllm_sim.errors import RequestError
from vllm_sim.http.app import path_parameter
from vllm_sim.http.messages import JSON, AnyResponse, Handler, HttpRequest, Response
from vllm_sim.protocols.common.chat_messages import ChatMessage

MAX_STORED_RESPONSES = 10_000
MAX_STORED_BYTES = 256 * 1024 * 1024

RETRIEVE_PATH = "/v1/responses/{response_id}"
CANCEL_PATH = "/v1/responses/{response_id}/cancel"


@dataclass(frozen=True, slots=True)
class StoredResponse:
    body: bytes  # the response object as it was answered
    # The messages it was generated from, then its own output: what a later request
    # naming it as `previous_response_id` continues.
    conversation: list[ChatMessage]
    size: int


def not_found(response_id: str) -> RequestError:
    """vLLM's answer for an id it does not hold (retrieval and previous_response_id)."""
    return RequestError(
        404,
        f"Response with id '{response_id}' not found.",
        param="response_id",
        error_type="invalid_request_error",
    )


class ResponseStore:
    """Finished responses by id, oldest evicted first. Planning and answering a large
    request run on the worker thread, so every access holds the lock."""

    def __init__(
        self,
        enabled: bool = False,
        max_count: int = MAX_STORED_RESPONSES,
        max_bytes: int = MAX_STORED_BYTES,
    ) -> None:
        self.enabled = enabled
        self._max_count = max_count
        self._max_bytes = max_bytes
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def stored_bytes(self) -> int:
        return self._bytes

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            return self._entries.get(response_id)

    def put(self, response_id: str, body: bytes, conversation: list[ChatMessage]) -> None:
        """Keeps a response; one larger than the whole store is not kept at all."""
        if not self.enabled:
            return
        size = len(body) + len(msgspec.json.encode(conversation))
        if size > self._max_bytes:
            return
        entry = StoredResponse(body, conversation, size)
        with self._lock:
            old = self._entries.pop(response_id, None)
            if old is not None:
                self._bytes -= old.size
            self._entries[response_id] = entry
            self._bytes += size
            while len(self._entries) > self._max_count or self._bytes > self._max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.size


def store_handlers(store: ResponseStore) -> tuple[Handler, Handler]:
    """(GET /v1/responses/{response_id}, POST /v1/responses/{response_id}/cancel)."""

    async def retrieve(request: HttpRequest) -> AnyResponse:
        response_id = path_parameter(RETRIEVE_PATH, request.path, "response_id")
        entry = store.get(response_id)
        if entry is None:
            raise not_found(response_id)
        return Response(200, entry.body, JSON)

    async def cancel(request: HttpRequest) -> AnyResponse:
        response_id = path_parameter(CANCEL_PATH, request.path, "response_id")
        if store.get(response_id) is None:
            raise not_found(response_id)
        # Only a background response can be cancelled, and the simulator runs none: every
        # stored response finished with its request, as vLLM says of those.
        raise RequestError(
            400,
            "Cannot cancel a synchronous response.",
            param="response_id",
            error_type="invalid_request_error",
        )

    return retrieve, cancel
