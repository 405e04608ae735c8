"""The latency model: sampling, load factor, calculators."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from vllm_sim.engine.latency import LatencyModel, LatencySettings, sample_ms

MS = 1_000_000
US = 1_000


def model(**settings: Any) -> LatencyModel:
    return LatencyModel(LatencySettings(**settings), random.Random(7))


# ----------------------------------------------------------------- sampling


def test_sample_without_std_is_the_mean_in_whole_ms() -> None:
    rng = random.Random(1)
    assert sample_ms(rng, 42 * MS, 0) == 42
    assert sample_ms(rng, 42 * MS + 999_999, 0) == 42  # sub-ms part dropped first
    assert sample_ms(rng, 999_999, 0) == 0  # a mean under 1 ms sleeps 0
    assert isinstance(sample_ms(rng, 42 * MS, 0), int)


def test_std_below_one_ms_has_no_effect() -> None:
    rng = random.Random(2)
    values = {sample_ms(rng, 100 * MS, 999 * US) for _ in range(500)}
    assert values == {100}


def test_samples_are_whole_ms_clamped_to_30_170_percent() -> None:
    rng = random.Random(3)
    # A std as large as the mean pushes many draws past both clamps.
    values = [sample_ms(rng, 100 * MS, 100 * MS) for _ in range(4000)]
    assert all(isinstance(v, int) for v in values)
    assert min(values) == 30
    assert max(values) == 170
    assert all(30 <= v <= 170 for v in values)
    assert values.count(30) > 100 and values.count(170) > 100  # clamped, not redrawn
    assert len(set(values)) > 100  # and genuinely random in between


def test_sub_ms_std_part_is_dropped_before_sampling() -> None:
    # mean 10.9 ms -> 10, std 3.9 ms -> 3: the clamp range is [3, 17] whole ms.
    rng = random.Random(4)
    values = [sample_ms(rng, 10 * MS + 900 * US, 3 * MS + 900 * US) for _ in range(3000)]
    assert min(values) >= 3 and max(values) <= 17
    assert len(set(values)) > 5


def test_samples_centre_on_the_mean() -> None:
    rng = random.Random(5)
    values = [sample_ms(rng, 200 * MS, 20 * MS) for _ in range(5000)]
    mean = sum(values) / len(values)
    assert 198.0 <= mean <= 200.5  # truncation biases down by at most 1 ms
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    assert 18.0 <= std <= 22.0


def test_same_seed_same_samples() -> None:
    a = [sample_ms(random.Random(9), 100 * MS, 10 * MS) for _ in range(3)]
    b = [sample_ms(random.Random(9), 100 * MS, 10 * MS) for _ in range(3)]
    assert a == b


# ----------------------------------------------------------------- load factor


@pytest.mark.parametrize(("running", "factor"), [(1, 1.0), (6, 1.5), (11, 2.0), (3, 1.2)])
def test_load_factor_formula(running: int, factor: float) -> None:
    m = model(time_factor_under_load=2.0, max_num_seqs=11)
    assert m.load_factor(running) == pytest.approx(factor)


def test_load_factor_is_one_with_tf_one() -> None:
    m = model(time_factor_under_load=1.0, max_num_seqs=11)
    assert [m.load_factor(r) for r in range(1, 12)] == [1.0] * 11


def test_load_factor_is_one_with_a_single_slot() -> None:
    m = model(time_factor_under_load=5.0, max_num_seqs=1)
    assert m.load_factor(1) == 1.0
    assert m.load_factor(3) == 1.0


@pytest.mark.parametrize("tf", [1.0, 1.3, 1.5, 2.0, 2.5, 3.7, 10.0])
def test_ttft_at_full_load_is_floor_of_scaled_mean(tf: float) -> None:
    m = model(ttft=42 * MS, time_factor_under_load=tf, max_num_seqs=4)
    expected = math.floor(int(42 * MS * tf) / MS)
    assert expected == math.floor(42 * tf + 1e-9)
    for _ in range(3):
        assert m.time_to_first_token(10, 0, False, running=4) == expected / 1000


def test_ttft_single_slot_ignores_tf() -> None:
    m = model(ttft=42 * MS, time_factor_under_load=3.0, max_num_seqs=1)
    assert m.time_to_first_token(10, 0, False, running=1) == 0.042


def test_ttft_half_load() -> None:
    # TF 3, 5 slots, 3 running: factor 2 -> 84 ms
    m = model(ttft=42 * MS, time_factor_under_load=3.0, max_num_seqs=5)
    assert m.time_to_first_token(10, 0, False, running=3) == 0.084


def test_std_is_not_scaled_by_load() -> None:
    # TTFT 100 ms, std 30 ms, factor 3: the mean becomes 300 ms and the clamp range
    # [90, 510] ms, but the spread stays that of a 30 ms std.
    m = model(ttft=100 * MS, ttft_std=30 * MS, time_factor_under_load=3.0, max_num_seqs=2)
    values = [m.time_to_first_token(1, 0, False, running=2) * 1000 for _ in range(3000)]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    assert 297 <= mean <= 301
    assert 27 <= std <= 33


def test_itl_is_load_scaled_and_reevaluated() -> None:
    m = model(itl=10 * MS, time_factor_under_load=3.0, max_num_seqs=5)
    assert m.inter_token_latency(running=1) == 0.010
    assert m.inter_token_latency(running=3) == 0.020
    assert m.inter_token_latency(running=5) == 0.030


def test_itl_sampling_uses_its_std() -> None:
    m = model(itl=20 * MS, itl_std=6 * MS)
    values = [round(m.inter_token_latency(running=1) * 1000, 6) for _ in range(2000)]
    assert all(v == int(v) for v in values)  # whole ms
    assert min(values) >= 6 and max(values) <= 34
    assert len(set(values)) > 10


def test_zero_itl_is_zero() -> None:
    assert model().inter_token_latency(running=1) == 0.0


# ----------------------------------------------------------------- calculators

PREFILL = {"prefill_overhead": 1000 * MS, "prefill_per_token": 50 * MS}


def test_constant_ignores_prefill_params() -> None:
    m = model(calculator="constant", ttft=100 * MS, **PREFILL)
    assert m.time_to_first_token(500, 0, False, running=1) == 0.1
    zero = model(calculator="constant", **PREFILL)
    assert zero.time_to_first_token(500, 0, False, running=1) == 0.0


def test_constant_ignores_cached_tokens() -> None:
    m = model(calculator="constant", ttft=100 * MS)
    assert m.time_to_first_token(500, 400, False, running=1) == 0.1


def test_per_token_is_overhead_plus_uncached_tokens() -> None:
    m = model(
        calculator="per-token", ttft=500 * MS, prefill_overhead=20 * MS, prefill_per_token=2 * MS
    )
    assert m.time_to_first_token(10, 0, False, running=1) == 0.040  # 20 + 10 x 2
    assert m.time_to_first_token(10, 4, False, running=1) == 0.032  # 20 + 6 x 2
    assert m.time_to_first_token(10, 10, False, running=1) == 0.020  # all cached


def test_per_token_is_load_scaled() -> None:
    m = model(
        calculator="per-token",
        prefill_overhead=20 * MS,
        prefill_per_token=2 * MS,
        time_factor_under_load=2.0,
        max_num_seqs=3,
    )
    # factor 2: 40 + 6 x 4
    assert m.time_to_first_token(10, 4, False, running=3) == 0.064
    # factor 1.5: 30 + 6 x 3
    assert m.time_to_first_token(10, 4, False, running=2) == 0.048


def test_per_token_sub_ms_per_token_accumulates_before_rounding() -> None:
    # 8B profile: 30 ms + 256 x 250 us = 94 ms
    m = model(calculator="per-token", prefill_overhead=30 * MS, prefill_per_token=250 * US)
    assert m.time_to_first_token(256, 0, False, running=1) == 0.094


def test_legacy_uses_per_token_when_ttft_and_std_are_zero() -> None:
    m = model(**PREFILL)
    assert m.time_to_first_token(5, 0, False, running=1) == 1.25


def test_legacy_uses_constant_when_ttft_is_set() -> None:
    m = model(ttft=10 * MS, **PREFILL)
    assert m.time_to_first_token(5, 0, False, running=1) == 0.01


def test_legacy_uses_constant_when_only_ttft_std_is_set() -> None:
    m = model(ttft_std=5 * MS, **PREFILL)
    assert m.time_to_first_token(5, 0, False, running=1) == 0.0


def test_prefill_std_applies_to_per_token_form() -> None:
    m = model(calculator="per-token", prefill_overhead=100 * MS, prefill_std=20 * MS)
    values = {m.time_to_first_token(1, 0, False, running=1) for _ in range(300)}
    assert len(values) > 5
    assert min(values) >= 0.030 and max(values) <= 0.170


# ----------------------------------------------------------------- remote prefill (P/D)

KV = {"kv_transfer": 7 * MS, "kv_transfer_per_token": 2 * MS}


def test_remote_prefill_constant_uses_kv_transfer_latency() -> None:
    m = model(calculator="constant", ttft=100 * MS, **KV, **PREFILL)
    assert m.time_to_first_token(10, 0, True, running=1) == 0.007


def test_remote_prefill_per_token_uses_n_times_per_token() -> None:
    m = model(calculator="per-token", ttft=100 * MS, **KV, **PREFILL)
    assert m.time_to_first_token(10, 0, True, running=1) == 0.020


def test_remote_prefill_per_token_zero_is_instant() -> None:
    m = model(calculator="per-token", kv_transfer=7 * MS, **PREFILL)
    assert m.time_to_first_token(10, 0, True, running=1) == 0.0


@pytest.mark.parametrize("calculator", ["constant", "per-token"])
def test_remote_prefill_not_load_scaled_and_ignores_cache(calculator: str) -> None:
    m = model(calculator=calculator, time_factor_under_load=3.0, max_num_seqs=4, **KV)
    alone = m.time_to_first_token(10, 0, True, running=1)
    assert m.time_to_first_token(10, 0, True, running=4) == alone
    assert m.time_to_first_token(10, 8, True, running=4) == alone
    assert alone == (0.007 if calculator == "constant" else 0.020)


def test_remote_prefill_legacy_choice() -> None:
    per_token = model(kv_transfer_per_token=2 * MS, ttft=100 * MS)
    assert per_token.time_to_first_token(10, 0, True, running=1) == 0.020
    constant = model(**KV)
    assert constant.time_to_first_token(10, 0, True, running=1) == 0.007
    std_only = model(kv_transfer_std=3 * MS, kv_transfer_per_token=2 * MS)
    assert std_only.time_to_first_token(10, 0, True, running=1) == 0.0


def test_remote_prefill_per_token_std() -> None:
    m = model(
        calculator="per-token", kv_transfer_per_token=10 * MS, kv_transfer_per_token_std=30 * MS
    )
    values = {m.time_to_first_token(10, 0, True, running=1) for _ in range(300)}
    assert len(values) > 5
    assert min(values) >= 0.030 and max(values) <= 0.170


@pytest.mark.parametrize(
    "settings",
    [
        {"itl": 10 * MS},
        {"itl": 10 * MS + 999_999},  # the sub-ms part dropped
        {"itl": 7 * MS, "itl_std": 999_999},  # a spread under 1 ms has no effect
        {"itl": 10 * MS, "time_factor_under_load": 3.0, "max_num_seqs": 1},
    ],
)
def test_a_fixed_itl_is_the_sampled_one(settings: dict[str, int]) -> None:
    """Without spread or load scaling the delay is worked out once: the same value the
    sampler gives."""
    expected = sample_ms(random.Random(0), settings["itl"], settings.get("itl_std", 0)) / 1000
    m = model(**settings)
    assert [m.inter_token_latency(running=r) for r in (1, 50)] == [expected, expected]
