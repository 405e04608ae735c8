"""Synthetic logprobs in the chat, Responses and completions wire shapes.

Entries are encoded to JSON bytes, once per distinct (token text, position class) of a
request: a token's entry depends on nothing else, and the texts of an answer repeat, so
an answer with thousands of tokens and 20 alternatives each is mostly a join of bytes the
request already made. Building them as dicts costs ~5 us and ~500 bytes per alternative
instead, which is what made large logprob answers block the server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from vllm_sim.engine.generation.logprobs import PERIOD, token_logprob, top_alternatives
from vllm_sim.errors import RequestError

# vLLM's default --max-logprobs: asking for more is a 400 there too.
MAX_LOGPROBS = 20

_encode = msgspec.json.encode


def check_logprobs_count(value: int | None, param: str) -> None:
    if value is None:
        return
    if value < 0:
        raise RequestError(400, f"`{param}` must be a non-negative value.", param=param)
    if value > MAX_LOGPROBS:
        # vLLM names the sampling parameter both fields become.
        raise RequestError(
            400,
            f"Requested sample logprobs of {value}, which is greater than max allowed: "
            f"{MAX_LOGPROBS} (parameter=logprobs, value={value})",
            param="logprobs",
        )


def _bytes(piece: str) -> list[int]:
    return list(piece.encode())


class ChatLogprobs:
    """The chat and Responses shape: one `{token, logprob, bytes, top_logprobs}` entry per
    token, with `top` alternatives."""

    __slots__ = ("_memo", "_top")

    def __init__(self, top: int) -> None:
        self._top = top
        self._memo: dict[tuple[str, int], bytes] = {}

    def entry(self, piece: str, position: int) -> bytes:
        key = (piece, position % PERIOD)
        encoded = self._memo.get(key)
        if encoded is None:
            encoded = _encode(
                {
                    "token": piece,
                    "logprob": token_logprob(position),
                    "bytes": _bytes(piece),
                    "top_logprobs": [
                        {"token": tok, "logprob": value, "bytes": _bytes(tok)}
                        for tok, value in top_alternatives(piece, position, self._top)
                    ],
                }
            )
            self._memo[key] = encoded
        return encoded

    def entries(self, pieces: Sequence[str], start: int) -> msgspec.Raw:
        """The JSON list of the entries of `pieces`, the first at position `start`."""
        entry = self.entry
        return msgspec.Raw(
            b"[" + b",".join([entry(p, start + i) for i, p in enumerate(pieces)]) + b"]"
        )

    def content(self, pieces: Sequence[str], start: int) -> msgspec.Raw:
        """Chat's `logprobs` object: `{"content": [entries]}`."""
        return msgspec.Raw(b'{"content":' + self.entries(pieces, start) + b"}")


class CompletionLogprobs:
    """The legacy completions shape: parallel lists and one top-N map per token. The
    sampled token is always in its own map, as in vLLM (so logprobs=0 gives one)."""

    __slots__ = ("_count", "_memo")

    def __init__(self, top: int) -> None:
        self._count = max(top, 1)
        self._memo: dict[tuple[str, int], msgspec.Raw] = {}

    def _top_map(self, piece: str, position: int) -> msgspec.Raw:
        key = (piece, position % PERIOD)
        encoded = self._memo.get(key)
        if encoded is None:
            encoded = msgspec.Raw(_encode(dict(top_alternatives(piece, position, self._count))))
            self._memo[key] = encoded
        return encoded

    def of(self, pieces: Sequence[str], start: int, offset: int) -> dict[str, list[Any]]:
        """The logprobs of `pieces`, the first at position `start` and text offset `offset`."""
        offsets = []
        for piece in pieces:
            offsets.append(offset)
            offset += len(piece)  # in characters, as vLLM counts them
        top_map = self._top_map
        return {
            "tokens": list(pieces),
            "token_logprobs": [token_logprob(start + i) for i in range(len(pieces))],
            "top_logprobs": [top_map(p, start + i) for i, p in enumerate(pieces)],
            "text_offset": offsets,
        }


def prompt_logprobs(
    ids: Sequence[int], count: int | None, piece: Callable[[int], str]
) -> list[dict[str, dict[str, object]] | None] | None:
    """vLLM's `prompt_logprobs`: None for the first token (nothing predicts it), then per
    prompt token a map from token id to logprob, rank and text, the prompt's own token
    first (rank 1) and `count - 1` alternatives after it. None when not asked for."""
    if count is None:
        return None
    listed: list[dict[str, dict[str, object]] | None] = [None]
    for position in range(1, len(ids)):
        token = ids[position]
        text = piece(token)
        entries: dict[str, dict[str, object]] = {}
        for rank, (alternative, value) in enumerate(
            top_alternatives(text, position, max(count, 1)), 1
        ):
            # Alternatives are no real tokens: each gets an id of its own beside the token's.
            token_id = token if rank == 1 else (token * 31 + rank) & 0xFFFFFFFF
            entries[str(token_id)] = {"logprob": value, "rank": rank, "decoded_token": alternative}
        listed.append(entries)
    return listed
