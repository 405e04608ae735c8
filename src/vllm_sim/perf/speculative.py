"""Speculative decoding's share of a step: verifying drafts and making the next ones.

With speculative decoding every decoding sequence of a step carries the token sampled last
plus k draft tokens; the target model computes all k + 1 positions at once (StepLoad's
draft tokens, which the step models price), accepts a prefix of the drafts and samples one
token more. Then the drafter proposes the next k drafts for every sequence that sampled,
which is the cost this module adds to a step:

- `ngram`, `ngram_gpu`, `suffix`: a lookup in the tokens already there, nothing the GPU
  notices; `custom_class` and `extract_hidden_states` are priced the same (a proposer of
  unknown cost, and one that drafts nothing real);
- `eagle`, `eagle3`, `mtp`, `medusa`, `mlp_speculator`: a draft head, one pass per draft
  token, each costing what a decode step of the batch costs times the head's share of the
  target's weights (one decoder layer and the LM head: about 9% of Llama-3.1-8B);
- `draft_model`: a smaller model, one decode pass per draft token, each costing the target's
  decode step of the batch times the draft's share of the target's weights (a tenth when
  the draft's shape is unknown); `dflash` and `dspark` draft the whole block in one pass.

Scaling the target's own decode step keeps one model for both step-time models (roofline
and measured tables): a draft pass is memory-bound like the decode it is scaled from.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from vllm_sim.perf.roofline import StepLoad, StepTimeModel
from vllm_sim.perf.shape import ModelShape

# A draft head's share of a step when the target's shape is unknown (a measured table):
# one layer and the LM head of a mid-size model.
DEFAULT_HEAD_SHARE: Final = 0.05
# A draft model's share of a step when its shape is unknown.
DEFAULT_DRAFT_MODEL_SHARE: Final = 0.1


class SpecMethod(enum.Enum):
    """vLLM's speculative methods (`method` of --speculative-config)."""

    NGRAM = "ngram"
    NGRAM_GPU = "ngram_gpu"
    SUFFIX = "suffix"
    EAGLE = "eagle"
    EAGLE3 = "eagle3"
    MTP = "mtp"
    MEDUSA = "medusa"
    MLP_SPECULATOR = "mlp_speculator"
    DRAFT_MODEL = "draft_model"
    DFLASH = "dflash"
    DSPARK = "dspark"
    CUSTOM_CLASS = "custom_class"
    EXTRACT_HIDDEN_STATES = "extract_hidden_states"


class Drafter(enum.Enum):
    """What proposes the drafts, as far as the GPU's time goes."""

    LOOKUP = "lookup"  # matches in the tokens already there: no GPU time
    HEAD = "head"  # a small head on the target's hidden states, one pass per draft
    MODEL = "model"  # a separate, smaller model, one decode pass per draft
    BLOCK = "block"  # a separate, smaller model drafting every token in one pass


_DRAFTERS: Final = {
    SpecMethod.NGRAM: Drafter.LOOKUP,
    SpecMethod.NGRAM_GPU: Drafter.LOOKUP,
    SpecMethod.SUFFIX: Drafter.LOOKUP,
    SpecMethod.EAGLE: Drafter.HEAD,
    SpecMethod.EAGLE3: Drafter.HEAD,
    SpecMethod.MTP: Drafter.HEAD,
    SpecMethod.MEDUSA: Drafter.HEAD,
    SpecMethod.MLP_SPECULATOR: Drafter.HEAD,
    SpecMethod.DRAFT_MODEL: Drafter.MODEL,
    SpecMethod.DFLASH: Drafter.BLOCK,
    SpecMethod.DSPARK: Drafter.BLOCK,
    SpecMethod.CUSTOM_CLASS: Drafter.LOOKUP,
    SpecMethod.EXTRACT_HIDDEN_STATES: Drafter.LOOKUP,
}


@dataclass(frozen=True, slots=True)
class SpeculativeDecoding:
    """What --speculative-config sets: the method, the drafts per step, the draft model."""

    method: SpecMethod
    num_speculative_tokens: int
    draft_model: str | None = None

    @property
    def drafter(self) -> Drafter:
        return _DRAFTERS[self.method]


def expected_tokens_per_step(acceptance_rate: float, drafts: int) -> float:
    """Tokens a decode step makes on average when each draft is accepted with probability
    `acceptance_rate` given the ones before it were: 1 + a + a^2 + ... + a^k."""
    if acceptance_rate >= 1.0:
        return float(drafts + 1)
    return (1.0 - acceptance_rate ** (drafts + 1)) / (1.0 - acceptance_rate)


def head_share(shape: ModelShape) -> float:
    """A draft head's pass against a decode step of the target: one decoder layer and the
    LM head, of every weight a decode step reads."""
    total = shape.params()
    layers = total - shape.embedding_params() - shape.hidden
    return (layers / shape.layers + shape.vocab * shape.hidden) / total


def draft_model_share(draft: ModelShape, target: ModelShape) -> float:
    """A draft model's decode pass against the target's: the ratio of their weights."""
    return min(draft.params() / target.params(), 1.0)


class DraftingStepModel:
    """A step model with the drafter's passes added to each step: `passes` passes, each a
    `share` of the target's decode step of the sequences that sampled. The target's own
    model prices the verification (StepLoad's draft tokens)."""

    __slots__ = ("passes", "share", "target")

    def __init__(self, target: StepTimeModel, passes: int, share: float) -> None:
        if passes < 0 or not 0.0 <= share <= 1.0:
            raise ValueError("a drafter takes whole passes, each at most a target step")
        self.target = target
        self.passes = passes
        self.share = share

    def step_seconds(self, load: StepLoad) -> float:
        seconds = self.target.step_seconds(load)
        if load.sampled == 0 or self.passes == 0 or self.share == 0.0:
            return seconds
        return seconds + self.passes * self.share * self.target.step_seconds(_drafting(load))

    def admission_delay(self, prompt_tokens: int) -> float:
        return self.target.admission_delay(prompt_tokens)


def _drafting(load: StepLoad) -> StepLoad:
    """One drafter pass as a decode step: every sequence that sampled, at the decoding
    sequences' mean context."""
    drafting = StepLoad()
    mean = load.decode_context // load.decode_seqs if load.decode_seqs else 0
    drafting.add_decodes(load.sampled, load.sampled * mean)
    return drafting


def drafting_model(
    target: StepTimeModel, spec: SpeculativeDecoding, share: float | None = None
) -> StepTimeModel:
    """`target` with `spec`'s drafter added; `share` is a draft pass against a target
    decode step (the method's default when None). A lookup drafter adds nothing."""
    drafter = spec.drafter
    if drafter is Drafter.LOOKUP:
        return target
    if share is None:
        share = DEFAULT_HEAD_SHARE if drafter is Drafter.HEAD else DEFAULT_DRAFT_MODEL_SHARE
    passes = 1 if drafter is Drafter.BLOCK else spec.num_speculative_tokens
    return DraftingStepModel(target, passes, share)
