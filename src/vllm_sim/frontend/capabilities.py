"""Which generation endpoint honours which shared feature: the one table the pipeline reads.

A feature an endpoint's row leaves out is ignored there, even when the body or a header
asks for it, as the corresponding vLLM (or reference) endpoint ignores it.
"""

from __future__ import annotations

from typing import NamedTuple


class Capabilities(NamedTuple):
    choices: bool  # `n` choices per prompt
    include_usage: bool  # stream_options.include_usage adds a usage chunk
    kv_transfer: bool  # kv_transfer_params: P/D disaggregation (NIXL shape)
    cache_hit_threshold: bool  # the request's own `cache_hit_threshold`
    threshold_header: bool  # X-Cache-Threshold-Finish-Reason forces that refusal
    omni_image: bool  # --omni answers may end with a generated image
    reasoning: bool  # --reasoning-parser: the answer opens with its reasoning part


Y, N = True, False
# fmt: off
#                          n  usage  P/D  threshold  header  omni  reasoning
CHAT        = Capabilities(Y,   Y,    Y,     Y,        Y,     Y,    Y)
COMPLETIONS = Capabilities(Y,   Y,    Y,     Y,        Y,     N,    N)
RESPONSES   = Capabilities(N,   N,    N,     N,        N,     N,    Y)
MESSAGES    = Capabilities(N,   N,    N,     N,        Y,     N,    Y)
GENERATE    = Capabilities(N,   Y,    Y,     N,        N,     N,    N)
# fmt: on
