"""All the tool schemas of one request are tried under one synthesis budget: a request with
hundreds of expensive tools costs what one costs (a 400 within the deadline), where each
had its own 30 ms before."""

from __future__ import annotations

import time

import pytest

from vllm_sim.errors import RequestError
from vllm_sim.protocols.common.tools import Tool, plan_tools
from vllm_sim.schemagen import SynthesisSettings

# ~10 ms of CPU each: a thousand branches that can never be satisfied, then one that can.
SLOW = {
    "type": "object",
    "properties": {
        "x": {
            "anyOf": [{"type": "string", "minLength": 5, "maxLength": 2}] * 500
            + [{"type": "integer"}]
        }
    },
    "required": ["x"],
}


def test_many_expensive_tools_share_one_budget() -> None:
    tools = [Tool(f"t{i}", "", SLOW) for i in range(200)]
    started = time.thread_time()
    with pytest.raises(RequestError) as info:
        plan_tools(tools, forced=False, settings=SynthesisSettings())
    spent = time.thread_time() - started
    assert info.value.status == 400 and info.value.param == "tools"
    assert "too expensive" in info.value.message
    assert spent < 0.2, spent  # 200 tools of their own budgets: seconds


def test_a_few_expensive_tools_still_plan() -> None:
    plan = plan_tools([Tool("t", "", SLOW)], forced=True, settings=SynthesisSettings())
    assert plan is not None and [name for name, _ in plan.tools] == ["t"]
