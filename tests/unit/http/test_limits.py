"""The limits of a connection: every phase, the lingering close included, is bounded."""

from __future__ import annotations

from vllm_sim.http.limits import ConnectionLimits


def test_every_default_is_a_finite_bound() -> None:
    limits = ConnectionLimits()
    assert limits.max_head_bytes == 64 * 1024 and limits.max_headers == 256
    assert 0 < limits.linger_timeout <= limits.head_timeout
    assert 0 < limits.linger_bytes < 1 << 30
