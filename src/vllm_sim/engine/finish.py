"""Why a sequence stopped: the values protocols report as `finish_reason`."""

from __future__ import annotations

import enum


class FinishReason(enum.StrEnum):
    STOP = "stop"  # the model ended its answer
    LENGTH = "length"  # cut off by max_tokens or the context length
    TOOL_CALLS = "tool_calls"  # the answer is tool calls
    REMOTE_DECODE = "remote_decode"  # a prefill node: the decode node continues
    CACHE_THRESHOLD = "cache_threshold"  # refused: too little of the prompt was cached
