"""vLLM's rules for reading a request, as its Python and Go servers apply them: FastAPI's
wording of a refused request, the JSON-only bodies, and Go's reading of a boolean header."""

from __future__ import annotations

from vllm_sim.errors import RequestError
from vllm_sim.http.messages import JSON, HttpRequest

# vLLM answers a request its schema refuses with the HTTP phrase as the error type.
VALIDATION_ERROR_TYPE = "Bad Request"
# vLLM's refusal of a body that is not JSON, on every route that reads one.
NOT_JSON = "Unsupported Media Type: Only 'application/json' is allowed"
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def validation_error(entry: str, param: str | None = None) -> RequestError:
    """A 400 worded as vLLM words a request that fails its schema (FastAPI's validation
    error): the count, then the entry, indented. `param` names the field (`body.n`)."""
    return RequestError(400, f"1 validation error:\n  {entry}", param, VALIDATION_ERROR_TYPE)


def require_json(content_type: bytes | None) -> RequestError | None:
    """vLLM's media check of a POST body, before it is read: the first Content-Type,
    lower-cased, is application/json up to its first `;` (a charset may follow). A missing
    one is not JSON."""
    if content_type is not None and content_type.lower().partition(b";")[0] == JSON:
        return None
    return validation_error(NOT_JSON)


def header_flag(request: HttpRequest, name: bytes) -> bool:
    """A header read as Go's strconv.ParseBool reads true: the control headers the Go
    simulator defines are read by that rule, so clients written for it behave the same."""
    return (request.header(name) or "").strip() in _GO_TRUE
