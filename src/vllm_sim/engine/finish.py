"""Why a sequence stopped: the values protocols report as `finish_reason`.

A Literal type, not an Enum: a finish reason is read and written on every request, and a
plain string costs nothing to look up, hash or encode, while mypy still checks each value.
"""

from __future__ import annotations

from typing import Final, Literal

FinishReason = Literal["stop", "length", "tool_calls", "remote_decode", "cache_threshold", "abort"]


class Finish:
    """Each finish reason by name."""

    STOP: Final = "stop"  # the model ended its answer
    LENGTH: Final = "length"  # cut off by max_tokens or the context length
    TOOL_CALLS: Final = "tool_calls"  # the answer is tool calls
    REMOTE_DECODE: Final = "remote_decode"  # a prefill node: the decode node continues
    CACHE_THRESHOLD: Final = "cache_threshold"  # refused: too little of the prompt was cached
    ABORT: Final = "abort"  # ended by the server (POST /pause) with what it had released
