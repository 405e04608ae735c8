"""Layer kinds from the config.json spellings of the families not in the table test, and
the state and group arithmetic at its edges (the real configs are in
test_model_families.py)."""

from __future__ import annotations

import pytest

from vllm_sim.perf import GPUS, ModelShape, RooflineModel, StepLoad
from vllm_sim.perf.kv_spec import (
    LayerKind,
    LayerSpec,
    kv_cache_layout,
    layer_specs,
    mla_shape,
    ssm_state_dtype_bytes,
)

BASE = {
    "hidden_size": 1024,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 6,
    "intermediate_size": 4096,
    "vocab_size": 1000,
}


def kinds(config: dict[str, object]) -> list[LayerKind]:
    return [spec.kind for spec in layer_specs(config)]


def test_mistral_windows_every_layer() -> None:
    config = {**BASE, "model_type": "mistral", "sliding_window": 4096}
    assert kinds(config) == [LayerKind.SLIDING] * 6
    assert {spec.window for spec in layer_specs(config)} == {4096}


def test_a_window_that_is_switched_off_is_full_attention() -> None:
    # Qwen2.5's configs name a window and turn it off.
    config = {**BASE, "model_type": "qwen2", "sliding_window": 131072, "use_sliding_window": False}
    assert kinds(config) == [LayerKind.FULL] * 6


def test_gemma_2_alternates_by_default_and_gemma_3_every_sixth() -> None:
    gemma2 = {**BASE, "model_type": "gemma2", "sliding_window": 4096}
    assert kinds(gemma2) == [LayerKind.SLIDING, LayerKind.FULL] * 3
    gemma3 = {**BASE, "model_type": "gemma3_text", "sliding_window": 1024}
    assert kinds(gemma3) == [LayerKind.SLIDING] * 5 + [LayerKind.FULL]


def test_nemotron_h_s_pattern_keeps_only_mixers_with_a_cache() -> None:
    config = {
        **BASE,
        "model_type": "nemotron_h",
        "num_hidden_layers": 6,
        "hybrid_override_pattern": "M-M*-E",
        "mamba_num_heads": 16,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
    }
    assert kinds(config) == [LayerKind.MAMBA, LayerKind.MAMBA, LayerKind.FULL]
    # Nemotron-H keeps its SSM state in float32 unless its config says otherwise.
    assert ssm_state_dtype_bytes(config, 2.0) == 4.0
    mamba = layer_specs(config)[0]
    # conv: (16 x 64 + 2 x 8 x 128) x 3 = 9,216 elements x 2 B; SSM 16 x 64 x 128 x 4 B.
    assert mamba.state_bytes(1, 2.0, 4.0) == 9_216 * 2 + 131_072 * 4
    # 8 groups over 4 ranks: 2 each; heads 4 each: (1,024 + 2 x 8 x 128) / 4 x 3 conv.
    assert mamba.state_bytes(4, 2.0, 4.0) == (1024 + 2 * 8 * 128) // 4 * 3 * 2 + 4 * 64 * 128 * 4


def test_groups_that_do_not_divide_the_ranks_are_replicated() -> None:
    spec = LayerSpec(
        LayerKind.MAMBA, inner=8192, heads=128, head_dim=64, state_size=128, groups=1, conv_kernel=4
    )
    # One group over 4 ranks is replicated to 4: conv (8,192 + 2 x 4 x 128) / 4 x 3.
    assert spec.state_bytes(4, 2.0, 2.0) == (8192 + 1024) // 4 * 3 * 2 + 32 * 64 * 128 * 2


def test_unknown_layer_types_are_taken_as_full_attention() -> None:
    config = {**BASE, "layer_types": ["full_attention", "conv"] * 3}
    assert kinds(config) == [LayerKind.FULL] * 6


def test_a_config_without_mla_has_no_mla_shape() -> None:
    assert mla_shape(BASE) is None


def test_one_kind_is_one_group_whose_block_is_every_layer() -> None:
    layout = kv_cache_layout(layer_specs(BASE), tensor_parallel=1, kv_bytes=2.0, block_size=16)
    # 2 KV heads x (128 + 128) x 2 B = 1,024 B/token/layer; 6 layers x 16 tokens.
    assert (len(layout.groups), layout.block_bytes) == (1, 6 * 16 * 1024)
    assert layout.blocks_for(33) == 3


def test_mla_decodes_read_the_latent() -> None:
    config = {
        **BASE,
        "model_type": "deepseek_v3",
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "q_lora_rank": 1536,
    }
    shape = ModelShape.from_config(config)
    model = RooflineModel(shape, GPUS["H100"], layers=layer_specs(config), mla=mla_shape(config))
    short, long = StepLoad(), StepLoad()
    for _ in range(32):
        short.add_decode(1_000)
        long.add_decode(3_000)
    gpu = GPUS["H100"]
    # 2,000 more tokens each of 32 sequences, 6 layers of (512 + 64) x 2 B.
    extra = 32 * 2_000 * 6 * 1_152 / (gpu.bandwidth_bytes_per_s * gpu.kv_bandwidth_efficiency)
    assert model.step_seconds(long) - model.step_seconds(short) == pytest.approx(extra, rel=1e-6)
    assert model.kv_bytes_per_token() == 6 * 1_152
