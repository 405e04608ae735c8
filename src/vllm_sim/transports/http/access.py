"""Who may call a control route: its key, and the checks that keep browsers off it.

A guard runs before the body is read and answers with the error to send, or None. Guards
are chosen per route at start-up: a route nobody guards (no key configured) has none, so
the request path pays nothing for a feature that is off.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from vllm_sim.errors import RequestError
from vllm_sim.frontend.access import KeyRing, key_guard
from vllm_sim.http.app import Guard
from vllm_sim.http.messages import Headers

CROSS_ORIGIN = "Cross-origin requests to control endpoints are refused"
NOT_JSON = "Control endpoints accept only Content-Type: application/json"
_CROSS_SITE = frozenset({b"cross-site", b"same-site"})


def _origin_host(origin: bytes) -> str | None:
    """host[:port] of an Origin header, or None for `null` and anything unparseable."""
    try:
        parts = urlsplit(origin.decode("latin-1").strip())
    except ValueError:
        return None
    return parts.netloc.lower() or None


def cross_origin(headers: Headers) -> bool:
    """Whether a browser sent this on behalf of another site: an Origin other than the Host
    the request was sent to, a Host by a name that site could own, or Sec-Fetch-Site
    saying so."""
    origin: bytes | None = None
    host = b""
    for name, value in headers:
        if name == b"origin":
            origin = value
        elif name == b"host":
            host = value
        elif name == b"sec-fetch-site" and value.strip().lower() in _CROSS_SITE:
            return True
    if origin is None:
        return False  # not a browser's cross-origin request (they always send Origin)
    named = host.decode("latin-1").strip().lower()
    # A page can have its own name rebound to this machine (DNS rebinding) and so look
    # same-origin: a browser's request must name the server as an address or localhost.
    return _origin_host(origin) != named or not _rebind_proof(named)


def _rebind_proof(host: str) -> bool:
    """Whether a Host header names the server in a way no other site can: localhost or an
    IP address (an IPv6 address in brackets), with or without a port."""
    name = host[1 : host.find("]")] if host.startswith("[") else host.rpartition(":")[0] or host
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_json(content_type: bytes) -> bool:
    media_type = content_type.partition(b";")[0].strip().lower()
    return media_type == b"application/json"


class ControlGuard:
    """The control routes' guard: the key when one is set (401), no cross-origin browser
    request (403), and a POST body only as JSON (415). A POST without a Content-Type (no
    body, or a script's bare bytes) is allowed: a browser's cross-site POST always carries
    an Origin."""

    __slots__ = ("_authorize",)

    def __init__(self, keys: KeyRing | None) -> None:
        self._authorize = key_guard(keys) if keys is not None else None

    def __call__(self, method: str, headers: Headers) -> RequestError | None:
        if self._authorize is not None:
            refusal = self._authorize(method, headers)
            if refusal is not None:
                return refusal
        if cross_origin(headers):
            return RequestError(403, CROSS_ORIGIN)
        if method == "POST":
            for name, value in headers:
                if name == b"content-type" and not _is_json(value):
                    return RequestError(415, NOT_JSON, error_type="UnsupportedMediaTypeError")
        return None


def control_guard(keys: KeyRing | None) -> Guard:
    return ControlGuard(keys)
