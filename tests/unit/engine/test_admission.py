"""The refusals admission makes before taking anything, on their own: vLLM's words for
what could never run, whatever the engine's state."""

from __future__ import annotations

import pytest

from tests.unit.engine.test_core import request
from vllm_sim.engine.admission import check_admissible, check_context, prompt_too_long
from vllm_sim.engine.core import EngineLimits
from vllm_sim.engine.errors import EngineError, Refusal


def refused(limits: EngineLimits, prompt_tokens: int = 3, **kwargs: int) -> EngineError:
    with pytest.raises(EngineError) as info:
        check_admissible(request(prompt_tokens, **kwargs), limits)
    assert info.value.refusal is Refusal.INVALID
    return info.value


def test_more_sequences_than_slots_and_queue_is_never_admissible() -> None:
    error = refused(EngineLimits(max_num_seqs=2, max_waiting_queue_length=1), n=2, prompts=2)
    assert error.param == "n"
    assert str(error).startswith("The request needs 4 sequences (2 prompts x n=2), more than")
    check_admissible(request(n=3), EngineLimits(max_num_seqs=2, max_waiting_queue_length=1))


def test_every_prompt_must_leave_room_for_its_output() -> None:
    limits = EngineLimits(max_model_len=20)
    assert refused(limits, prompt_tokens=18, max_tokens=5).param == "input_tokens"
    assert refused(limits, prompt_tokens=1, max_tokens=21).param == "max_tokens"
    check_admissible(request(prompt_tokens=15, max_tokens=5), limits)  # exactly the limit


def test_a_prompt_over_the_context_is_refused_in_vllms_words() -> None:
    with pytest.raises(EngineError) as info:
        check_context(request(prompt_tokens=21), 21, 20)
    assert str(info.value) == prompt_too_long(20)
    assert "maximum context length is 20 tokens" in prompt_too_long(20)
    assert "(parameter=input_tokens, value=21)" in prompt_too_long(20)


def test_a_pooling_prompt_may_fill_the_whole_context() -> None:
    pooling = request(prompt_tokens=20)
    pooling.pooling = True
    check_context(pooling, 20, 20)
    with pytest.raises(EngineError):
        check_context(request(prompt_tokens=20), 20, 20)  # no room for one token


def test_the_output_budget_is_checked_before_admission() -> None:
    limits = EngineLimits(max_num_seqs=8, max_request_output_tokens=10)
    assert refused(limits, n=3, max_tokens=4).param == "max_tokens"
