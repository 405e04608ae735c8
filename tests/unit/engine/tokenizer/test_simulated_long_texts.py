"""Texts longer than one regex slice tokenize exactly as a single pass would, whatever
falls at the slice edges (a word, a whitespace run, a piece longer than a slice)."""

from __future__ import annotations

import random

import pytest

from vllm_sim.engine.tokenizer.fnv import fnv1a_32
from vllm_sim.engine.tokenizer.simulated import _SLICE_CHARS, _TOKEN_RE, SimulatedTokenizer

ALPHABET = ["a", "bb", " ", "  ", "\n", ".", "é", "_", "xyz", "-", " \t", "Z9", "!!", "\r\n"]


def single_pass(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


@pytest.mark.parametrize("seed", range(40))
def test_sliced_pieces_equal_one_pass(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(
        rng.choice(ALPHABET) for _ in range(rng.randint(_SLICE_CHARS // 2, 4 * _SLICE_CHARS))
    )
    if seed % 3 == 0:
        text = " " * rng.randint(1, 5) + text  # a leading whitespace run is a piece of its own
    ids, pieces = SimulatedTokenizer().tokenize(text)
    assert pieces == single_pass(text)
    assert "".join(pieces) == text
    assert ids == [fnv1a_32(piece) for piece in pieces]


@pytest.mark.parametrize(
    "length", [_SLICE_CHARS - 1, _SLICE_CHARS, _SLICE_CHARS + 1, 3 * _SLICE_CHARS]
)
def test_a_piece_longer_than_a_slice_stays_whole(length: int) -> None:
    text = "w" * length + "   next . " + "q" * length
    assert SimulatedTokenizer().tokenize(text)[1] == single_pass(text)


def test_slice_edge_inside_trailing_whitespace() -> None:
    text = "a" * (_SLICE_CHARS - 2) + " " * 10 + "b"
    assert SimulatedTokenizer().tokenize(text)[1] == single_pass(text)
