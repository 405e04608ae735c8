"""Cross-origin resource sharing for the whole application, by four settings: the allowed
origins, methods and headers, and whether credentials are allowed.

A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered here, before
routing and before any key is checked; every other answer gets the headers a browser reads
to decide whether the calling page may see it. Origins are allowed by exact match (`*`:
any); by default none is, so browsers keep other sites' pages away from the API.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_sim.http.messages import Headers, Response

# What `*` among the allowed methods stands for.
ALL_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY")
# Request headers a preflight may always ask for.
_SAFELISTED = ("Accept", "Accept-Language", "Content-Language", "Content-Type")
_PREFLIGHT_VARY = (
    b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers, "
    b"Access-Control-Request-Private-Network"
)
_TEXT = b"text/plain; charset=utf-8"
_ALLOW_ORIGIN = b"access-control-allow-origin"
_ALLOW_HEADERS = b"access-control-allow-headers"
_VARY_ORIGIN = (b"vary", b"Origin")
_CREDENTIALS = (b"access-control-allow-credentials", b"true")
_VARY_ONLY: Headers = [_VARY_ORIGIN]  # shared, never mutated


@dataclass(frozen=True, slots=True)
class CorsPolicy:
    """The four CORS settings; by default no other origin is allowed."""

    allowed_origins: tuple[str, ...] = ()
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False


@dataclass(slots=True)
class _Preflight:
    """The headers a preflight asks with (first occurrence of each), undecoded."""

    origin: bytes | None = None
    method: bytes | None = None
    headers: bytes | None = None
    private_network: bytes | None = None


class Cors:
    """The CORS answers of one server, precomputed from its policy."""

    __slots__ = (
        "_all_headers",
        "_all_origins",
        "_credentials",
        "_explicit_preflight",
        "_headers",
        "_methods",
        "_origins",
        "_preflight_headers",
        "_unnamed",
    )

    def __init__(self, policy: CorsPolicy = CorsPolicy()) -> None:  # frozen: safe default
        methods = ALL_METHODS if "*" in policy.allowed_methods else policy.allowed_methods
        self._methods = frozenset(methods)
        self._origins = frozenset(policy.allowed_origins)
        self._all_origins = "*" in policy.allowed_origins
        self._all_headers = "*" in policy.allowed_headers
        self._credentials = policy.allow_credentials
        # With credentials a wildcard cannot be used: the origin itself is named.
        self._explicit_preflight = not self._all_origins or self._credentials
        allowed_headers = sorted(set(_SAFELISTED) | set(policy.allowed_headers))
        self._headers = frozenset(name.lower() for name in allowed_headers)
        self._preflight_headers = self._preflight_base(methods, allowed_headers)
        simple: Headers = []
        if self._all_origins:
            simple.append((_ALLOW_ORIGIN, b"*"))
        if self._credentials:
            simple.append(_CREDENTIALS)
        # Shared by every answer that does not name its origin: never mutated.
        self._unnamed = [*simple, _VARY_ORIGIN]

    def _preflight_base(self, methods: tuple[str, ...], allowed_headers: list[str]) -> Headers:
        headers: Headers = [(b"vary", _PREFLIGHT_VARY)]
        if not self._explicit_preflight:
            headers.append((_ALLOW_ORIGIN, b"*"))
        headers.append((b"access-control-allow-methods", ", ".join(methods).encode()))
        headers.append((b"access-control-max-age", b"600"))
        if not self._all_headers:
            headers.append((_ALLOW_HEADERS, ", ".join(allowed_headers).encode()))
        if self._credentials:
            headers.append(_CREDENTIALS)
        return headers

    def allows(self, origin: bytes) -> bool:
        return self._all_origins or origin.decode("latin-1") in self._origins

    def preflight(self, headers: Headers, refused: bool = False) -> Response | None:
        """The answer to a preflight, or None when the request is not one. `refused` fails
        the origin whatever the policy (a control route's preflight from another site)."""
        asked = _read_preflight(headers)
        if asked.origin is None or asked.method is None:
            return None
        answer = list(self._preflight_headers)
        failures = []
        if refused or not self.allows(asked.origin):
            failures.append("origin")
        elif self._explicit_preflight:
            answer.append((_ALLOW_ORIGIN, asked.origin))
        if asked.method.decode("latin-1") not in self._methods:
            failures.append("method")
        if self._all_headers and asked.headers is not None:
            answer.append((_ALLOW_HEADERS, asked.headers))  # whatever is asked is allowed
        elif asked.headers is not None and not self._headers_allowed(asked.headers):
            failures.append("headers")
        if asked.private_network is not None:  # the private network is never opened
            failures.append("private-network")
        if failures:
            text = "Disallowed CORS " + ", ".join(failures)
            return Response(400, text.encode(), _TEXT, answer)
        return Response(200, b"OK", _TEXT, answer)

    def _headers_allowed(self, asked: bytes) -> bool:
        names = asked.decode("latin-1").lower().split(",")
        return all(name.strip() in self._headers for name in names)

    def response_headers(self, origin: bytes | None) -> Headers:
        """The CORS headers of the answer to any other request (`origin`: its Origin
        header): the origin named when it is allowed (or any is, with credentials), and
        `Vary: Origin` always, since the answer depends on it."""
        if origin is None:
            return _VARY_ONLY
        if (self._all_origins and self._credentials) or (
            not self._all_origins and self.allows(origin)
        ):
            named = [_CREDENTIALS] if self._credentials else []
            return [*named, (_ALLOW_ORIGIN, origin), _VARY_ORIGIN]
        return self._unnamed


def _read_preflight(headers: Headers) -> _Preflight:
    asked = _Preflight()
    for name, value in headers:
        if name == b"origin" and asked.origin is None:
            asked.origin = value
        elif name == b"access-control-request-method" and asked.method is None:
            asked.method = value
        elif name == b"access-control-request-headers" and asked.headers is None:
            asked.headers = value
        elif name == b"access-control-request-private-network" and asked.private_network is None:
            asked.private_network = value
    return asked
