"""vLLM's rules for reading a request, as its Python and Go servers apply them: FastAPI's
wording of a refused request, and Go's reading of a boolean header."""

from __future__ import annotations

from vllm_sim.errors import RequestError
from vllm_sim.frontend.caller import Caller

# vLLM answers a request its schema refuses with the HTTP phrase as the error type.
VALIDATION_ERROR_TYPE = "Bad Request"
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def validation_error(entry: str, param: str | None = None) -> RequestError:
    """A 400 worded as vLLM words a request that fails its schema (FastAPI's validation
    error): the count, then the entry, indented. `param` names the field (`body.n`)."""
    return RequestError(400, f"1 validation error:\n  {entry}", param, VALIDATION_ERROR_TYPE)


def header_flag(caller: Caller, name: bytes) -> bool:
    """A header read as Go's strconv.ParseBool reads true: the control headers the Go
    simulator defines are read by that rule, so clients written for it behave the same."""
    return (caller.header(name) or "").strip() in _GO_TRUE
