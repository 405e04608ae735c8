"""What vLLM's HTTP server does before a handler runs, worded as it words it: the media
check of a POST body, and the envelope of the errors the kernel answers itself."""

from __future__ import annotations

from vllm_sim.errors import RequestError
from vllm_sim.frontend.envelope import error_body
from vllm_sim.frontend.request_rules import validation_error
from vllm_sim.http.messages import JSON, Dialect

# vLLM's refusal of a body that is not JSON, on every route that reads one.
NOT_JSON = "Unsupported Media Type: Only 'application/json' is allowed"


def require_json(content_type: bytes | None) -> RequestError | None:
    """vLLM's media check of a POST body, before it is read: the first Content-Type,
    lower-cased, is application/json up to its first `;` (a charset may follow). A missing
    one is not JSON."""
    if content_type is not None and content_type.lower().partition(b";")[0] == JSON:
        return None
    return validation_error(NOT_JSON)


def _too_large(limit: int) -> str:
    limit_mb = limit // (1024 * 1024)
    return f"Request body exceeds the {limit_mb} MB limit (max-request-body-size-mb)"


# The kernel's own errors (404, 405, 408, 413, 431, 500...) in the envelope of the API.
OPENAI_DIALECT = Dialect(error_body, JSON, _too_large)
