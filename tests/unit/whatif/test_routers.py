"""Routers in front of simulated instances: round-robin in turn, least-requests to the
emptiest queue, prefix-aware to the instance whose prefix cache holds the prompt; ties go
to the instance after the last one chosen."""

from __future__ import annotations

from vllm_sim.config import Config
from vllm_sim.engine.request import GenerationRequest, Prompt
from vllm_sim.whatif.prompts import prompt_ids
from vllm_sim.whatif.routers import Router, cached_share
from vllm_sim.whatif.simulation import Replay
from vllm_sim.whatif.trace import MOONCAKE_BLOCK, Trace, TraceRequest

PREFIX_A = (1, 2, 3, 4)
PREFIX_B = (11, 12, 13, 14)


def one_request_trace(hash_ids: tuple[int, ...] = (), length: int = 64) -> Trace:
    return Trace([TraceRequest(1, 0.0, length, 4, hash_ids)])


def busy(replay: Replay, instance: int, request_id: int) -> None:
    """Gives `instance` one request that stays queued (the clock is not run)."""
    model = replay.cfg.model
    request = GenerationRequest(
        str(request_id), model, [Prompt(list(range(100)))], max_tokens=10, ignore_eos=True
    )
    replay.engines[instance].submit(request)


def test_round_robin_cycles_whatever_the_load(roofline_config: Config) -> None:
    """0, 1, 2, 0, 1, 2 ... even when instance 0 is the busiest."""
    replay = Replay(roofline_config, one_request_trace(), instances=3, environ={})
    busy(replay, 0, 0)
    assert replay.engines[0].num_running + replay.engines[0].num_waiting == 1
    picks = [replay.router.choose([1, 2, 3], roofline_config.model) for _ in range(7)]
    assert picks == [0, 1, 2, 0, 1, 2, 0]


def test_a_single_instance_takes_everything(instant_config: Config) -> None:
    """With one instance every router answers 0."""
    replay = Replay(instant_config, one_request_trace(), instances=1, environ={})
    for name in ("round-robin", "least-requests", "least-kv-usage", "prefix-aware"):
        router = Router(name, replay.engines)
        assert [router.choose([5, 6], "test-model") for _ in range(3)] == [0, 0, 0]


def test_least_requests_picks_the_idle_instance(roofline_config: Config) -> None:
    """Instances 0 and 2 hold a request each: instance 1 is chosen, and again while it
    stays the emptiest."""
    replay = Replay(
        roofline_config, one_request_trace(), instances=3, router="least-requests", environ={}
    )
    busy(replay, 0, 0)
    busy(replay, 2, 1)
    assert replay.router.choose([1, 2, 3], roofline_config.model) == 1
    assert replay.router.choose([1, 2, 3], roofline_config.model) == 1
    busy(replay, 1, 2)
    busy(replay, 1, 3)
    assert replay.router.choose([1, 2, 3], roofline_config.model) == 2


def test_equal_instances_take_turns(instant_config: Config) -> None:
    """Among idle instances (equal scores) each router rotates, starting after the last
    one it chose."""
    replay = Replay(instant_config, one_request_trace(), instances=3, environ={})
    for name in ("least-requests", "least-kv-usage", "prefix-aware"):
        router = Router(name, replay.engines)
        picks = [router.choose(list(range(40)), "test-model") for _ in range(5)]
        assert picks == [0, 1, 2, 0, 1], name


def test_prefix_aware_routes_a_prompt_to_the_instance_that_cached_its_prefix(
    instant_config: Config,
) -> None:
    """After instance 0 served blocks A, a prompt starting with A goes to instance 0 (not
    to instance 1, whose turn it would be), and a prompt with no cached prefix still
    rotates."""
    length = len(PREFIX_A) * MOONCAKE_BLOCK
    replay = Replay(
        instant_config,
        one_request_trace(PREFIX_A, length),
        instances=3,
        router="prefix-aware",
        environ={},
    )
    result = replay.run()
    assert result.records[0].ok and result.records[0].instance == 0

    model = "test-model"
    extended = prompt_ids(5, TraceRequest(2, 0.0, length + MOONCAKE_BLOCK, 4, (*PREFIX_A, 99)))
    unrelated = prompt_ids(6, TraceRequest(3, 0.0, length, 4, PREFIX_B))
    assert cached_share(replay.engines[0], extended, model) == 0.8  # 4 of its 5 blocks
    assert cached_share(replay.engines[1], extended, model) == 0.0
    assert cached_share(replay.engines[0], unrelated, model) == 0.0

    router = replay.router
    assert router.choose(unrelated, model) == 1
    assert router.choose(extended, model) == 0
    assert router.choose(unrelated, model) == 1
    assert router.choose(unrelated, model) == 2
    assert router.choose(extended, model) == 0


def alternating_prefixes(rounds: int) -> Trace:
    """Requests with prefix A then B, in turn, one a second (each ends before the next)."""
    requests = []
    for index in range(2 * rounds):
        prefix = PREFIX_A if index % 2 == 0 else PREFIX_B
        length = (len(prefix) + 1) * MOONCAKE_BLOCK
        requests.append(TraceRequest(index + 1, float(index), length, 4, (*prefix, 100 + index)))
    return Trace(requests)


def test_prefix_aware_keeps_each_prefix_on_one_instance_in_a_replay(
    instant_config: Config,
) -> None:
    """Replayed over 3 instances, A and B each stay on one instance of their own and every
    request after the first of its prefix finds the prefix cached; round-robin spreads
    them so that no instance sees a prefix twice."""
    trace = alternating_prefixes(3)
    aware = Replay(instant_config, trace, instances=3, router="prefix-aware", environ={}).run()
    a_instances = {r.instance for r in aware.records[0::2]}
    b_instances = {r.instance for r in aware.records[1::2]}
    assert len(a_instances) == len(b_instances) == 1
    assert a_instances != b_instances
    prefix_tokens = len(PREFIX_A) * MOONCAKE_BLOCK
    assert [r.cached_tokens for r in aware.records] == [0, 0] + [prefix_tokens] * 4

    spread = Replay(instant_config, trace, instances=3, router="round-robin", environ={}).run()
    assert [r.instance for r in spread.records] == [0, 1, 2, 0, 1, 2]
    assert all(r.cached_tokens == 0 for r in spread.records)
    assert spread.summary.prefix_cache_hit_rate == 0.0
    assert aware.summary.prefix_cache_hit_rate > 0.5
