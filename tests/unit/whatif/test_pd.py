"""P/D pairs in the replay: a prefill leg on a prefill instance hands its KV to a decode
leg on a decode instance; the request is timed from its arrival to the decode's tokens."""

from __future__ import annotations

import pytest

from tests.support.recorded_run import RECORDED_RUN_FLAGS, RECORDED_TRACE
from vllm_sim.config import load_config
from vllm_sim.whatif.simulation import Replay
from vllm_sim.whatif.trace import Trace, read_trace

TRANSFER_MS = 20


def _trace(count: int) -> Trace:
    return read_trace(RECORDED_TRACE, limit=count)


def test_each_request_is_prefilled_then_decoded_on_the_other_pool() -> None:
    """With 1 prefill and 3 decode instances every request completes with all its traced
    tokens, ends on a decode instance, and its first token comes no sooner than the KV
    transfer after its arrival; the prefill instance's queue and prefix lookups are the
    request's, the decode instances' transferred prompt is not counted as a cache hit."""
    cfg = load_config([*RECORDED_RUN_FLAGS, "--kv-cache-transfer-latency", f"{TRANSFER_MS}ms"], {})
    trace = _trace(60)
    replay = Replay(cfg, trace, instances=4, router="pd", prefill_instances=1)
    result = replay.run()
    assert result.summary.completed == 60
    for record, traced in zip(result.records, trace.requests, strict=True):
        assert record.instance in (1, 2, 3)
        assert record.output_tokens == traced.output_length
        assert record.ttft is not None and record.ttft >= TRANSFER_MS / 1000
        assert record.queue_time is not None
    assert result.summary.prefix_cache_hit_rate == 0.0  # ShareGPT prompts share nothing
    assert result.settings["prefill_instances"] == 1
    # Every prefill ran on instance 0, every decode elsewhere: the samples saw instance 0
    # busy, and the decode instances hold the long streams.
    assert any(s.running_per_instance[0] for s in result.samples)
    assert max(max(s.running_per_instance[1:]) for s in result.samples) > 0


def test_half_the_fleet_prefills_by_default() -> None:
    cfg = load_config(RECORDED_RUN_FLAGS, {})
    assert Replay(cfg, _trace(5), instances=4, router="pd").prefill == 2


@pytest.mark.parametrize(("instances", "prefill"), [(1, None), (3, 3), (2, 0)])
def test_pd_needs_both_pools(instances: int, prefill: int | None) -> None:
    """Fewer than one instance in either role is refused with the reason."""
    cfg = load_config(RECORDED_RUN_FLAGS, {})
    with pytest.raises(ValueError, match="P/D needs prefill and decode instances"):
        Replay(cfg, _trace(5), instances=instances, router="pd", prefill_instances=prefill)
