"""The latency model: how long prefill, each decode step and a KV transfer take.

Follows the reference exactly, so timings match it: durations are sampled in whole
milliseconds from a clamped Gaussian, and the mean is scaled by a load factor that grows
linearly with the number of running sequences.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

NS_PER_MS = 1_000_000

CONSTANT = "constant"
PER_TOKEN = "per-token"


@dataclass(frozen=True, slots=True)
class LatencySettings:
    """The latency knobs, in nanoseconds; the composition root fills them from the
    settings declared to feed this view."""

    calculator: str = ""
    ttft: int = 0
    ttft_std: int = 0
    itl: int = 0
    itl_std: int = 0
    kv_transfer: int = 0
    kv_transfer_std: int = 0
    prefill_overhead: int = 0
    prefill_per_token: int = 0
    prefill_std: int = 0
    kv_transfer_per_token: int = 0
    kv_transfer_per_token_std: int = 0
    time_factor_under_load: float = 1.0
    max_num_seqs: int = 1
    image: int = 0  # omni: time to generate an image after the text
    image_std: int = 0
    # Multiplies every latency above, and the step loop's modelled step times: a phase of
    # the schedule slows the whole engine down (or speeds it up) by it.
    factor: float = 1.0

    def scaled(self) -> LatencySettings:
        """These settings with every duration multiplied by `factor` (kept, for the step
        loop); the load factor, a multiplier itself, is left as it is."""
        f = self.factor
        if f == 1.0:
            return self
        return LatencySettings(
            calculator=self.calculator,
            ttft=round(self.ttft * f),
            ttft_std=round(self.ttft_std * f),
            itl=round(self.itl * f),
            itl_std=round(self.itl_std * f),
            kv_transfer=round(self.kv_transfer * f),
            kv_transfer_std=round(self.kv_transfer_std * f),
            prefill_overhead=round(self.prefill_overhead * f),
            prefill_per_token=round(self.prefill_per_token * f),
            prefill_std=round(self.prefill_std * f),
            kv_transfer_per_token=round(self.kv_transfer_per_token * f),
            kv_transfer_per_token_std=round(self.kv_transfer_per_token_std * f),
            time_factor_under_load=self.time_factor_under_load,
            max_num_seqs=self.max_num_seqs,
            image=round(self.image * f),
            image_std=round(self.image_std * f),
            factor=f,
        )


def sample_ms(rng: random.Random, mean_ns: int, std_ns: int) -> int:
    """A duration in whole ms: N(mean, std) clamped to [0.3, 1.7] x mean.

    Sub-millisecond parts are dropped before sampling, as the reference does, so a
    std-dev under 1 ms has no effect and a mean under 1 ms is 0.
    """
    mean = mean_ns // NS_PER_MS
    std = std_ns // NS_PER_MS
    if std == 0 or mean == 0:
        return mean
    value = mean + std * rng.gauss(0.0, 1.0)
    value = min(max(value, 0.3 * mean), 1.7 * mean)
    return int(value)


# Compiled by mypyc (setup.py): subclassed by tests and benchmarks, which are not.
@mypyc_attr(allow_interpreted_subclasses=True)
class LatencyModel:
    """Samples TTFT and inter-token delays for one engine (seconds, whole ms), every one
    multiplied by the settings' latency factor."""

    __slots__ = ("_fixed_itl", "_rng", "_s")

    def __init__(self, settings: LatencySettings, rng: random.Random) -> None:
        # The latency factor is applied here, once per configuration, so that every
        # sample below is already scaled and no token pays for it.
        settings = settings.scaled()
        self._s = settings
        self._rng = rng
        # With no spread and no slow-down under load, every delay is the same: worked out
        # once, not per token.
        fixed = settings.itl_std // NS_PER_MS == 0 and (
            settings.time_factor_under_load == 1.0 or settings.max_num_seqs <= 1
        )
        self._fixed_itl = settings.itl // NS_PER_MS / 1000 if fixed else None

    @property
    def settings(self) -> LatencySettings:
        return self._s

    def load_factor(self, running: int) -> float:
        """1 when one sequence runs, time-factor-under-load when all slots are busy."""
        s = self._s
        if s.max_num_seqs <= 1:
            return 1.0
        return 1.0 + (s.time_factor_under_load - 1.0) * (running - 1) / (s.max_num_seqs - 1)

    def _uses_per_token(self, mean: int, std: int) -> bool:
        calc = self._s.calculator
        if calc == PER_TOKEN:
            return True
        if calc == CONSTANT:
            return False
        return mean == 0 and std == 0  # legacy: per-token only when no constant is set

    def time_to_first_token(
        self, prompt_tokens: int, cached_tokens: int, remote_prefill: bool, running: int
    ) -> float:
        s = self._s
        if remote_prefill:
            # KV transfer replaces prefill; it is never scaled by load nor shortened by cache.
            if self._uses_per_token(s.kv_transfer, s.kv_transfer_std):
                mean = prompt_tokens * s.kv_transfer_per_token
                return sample_ms(self._rng, mean, s.kv_transfer_per_token_std) / 1000
            return sample_ms(self._rng, s.kv_transfer, s.kv_transfer_std) / 1000
        factor = self.load_factor(running)
        if self._uses_per_token(s.ttft, s.ttft_std):
            uncached = max(prompt_tokens - cached_tokens, 0)
            mean = int(s.prefill_overhead * factor) + uncached * int(s.prefill_per_token * factor)
            return sample_ms(self._rng, mean, s.prefill_std) / 1000
        return sample_ms(self._rng, int(s.ttft * factor), s.ttft_std) / 1000

    def time_to_generate_image(self) -> float:
        """Seconds an omni model spends on an image after its last token (not load-scaled)."""
        s = self._s
        return sample_ms(self._rng, s.image, s.image_std) / 1000

    def inter_token_latency(self, running: int) -> float:
        fixed = self._fixed_itl
        if fixed is not None:
            return fixed
        s = self._s
        if s.itl == 0:
            return 0.0
        return sample_ms(self._rng, int(s.itl * self.load_factor(running)), s.itl_std) / 1000
