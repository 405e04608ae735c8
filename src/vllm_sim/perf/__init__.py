"""The performance model: how long an engine step takes, and how many KV blocks fit.

Pure functions of a model's shape, a GPU's peaks and what a step computes; no clock, no
asyncio. The engine sums each step into a StepLoad and asks a StepTimeModel for its
duration: RooflineModel (closed form, from config.json and a datasheet) or TableModel
(interpolated from measured timings).
"""

from vllm_sim.perf.gpus import GPUS, GpuSpec, gpu_spec, load_gpu_overrides
from vllm_sim.perf.kv_spec import (
    KvCacheLayout,
    KvGroup,
    LayerKind,
    LayerSpec,
    MlaShape,
    kv_cache_layout,
    layer_specs,
    mla_shape,
)
from vllm_sim.perf.quant import WeightPrecision, quantization_config, weight_precision
from vllm_sim.perf.roofline import (
    ComputeDtype,
    RooflineModel,
    StepLoad,
    StepTimeModel,
    dtype_bytes,
)
from vllm_sim.perf.shape import PRESETS, ModelShape, preset_for
from vllm_sim.perf.speculative import (
    Drafter,
    DraftingStepModel,
    SpecMethod,
    SpeculativeDecoding,
    draft_model_share,
    drafting_model,
    expected_tokens_per_step,
    head_share,
)
from vllm_sim.perf.table import TableModel

__all__ = [
    "GPUS",
    "PRESETS",
    "ComputeDtype",
    "Drafter",
    "DraftingStepModel",
    "GpuSpec",
    "KvCacheLayout",
    "KvGroup",
    "LayerKind",
    "LayerSpec",
    "MlaShape",
    "ModelShape",
    "RooflineModel",
    "SpecMethod",
    "SpeculativeDecoding",
    "StepLoad",
    "StepTimeModel",
    "TableModel",
    "WeightPrecision",
    "draft_model_share",
    "drafting_model",
    "dtype_bytes",
    "expected_tokens_per_step",
    "gpu_spec",
    "head_share",
    "kv_cache_layout",
    "layer_specs",
    "load_gpu_overrides",
    "mla_shape",
    "preset_for",
    "quantization_config",
    "weight_precision",
]
