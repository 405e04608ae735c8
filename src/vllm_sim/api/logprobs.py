"""Synthetic logprobs in the chat and completions wire shapes."""

from __future__ import annotations

from typing import Any

from vllm_sim.engine.generation.logprobs import token_logprob, top_alternatives
from vllm_sim.errors import RequestError

# vLLM's default --max-logprobs: asking for more is a 400 there too.
MAX_LOGPROBS = 20


def check_logprobs_count(value: int | None, param: str) -> None:
    if value is None:
        return
    if value < 0:
        raise RequestError(400, f"`{param}` must be a non-negative value.", param=param)
    if value > MAX_LOGPROBS:
        raise RequestError(
            400,
            f"Requested sample logprobs of {value}, which is greater than max allowed: "
            f"{MAX_LOGPROBS}",
            param=param,
        )


def _bytes(piece: str) -> list[int]:
    return list(piece.encode())


def chat_entry(piece: str, position: int, top: int) -> dict[str, Any]:
    """One `logprobs.content` entry; `top_logprobs` holds `top` alternatives."""
    return {
        "token": piece,
        "logprob": token_logprob(position),
        "bytes": _bytes(piece),
        "top_logprobs": [
            {"token": tok, "logprob": value, "bytes": _bytes(tok)}
            for tok, value in top_alternatives(piece, position, top)
        ],
    }


def chat_logprobs(pieces: list[str], start: int, top: int) -> dict[str, Any]:
    return {"content": [chat_entry(p, start + i, top) for i, p in enumerate(pieces)]}


def response_logprobs(pieces: list[str], start: int, top: int) -> list[dict[str, Any]]:
    """The Responses API shape: a list of entries like chat's (first token at `start`)."""
    return [chat_entry(p, start + i, top) for i, p in enumerate(pieces)]


def completion_logprobs(pieces: list[str], start: int, top: int, offset: int) -> dict[str, Any]:
    """The legacy completions shape: parallel lists and one top-N map per token."""
    offsets = []
    for piece in pieces:
        offsets.append(offset)
        offset += len(piece.encode())
    # The sampled token is always in its own top map, as in vLLM (so logprobs=0 gives one).
    count = max(top, 1)
    return {
        "tokens": pieces,
        "token_logprobs": [token_logprob(start + i) for i in range(len(pieces))],
        "top_logprobs": [dict(top_alternatives(p, start + i, count)) for i, p in enumerate(pieces)],
        "text_offset": offsets,
    }
