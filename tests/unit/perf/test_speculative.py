"""Speculative decoding in the step models: verified drafts are more query positions of the
decoding sequences (compute, no weight or KV reads of their own), and the drafter adds its
passes to the step."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.perf.test_table import CSV_ROWS, write
from vllm_sim.perf import (
    PRESETS,
    Drafter,
    DraftingStepModel,
    RooflineModel,
    SpecMethod,
    SpeculativeDecoding,
    StepLoad,
    TableModel,
    draft_model_share,
    drafting_model,
    expected_tokens_per_step,
    gpu_spec,
    head_share,
)
from vllm_sim.perf.speculative import DEFAULT_DRAFT_MODEL_SHARE, DEFAULT_HEAD_SHARE

LLAMA_8B = PRESETS["meta-llama/Llama-3.1-8B-Instruct"]
LLAMA_70B = PRESETS["meta-llama/Llama-3.1-70B-Instruct"]
LLAMA_3B = PRESETS["meta-llama/Llama-3.2-3B-Instruct"]


def verifying(batch: int, context: int, drafts: int) -> StepLoad:
    """A decode step of `batch` sequences at `context`, each verifying `drafts` drafts."""
    load = StepLoad()
    load.add_decodes(batch, batch * context)
    per_sequence = drafts * context + drafts * (drafts + 1) // 2
    load.add_drafts(batch * drafts, batch * per_sequence)
    return load


def test_expected_tokens_per_step() -> None:
    assert expected_tokens_per_step(0.7, 3) == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert expected_tokens_per_step(0.0, 3) == 1.0
    assert expected_tokens_per_step(1.0, 3) == 4.0
    assert expected_tokens_per_step(0.5, 1) == pytest.approx(1.5)


def test_verifying_drafts_of_a_small_batch_costs_almost_nothing() -> None:
    """Decode steps read the weights: at batch 1 three more query positions leave the step
    memory-bound, and it takes the same time."""
    model = RooflineModel(LLAMA_8B, gpu_spec("H100"))
    plain = model.step_seconds(verifying(1, 1024, 0))
    assert model.step_seconds(verifying(1, 1024, 3)) == pytest.approx(plain)


def test_verifying_drafts_of_a_large_batch_turns_the_step_compute_bound() -> None:
    """256 sequences x 4 positions at a short context: past the ridge point (about 300
    tokens a step on an H100), the step takes its FLOPs' time, longer than the plain
    decode step of the same batch, which is bound by its weight and KV reads."""
    model = RooflineModel(LLAMA_8B, gpu_spec("H100"))
    plain = model.step_seconds(verifying(256, 256, 0))
    spec = model.step_seconds(verifying(256, 256, 3))
    assert spec > plain * 1.5
    flops_per_s = 989e12 * model.gpu.compute_efficiency
    per_token = (2 * LLAMA_8B.active_params() + 2 * LLAMA_8B.vocab * LLAMA_8B.hidden) / flops_per_s
    assert spec > 256 * 4 * per_token


def test_a_load_counts_its_drafts() -> None:
    load = verifying(2, 100, 3)
    assert (load.decode_seqs, load.draft_tokens, load.draft_context) == (2, 6, 2 * (300 + 6))
    assert load.tokens == 8
    assert load.sampled == 2 and load.requests == 2


def test_a_table_reads_each_draft_as_one_more_decode(tmp_path: Path) -> None:
    table = TableModel.from_csv(write(tmp_path, CSV_ROWS))
    spec = table.step_seconds(verifying(16, 1024, 3))
    assert spec == pytest.approx(table.step_seconds(verifying(64, 1024 + 2, 0)), rel=1e-3)


def test_a_lookup_drafter_adds_nothing() -> None:
    model = RooflineModel(LLAMA_8B, gpu_spec("H100"))
    for method in (SpecMethod.NGRAM, SpecMethod.SUFFIX, SpecMethod.NGRAM_GPU):
        spec = SpeculativeDecoding(method, 3)
        assert spec.drafter is Drafter.LOOKUP
        assert drafting_model(model, spec) is model


def test_a_draft_head_adds_one_pass_per_draft() -> None:
    """EAGLE with 3 drafts: three passes, each the head's share of a decode step of the
    sequences that sampled."""
    model = RooflineModel(LLAMA_8B, gpu_spec("H100"))
    spec = SpeculativeDecoding(SpecMethod.EAGLE, 3, "yuhuili/EAGLE-LLaMA3-Instruct-8B")
    share = head_share(LLAMA_8B)
    drafting = drafting_model(model, spec, share)
    assert isinstance(drafting, DraftingStepModel)
    load = verifying(8, 1000, 3)
    decode = model.step_seconds(verifying(8, 1000, 0))
    assert drafting.step_seconds(load) == pytest.approx(
        model.step_seconds(load) + 3 * share * decode
    )
    assert drafting.step_seconds(StepLoad()) == 0.0


def test_a_head_is_one_layer_and_the_lm_head_of_the_weights() -> None:
    """Llama-3.1-8B: a 218M-parameter layer and the 525M LM head of 8.03B: 9.3%; a bigger
    model's head is a smaller share."""
    assert head_share(LLAMA_8B) == pytest.approx(0.0925, abs=0.002)
    assert head_share(LLAMA_70B) < head_share(LLAMA_8B) / 2


def test_a_draft_model_costs_its_share_of_the_target() -> None:
    assert draft_model_share(LLAMA_3B, LLAMA_8B) == pytest.approx(
        LLAMA_3B.params() / LLAMA_8B.params()
    )
    assert draft_model_share(LLAMA_70B, LLAMA_8B) == 1.0  # never more than the target


def test_default_shares_and_block_drafters() -> None:
    """Without a shape, a head is 5% of a step and a draft model 10%; a block drafter
    (dflash, dspark) drafts every token in one pass."""
    model = RooflineModel(LLAMA_8B, gpu_spec("H100"))
    head = drafting_model(model, SpeculativeDecoding(SpecMethod.MTP, 2))
    draft = drafting_model(model, SpeculativeDecoding(SpecMethod.DRAFT_MODEL, 4, "d"))
    block = drafting_model(model, SpeculativeDecoding(SpecMethod.DFLASH, 8, "d"))
    assert isinstance(head, DraftingStepModel) and isinstance(draft, DraftingStepModel)
    assert isinstance(block, DraftingStepModel)
    assert (head.passes, head.share) == (2, DEFAULT_HEAD_SHARE)
    assert (draft.passes, draft.share) == (4, DEFAULT_DRAFT_MODEL_SHARE)
    assert (block.passes, block.share) == (1, DEFAULT_DRAFT_MODEL_SHARE)


def test_a_drafter_share_is_checked() -> None:
    model = RooflineModel(LLAMA_8B, gpu_spec("H100"))
    with pytest.raises(ValueError, match="at most a target step"):
        DraftingStepModel(model, 3, 1.5)
