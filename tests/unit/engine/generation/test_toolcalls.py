"""Tool calls: how many a response makes, which tools they call, and the settings that the
server configuration gives them."""

from __future__ import annotations

import random
import statistics
from collections import Counter

import pytest

from vllm_sim.config import load_config
from vllm_sim.engine.generation.toolcalls import call_count, pick_tools
from vllm_sim.schemagen import SynthesisSettings
from vllm_sim.server.views import synthesis as synthesis_settings

DEFAULT = SynthesisSettings()


# ---- call counts and tool picks ------------------------------------------------------------


def _counts(candidates: int, forced: bool, percent: int = 45, n: int = 20_000) -> list[int]:
    rng = random.Random(99)
    settings = SynthesisSettings(extra_call_probability=percent)
    return [call_count(rng, candidates, forced, settings) for _ in range(n)]


def test_call_count_forced_with_three_candidates() -> None:
    counts = _counts(3, forced=True)
    # P(1) = .55, P(2) = .45 * .55, P(3) = .45^2; mean = 1 + .45 + .45^2 = 1.6525.
    assert set(counts) == {1, 2, 3}
    assert abs(statistics.fmean(counts) - 1.6525) < 0.02
    shares = Counter(counts)
    assert abs(shares[1] / len(counts) - 0.55) < 0.015
    assert abs(shares[3] / len(counts) - 0.2025) < 0.015


def test_call_count_unforced_with_three_candidates() -> None:
    counts = _counts(3, forced=False)
    # mean = .45 + .45^2 + .45^3 = 0.743625; no call at all 55% of the time.
    assert set(counts) == {0, 1, 2, 3}
    assert abs(statistics.fmean(counts) - 0.743625) < 0.02
    assert abs(Counter(counts)[0] / len(counts) - 0.55) < 0.015


def test_call_count_extremes() -> None:
    assert set(_counts(4, forced=True, percent=0, n=100)) == {1}
    assert set(_counts(4, forced=False, percent=0, n=100)) == {0}
    assert set(_counts(4, forced=False, percent=100, n=100)) == {4}
    assert set(_counts(1, forced=True, percent=100, n=100)) == {1}


def test_call_count_single_forced_candidate_draws_nothing() -> None:
    rng = random.Random(5)
    state = rng.getstate()
    assert call_count(rng, 1, True, DEFAULT) == 1
    assert rng.getstate() == state


def test_call_count_without_candidates() -> None:
    with pytest.raises(ValueError, match="no tools available to create tool calls"):
        call_count(random.Random(0), 0, True, DEFAULT)


def test_pick_tools_uniform_with_replacement() -> None:
    rng = random.Random(8)
    picks = [name for _ in range(3000) for name in pick_tools(rng, ["a", "b", "c"], 2)]
    counts = Counter(picks)
    assert set(counts) == {"a", "b", "c"}
    assert all(abs(c - 2000) < 150 for c in counts.values())
    assert any(len(set(pick_tools(rng, ["a", "b"], 2))) == 1 for _ in range(50))


def test_pick_tools_single_candidate_draws_nothing() -> None:
    rng = random.Random(5)
    state = rng.getstate()
    assert pick_tools(rng, ["only"], 3) == ["only", "only", "only"]
    assert rng.getstate() == state
    with pytest.raises(ValueError):
        pick_tools(rng, [], 1)


# ---- settings ------------------------------------------------------------------------------


def test_settings_from_config() -> None:
    cfg = load_config(
        [
            "--model",
            "m",
            "--min-tool-call-integer-param",
            "-5",
            "--max-tool-call-integer-param",
            "5",
            "--min-tool-call-number-param",
            "1.5",
            "--max-tool-call-number-param",
            "2.5",
            "--min-tool-call-array-param-length",
            "2",
            "--max-tool-call-array-param-length",
            "3",
            "--tool-call-not-required-param-probability",
            "10",
            "--object-tool-call-not-required-field-probability",
            "20",
            "--tool-call-extra-call-probability",
            "30",
        ],
        {},
    )
    assert synthesis_settings(cfg) == SynthesisSettings(-5, 5, 1.5, 2.5, 2, 3, 10, 20, 30)
    assert synthesis_settings(load_config(["--model", "m"], {})) == DEFAULT
