"""Which generation endpoint honours which shared feature: the one table the pipeline reads.

A feature whose column is False for an endpoint is ignored there, even when the body or a
header asks for it, as the corresponding vLLM or reference endpoint ignores it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Capabilities:
    choices: bool = False  # `n` choices per prompt
    include_usage: bool = False  # stream_options.include_usage adds a usage chunk
    kv_transfer: bool = False  # kv_transfer_params: P/D disaggregation (NIXL shape)
    cache_hit_threshold: bool = False  # the request's own `cache_hit_threshold`
    threshold_header: bool = False  # X-Cache-Threshold-Finish-Reason forces the refusal
    omni_image: bool = False  # --omni answers may end with a generated image


CHAT = Capabilities(
    choices=True,
    include_usage=True,
    kv_transfer=True,
    cache_hit_threshold=True,
    threshold_header=True,
    omni_image=True,
)
COMPLETIONS = Capabilities(
    choices=True,
    include_usage=True,
    kv_transfer=True,
    cache_hit_threshold=True,
    threshold_header=True,
)
RESPONSES = Capabilities()
MESSAGES = Capabilities(threshold_header=True)
GENERATE = Capabilities(include_usage=True, kv_transfer=True)
