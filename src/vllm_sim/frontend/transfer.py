"""P/D disaggregation and cache-hit control, shared by the generation endpoints.

`kv_transfer_params` follows vLLM's NIXL connector: a prefill request
(`do_remote_decode`) answers with the parameters the decode node needs to pull its KV
blocks; a decode request (`do_remote_prefill`) pays a KV-transfer latency instead of a
prefill and counts the transferred blocks as cached.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import msgspec

from vllm_sim.engine.sequence import Sequence
from vllm_sim.frontend.caller import Caller
from vllm_sim.frontend.request_rules import header_flag

CACHE_THRESHOLD_HEADER = b"x-cache-threshold-finish-reason"
NIXL_SIDE_CHANNEL_PORT = 5600  # vLLM's default VLLM_NIXL_SIDE_CHANNEL_PORT
ENGINE_ID = str(uuid.uuid4())  # this server's NIXL engine id, stable while it runs


class KvTransferParams(msgspec.Struct):
    do_remote_decode: bool = False
    do_remote_prefill: bool = False
    remote_engine_id: str | None = None
    remote_block_ids: list[int | str] | None = None
    remote_host: str | None = None
    remote_port: int | None = None
    tp_size: int | None = None


def cache_threshold_forced(caller: Caller) -> bool:
    """X-Cache-Threshold-Finish-Reason as Go parses a bool (other values: no effect)."""
    return header_flag(caller, CACHE_THRESHOLD_HEADER)


def prefill_answer(seq: Sequence, host: str, block_size: int) -> dict[str, Any]:
    """What a prefill node returns so the decode node can fetch the prompt's KV blocks."""
    blocks = math.ceil(seq.prompt_tokens / block_size)
    return {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "remote_engine_id": ENGINE_ID,
        "remote_block_ids": list(range(blocks)),
        "remote_host": host or "localhost",
        "remote_port": NIXL_SIDE_CHANNEL_PORT,
        "tp_size": 1,
    }
