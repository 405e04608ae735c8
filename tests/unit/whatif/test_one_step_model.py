"""The server, `replay` and `plan` time a step with one model: the same flags give the same
step times and the same API-server time, whichever of the three builds the engine."""

from __future__ import annotations

import pytest

from vllm_sim.config import load_config
from vllm_sim.perf import StepLoad, StepTimeModel
from vllm_sim.server.build import build_instance
from vllm_sim.server.step_timing import timed_config
from vllm_sim.whatif.simulation import Replay
from vllm_sim.whatif.trace import Trace

FLAGS = [
    "--model",
    "meta-llama/Llama-3.1-70B-Instruct",
    "--timing-model",
    "roofline",
    "--gpu",
    "H100",
    "--tensor-parallel-size",
    "4",
    "--max-num-batched-tokens",
    "2048",
]


def loads() -> list[StepLoad]:
    decode = StepLoad()
    decode.add_decodes(48, 48 * 1500)
    mixed = StepLoad()
    mixed.add_decodes(20, 20 * 900)
    mixed.add_prefill(512, 1024, completes=False)
    prefill = StepLoad()
    prefill.add_prefill(0, 2048, completes=True)
    return [decode, mixed, prefill]


def server_model() -> StepTimeModel:
    cfg, timing = timed_config(load_config(FLAGS, {}), {})
    assert timing is not None
    instance = build_instance(cfg, 0, 0, None, timing.model)
    return instance.engine.timing.step_model  # type: ignore[attr-defined,no-any-return]


def replay_model(flags: list[str]) -> StepTimeModel:
    replay = Replay(load_config(flags, {}), Trace([]), environ={})
    return replay.engines[0].timing.step_model  # type: ignore[attr-defined,no-any-return]


def test_server_replay_and_plan_give_the_same_step_times() -> None:
    server = server_model()
    replay = replay_model(FLAGS)
    # A plan's candidate is the server flags with its own TP and GPU appended, then a
    # replay of that configuration.
    plan = replay_model([*FLAGS, "--tensor-parallel-size", "4", "--gpu", "H100"])
    for load in loads():
        seconds = server.step_seconds(load)
        assert seconds > 0
        assert replay.step_seconds(load) == pytest.approx(seconds, rel=1e-12)
        assert plan.step_seconds(load) == pytest.approx(seconds, rel=1e-12)
    for model in (replay, plan):
        assert model.admission_delay(600) == server.admission_delay(600) > 0
