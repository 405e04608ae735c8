"""Checks perf/kv_spec.py against vLLM's own KV-cache code, for every config of
tests/data/model_configs.

    PYTHONPATH=src <a venv with vllm 0.32 and torch>/bin/python -m bench.kv_specs_vs_vllm

For each model (at the table test's tensor parallelism and KV dtype) it builds the layers'
specs with vLLM's classes (FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec,
MLAAttentionSpec, MambaSpec, the Mamba shapes from vLLM's MambaStateShapeCalculator on the
config's keys), groups them with vLLM's get_kv_cache_groups, sizes the pool from 10 GiB
with get_kv_cache_config_from_groups and takes the logged capacity from
get_kv_cache_capacity, under a stand-in VllmConfig that holds only what those functions
read (the FlashAttention layout LBNHC, 16,384 tokens in flight, Mamba `align` mode).
The layer kinds and the hybrid block size are the simulator's (vLLM takes those from its
model classes and its platform); everything downstream is vLLM's. Prints each model's
groups, blocks and tokens from both, and exits 1 on a difference. CPU only; needs no GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator
from vllm.v1.core import kv_cache_utils
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from vllm.v1.kv_cache_layout import KVCacheLayout

from vllm_sim.perf.kv_spec import (
    LayerKind,
    kv_cache_layout,
    layer_specs,
    ssm_state_dtype_bytes,
    text_config,
)

CONFIGS = Path(__file__).parents[1] / "tests" / "data" / "model_configs"
BUDGET = 10 * 2**30
MAX_LEN = 32768
IN_FLIGHT = 2 * 8192
# (folder, tensor parallel, fp8 KV): the table test's rows.
ROWS = [
    ("DeepSeek-V3", 8, False),
    ("Kimi-K2-Instruct", 8, True),
    ("gpt-oss-120b", 1, False),
    ("gpt-oss-20b", 2, True),
    ("gemma-3-27b-it", 1, False),
    ("Qwen3-Next-80B-A3B-Instruct", 1, False),
    ("granite-4.0-h-small", 1, False),
    ("Llama-4-Scout-17B-16E-Instruct", 4, False),
    ("Qwen3-30B-A3B", 1, False),
    ("Llama-3.1-8B-Instruct", 1, True),
]


def stand_in_config(hybrid_manager: bool) -> Any:
    cache = SimpleNamespace(
        get_resolved_kv_cache_layout=lambda: KVCacheLayout.LBNHC,
        mamba_cache_mode="align",
        num_gpu_blocks_override=None,
        prefix_cache_retention_interval=0,
    )
    return SimpleNamespace(
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=not hybrid_manager),
        attention_config=SimpleNamespace(hisparse_config=None),
        cache_config=cache,
        model_config=SimpleNamespace(max_model_len=MAX_LEN, original_max_model_len=MAX_LEN),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        max_in_flight_tokens=IN_FLIGHT,
        speculative_config=None,
        num_speculative_tokens=0,
        num_prefill_lookahead_tokens=0,
    )


def mamba_shapes(config: dict[str, Any], kind: LayerKind, tp: int) -> tuple[Any, ...]:
    text = text_config(config)
    shapes: tuple[Any, ...]
    if kind is LayerKind.LINEAR:
        shapes = MambaStateShapeCalculator.gated_delta_net_state_shape(
            tp,
            text["linear_num_key_heads"],
            text["linear_num_value_heads"],
            text["linear_key_head_dim"],
            text["linear_value_head_dim"],
            text["linear_conv_kernel_dim"],
        )
    else:
        shapes = MambaStateShapeCalculator.mamba2_state_shape(
            tp,
            text["mamba_expand"] * text["hidden_size"],
            text["mamba_n_groups"],
            text["mamba_n_heads"],
            text["mamba_d_head"],
            text["mamba_d_state"],
            text["mamba_d_conv"],
        )
    return shapes


def vllm_figures(folder: str, tp: int, fp8: bool) -> tuple[list[int], int, int]:
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    specs = layer_specs(config)
    ours = kv_cache_layout(
        specs,
        tensor_parallel=tp,
        kv_bytes=1.0 if fp8 else 2.0,
        block_size=16,
        ssm_bytes=ssm_state_dtype_bytes(config, 2.0),
    )
    block = ours.block_size  # the hybrid alignment: the simulator's, see the docstring
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    ssm = torch.float32 if ssm_state_dtype_bytes(config, 2.0) == 4.0 else torch.bfloat16
    attention_page = max(
        (int(s.bytes_per_token(tp, 1.0 if fp8 else 2.0)) for s in specs if not s.kind.is_state),
        default=0,
    )
    vllm_specs: dict[str, Any] = {}
    for i, spec in enumerate(specs):
        heads = max(1, spec.kv_heads // tp)
        common = {"block_size": block, "num_kv_heads": heads, "head_size": spec.head_size}
        if spec.kind is LayerKind.MLA:
            made: Any = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, head_size=spec.head_size, dtype=dtype
            )
        elif spec.kind is LayerKind.SLIDING:
            made = SlidingWindowSpec(**common, dtype=dtype, sliding_window=spec.window)
        elif spec.kind is LayerKind.CHUNKED:
            made = ChunkedLocalAttentionSpec(
                **common, dtype=dtype, attention_chunk_size=spec.window
            )
        elif spec.kind.is_state:
            made = MambaSpec(
                block_size=block,
                shapes=mamba_shapes(config, spec.kind, tp),
                dtypes=(torch.bfloat16, ssm),
                page_size_padded=block * attention_page,
            )
        else:
            made = FullAttentionSpec(**common, dtype=dtype)
        vllm_specs[f"model.layers.{i}"] = made
    stand_in = stand_in_config(LayerKind.CHUNKED not in {s.kind for s in specs})
    groups = kv_cache_utils.get_kv_cache_groups(stand_in, vllm_specs)
    kv_config = kv_cache_utils.get_kv_cache_config_from_groups(stand_in, groups, BUDGET)
    tokens, _ = kv_cache_utils.get_kv_cache_capacity(stand_in, kv_config)
    return [len(group.layer_names) for group in groups], kv_config.num_blocks, tokens


def main() -> int:
    failures = 0
    for folder, tp, fp8 in ROWS:
        config = json.loads((CONFIGS / folder / "config.json").read_text())
        ours = kv_cache_layout(
            layer_specs(config),
            tensor_parallel=tp,
            kv_bytes=1.0 if fp8 else 2.0,
            block_size=16,
            ssm_bytes=ssm_state_dtype_bytes(config, 2.0),
        )
        blocks = ours.num_blocks(BUDGET)
        mine = (
            sorted(group.layers for group in ours.groups),
            blocks,
            ours.cache_tokens(blocks, MAX_LEN, IN_FLIGHT),
        )
        layers, vllm_blocks, vllm_tokens = vllm_figures(folder, tp, fp8)
        theirs = (sorted(layers), vllm_blocks, vllm_tokens)
        verdict = "same" if mine == theirs else "DIFFERENT"
        failures += mine != theirs
        print(f"{folder} (tp {tp}): simulator {mine}, vLLM {theirs}: {verdict}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
