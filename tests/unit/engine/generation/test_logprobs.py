"""Synthetic logprob values: a fixed function of the token position p,
L(p) = -1.0 - (p mod 3) * 0.1, with the top alternatives 0.5 apart below it."""

from __future__ import annotations

import json

from vllm_sim.engine.generation import token_logprob, top_alternatives


def test_base_value_cycles() -> None:
    assert [token_logprob(p) for p in range(7)] == [-1.0, -1.1, -1.2, -1.0, -1.1, -1.2, -1.0]


def test_values_serialize_cleanly() -> None:
    assert json.dumps([token_logprob(1), token_logprob(2)]) == "[-1.1, -1.2]"
    values = [value for _, value in top_alternatives("t", 1, 5)]
    assert json.dumps(values) == "[-1.1, -1.6, -2.1, -2.6, -3.1]"


def test_top_alternatives() -> None:
    assert top_alternatives("Hi ", 2, 3) == [("Hi ", -1.2), ("Hi _1", -1.7), ("Hi _2", -2.2)]
    assert top_alternatives("x", 0, 1) == [("x", -1.0)]


def test_non_positive_k_gives_nothing() -> None:
    assert top_alternatives("x", 0, 0) == []
    assert top_alternatives("x", 0, -2) == []
