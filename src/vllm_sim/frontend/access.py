"""Who may start work: API keys, and a server that no longer takes any while it drains.

The check runs on the header fields alone, so HTTP runs it as the generation routes' guard
before a body is read, and gRPC on each call's metadata: one check for both transports.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence

from vllm_sim.errors import RequestError
from vllm_sim.frontend.caller import Headers

UNAUTHORIZED = "Invalid or missing API key: send it as `Authorization: Bearer <key>`"
SHUTTING_DOWN = "server is shutting down"

# (method, headers) -> the refusal, or None to go on.
Check = Callable[[str, Headers], RequestError | None]


class KeyRing:
    """Accepted keys, compared in constant time: each is hashed, so neither a key's length
    nor the position of a first differing byte shows in the time a comparison takes."""

    __slots__ = ("_digests",)

    def __init__(self, keys: Sequence[str]) -> None:
        self._digests = tuple(_digest(key.encode()) for key in keys)

    def accepts(self, presented: bytes) -> bool:
        digest = _digest(presented)
        match = False
        for known in self._digests:  # no early exit: every key costs the same
            match |= hmac.compare_digest(digest, known)
        return match


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def _bearer(value: bytes) -> bytes | None:
    scheme, _, token = value.strip().partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else None


def key_guard(keys: KeyRing, x_api_key: bool = False) -> Check:
    """401 unless `Authorization: Bearer <key>` (or, with `x_api_key`, the `x-api-key` header
    Anthropic's SDK sends) carries an accepted key."""

    def guard(method: str, headers: Headers) -> RequestError | None:
        for name, value in headers:
            if name == b"authorization":
                token = _bearer(value)
                if token is not None and keys.accepts(token):
                    return None
            elif x_api_key and name == b"x-api-key" and keys.accepts(value.strip()):
                return None
        return RequestError(401, UNAUTHORIZED)

    return guard


class Drain:
    """Set once the server stops taking new work (a SIGTERM): requests in flight finish,
    new generation requests are refused, on every transport."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = False


class AdmissionGate:
    """The caller's key when keys are set (401), then whether the server still takes work
    (503): what every generation request passes before anything else is done for it."""

    __slots__ = ("_authorize", "_drain")

    def __init__(self, drain: Drain, keys: Check | None = None) -> None:
        self._drain = drain
        self._authorize = keys

    def __call__(self, method: str, headers: Headers) -> RequestError | None:
        if self._authorize is not None:
            refusal = self._authorize(method, headers)
            if refusal is not None:
                return refusal
        if self._drain.active:
            return RequestError(503, SHUTTING_DOWN)
        return None
