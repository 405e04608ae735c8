"""The CPU offloading tier of one engine, set up at start from the config and the step
model: its memory (config/offload.py) over the bytes of one KV block.

A block's bytes are the model's KV bytes per token over all tensor-parallel ranks (vLLM
stores every rank's share of a block in the tier: `worker_kv_bytes_per_block x
world_size`) times the block size. The roofline model knows the model's KV bytes per
token (perf's `RooflineModel.kv_bytes_per_token`, per rank); under the constant and table
models, which know no model shape, a block is taken as Llama-3.1-8B's in 16-bit
(`DEFAULT_KV_BYTES_PER_TOKEN`).
"""

from __future__ import annotations

import math

from vllm_sim.config import Config
from vllm_sim.config.offload import cpu_offload
from vllm_sim.engine.kvcache.offload import OffloadSpec
from vllm_sim.perf import StepTimeModel
from vllm_sim.server.step_timing import roofline_of

DEFAULT_KV_BYTES_PER_TOKEN = 131_072
"""KV bytes of one token where the model's shape is unknown: Llama-3.1-8B in bf16 (32
layers x 8 KV heads x 128 dims x K and V x 2 bytes)."""


def offload_spec(cfg: Config, step_model: StepTimeModel | None) -> OffloadSpec | None:
    """The CPU tier `cfg` gives an engine timed by `step_model`; None without offloading."""
    offload = cpu_offload(cfg)
    if offload is None:
        return None
    block_bytes = math.ceil(kv_bytes_per_token(cfg, step_model) * cfg.block_size)
    return OffloadSpec(
        offload.cpu_bytes, block_bytes, self_describing_events=offload.self_describing_events
    )


def kv_bytes_per_token(cfg: Config, step_model: StepTimeModel | None) -> float:
    """KV bytes of one token over all ranks: the roofline model's (through a drafter's
    wrapper), else the default."""
    model = roofline_of(step_model)
    if model is None:
        return DEFAULT_KV_BYTES_PER_TOKEN
    return model.kv_bytes_per_token() * cfg.tensor_parallel_size
