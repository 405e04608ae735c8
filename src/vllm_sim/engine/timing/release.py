"""Releasing a due token to its stream: what either timing does once a token is due."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_sim.engine.observer import EngineObserver
    from vllm_sim.engine.sequence import Sequence


def release_token(seq: Sequence, now: float, observer: EngineObserver) -> None:
    """Releases the next token of `seq` at `now`. Its gap since the previous release
    is what vLLM's ITL and TPOT record (a late timer shows as a longer gap): measured,
    not the delay sampled for it. A tool call's first token has no step before it."""
    seq.emitted += 1
    if seq.emitted > 1 and seq.emitted - 1 not in seq.call_starts:
        observer.inter_tokens(seq, now - seq.t_last_token, 1)
    seq.t_last_token = now
