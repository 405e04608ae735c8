"""The KV cache of the model families people run now, one row per family from its real
config.json (tests/data/model_configs, sources in its README): the layer kinds, each
kind's KV bytes per token (or state bytes per sequence) on one GPU exactly as vLLM 0.32's
KV-cache specs give them, and the block pool vLLM allocates from a --kv-cache-memory-bytes
budget with the "GPU KV cache size: N tokens" figure it logs.

Every expected number is worked by hand below from vLLM's formulas (see
docs/model-families.md), not by calling the code under test:

- attention page (FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec):
  block_size x max(1, kv_heads // tp) x (head_size + head_size_v) x dtype bytes;
- MLA page: block_size x 1 x (kv_lora_rank + qk_rope_head_dim) x dtype bytes, on every rank;
- Mamba2 state: conv (inner + 2 groups x d_state) / tp x (d_conv - 1) + SSM heads / tp x
  d_head x d_state, elements x dtype bytes; gated delta net: conv (2 k_heads x k_dim +
  v_heads x v_dim) / tp x (kernel - 1) + SSM v_heads / tp x v_dim x k_dim;
- a hybrid Mamba model's block size: 16 x cdiv(state bytes, 16 x attention bytes per token);
- one kind: one group, a block holds every layer's page; several: groups of the smallest
  kind's layer count (the largest when within 1.5x), a block holds the largest group's pages;
- num_blocks = budget // block bytes; tokens = int(num_blocks / blocks a request of
  max_model_len needs in all groups x max_model_len), a sliding group needing
  cdiv(window - 1 + 2 x max_num_batched_tokens, block_size) + 1 blocks, a Mamba group 2
  (prefix caching's `align` mode).

All rows: --kv-cache-memory-bytes 10G (10 GiB = 10,737,418,240 bytes; Gemma 20G), --block-size 16,
--max-model-len 32768, --max-num-batched-tokens 8192 (16,384 tokens in flight).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.config import load
from vllm_sim.config import ConfigError
from vllm_sim.perf import RooflineModel, StepLoad
from vllm_sim.perf.gpus import GPUS
from vllm_sim.perf.kv_spec import LayerKind, kv_cache_layout, layer_specs, ssm_state_dtype_bytes
from vllm_sim.perf.quant import quantization_config, weight_precision
from vllm_sim.perf.shape import ModelShape
from vllm_sim.server.step_timing import block_costs, step_timing

CONFIGS = Path(__file__).parents[2] / "data" / "model_configs"
MAX_LEN = 32768
FULL, SLIDING, CHUNKED, MLA, MAMBA, LINEAR = (
    LayerKind.FULL,
    LayerKind.SLIDING,
    LayerKind.CHUNKED,
    LayerKind.MLA,
    LayerKind.MAMBA,
    LayerKind.LINEAR,
)


@dataclass(frozen=True)
class Family:
    folder: str
    tp: int
    kv_dtype: str  # --kv-cache-dtype
    layers: dict[LayerKind, int]  # layers of each kind
    kv_per_token: dict[LayerKind, int]  # bytes per token per layer, one GPU
    groups: int
    block_size: int
    block_bytes: int
    blocks: int
    tokens: int
    state_per_seq: dict[LayerKind, int] = field(default_factory=dict)  # per layer, one GPU
    args: tuple[str, ...] = ()
    gib: int = 10  # --kv-cache-memory-bytes, GiB


FAMILIES = [
    # DeepSeek-V3, TP 8: MLA, kv_lora_rank 512 + qk_rope_head_dim 64 = 576, bf16:
    # 1,152 B/token/layer on every rank. 61 layers, one group; page 16 x 1152 = 18,432;
    # block 61 x 18,432 = 1,124,352; 10 GiB // 1,124,352 = 9,549 (9,550 x 1,124,352 =
    # 10,737,561,600 > budget); a request: cdiv(32768, 16) = 2,048 blocks, so
    # 9,549 / 2,048 x 32,768 = 9,549 x 16 = 152,784 tokens.
    Family("DeepSeek-V3", 8, "auto", {MLA: 61}, {MLA: 1152}, 1, 16, 1_124_352, 9549, 152_784),
    # Kimi-K2, TP 8, --kv-cache-dtype fp8: 576 x 1 = 576 B/token/layer, 61 layers; page
    # 9,216, block 562,176; 10 GiB // 562,176 = 19,099; 19,099 x 16 = 305,584 tokens.
    Family("Kimi-K2-Instruct", 8, "fp8", {MLA: 61}, {MLA: 576}, 1, 16, 562_176, 19_099, 305_584),
    # gpt-oss-120b, TP 1: 36 layers, even ones sliding (window 128); 8 KV heads x (64 + 64)
    # x 2 B = 2,048 B/token/layer. Two groups of 18; page 32,768; block 18 x 32,768 =
    # 589,824; 10 GiB // 589,824 = 18,204. A request: full 2,048 blocks + sliding
    # cdiv(127 + 16,384, 16) + 1 = 1,032 + 1 = 1,033: 3,081; 18,204 x 32,768 // 3,081.
    Family(
        "gpt-oss-120b",
        1,
        "auto",
        {SLIDING: 18, FULL: 18},
        {SLIDING: 2048, FULL: 2048},
        2,
        16,
        589_824,
        18_204,
        18_204 * 32_768 // 3_081,
    ),
    # gpt-oss-20b, TP 2, fp8 KV: 8 // 2 = 4 heads x 128 x 1 B = 512 B/token/layer; two groups
    # of 12; page 8,192; block 98,304; 10 GiB // 98,304 = 109,226; 3,081 blocks a request.
    Family(
        "gpt-oss-20b",
        2,
        "fp8",
        {SLIDING: 12, FULL: 12},
        {SLIDING: 512, FULL: 512},
        2,
        16,
        98_304,
        109_226,
        109_226 * 32_768 // 3_081,
    ),
    # Gemma-3-27B (text_config), TP 1: 62 layers, every 6th global (sliding_window_pattern
    # 6, the class default): 10 full, 52 sliding (window 1024); 16 KV heads x (128 + 128) x
    # 2 B = 8,192 B/token/layer. Groups of 10 (52 >= 1.5 x 10): 1 full, 6 sliding (9, 9, 9,
    # 9, 8, 8 layers); page 131,072; block 10 x 131,072 = 1,310,720; 20 GiB / 1,310,720 =
    # 16,384 exactly. A request: 2,048 + 6 x (cdiv(1,023 + 16,384, 16) + 1) = 2,048 + 6 x
    # 1,089 = 8,582 blocks. (10 GiB, 8,192 blocks, would hold 31,278 tokens, less than one
    # request of 32,768: vLLM refuses to start, and so does the simulator.)
    Family(
        "gemma-3-27b-it",
        1,
        "auto",
        {SLIDING: 52, FULL: 10},
        {SLIDING: 8192, FULL: 8192},
        7,
        16,
        1_310_720,
        16_384,
        16_384 * 32_768 // 8_582,
        gib=20,
    ),
    # Qwen3-Next-80B-A3B, TP 1: every 4th layer full attention: 12 full, 36 gated delta net.
    # Full: 2 KV heads x (256 + 256) x 2 B = 2,048 B/token. GDN state: conv (2 x 16 x 128 +
    # 32 x 128 = 8,192) x 3 = 24,576 elements, SSM 32 x 128 x 128 = 524,288; x 2 B =
    # 1,097,728 B/sequence/layer. Block size 16 x cdiv(1,097,728, 32,768) = 16 x 34 = 544;
    # page 544 x 2,048 = 1,114,112 (the state padded to it); 4 groups of 12; block
    # 13,369,344; 10 GiB // 13,369,344 = 803. A request: cdiv(32,768, 544) = 61 + 3 x 2 = 67.
    Family(
        "Qwen3-Next-80B-A3B-Instruct",
        1,
        "auto",
        {LINEAR: 36, FULL: 12},
        {FULL: 2048},
        4,
        544,
        13_369_344,
        803,
        803 * 32_768 // 67,
        state_per_seq={LINEAR: 1_097_728},
    ),
    # Granite-4.0-H-Small, TP 1: 4 attention, 36 Mamba2 layers. Attention: 8 KV heads x
    # (128 + 128) x 2 B = 4,096 B/token. Mamba2: inner 2 x 4,096 = 8,192; conv (8,192 + 2 x 1
    # x 128) x 3 = 25,344 elements, SSM 128 x 64 x 128 = 1,048,576; x 2 B = 2,147,840
    # B/sequence/layer. Block size 16 x cdiv(2,147,840, 65,536) = 16 x 33 = 528; page
    # 2,162,688; groups of 4: 1 attention + 9 Mamba; block 8,650,752; 10 GiB // 8,650,752
    # = 1,241. A request: cdiv(32,768, 528) = 63 + 9 x 2 = 81.
    Family(
        "granite-4.0-h-small",
        1,
        "auto",
        {MAMBA: 36, FULL: 4},
        {FULL: 4096},
        10,
        528,
        8_650_752,
        1_241,
        1_241 * 32_768 // 81,
        state_per_seq={MAMBA: 2_147_840},
    ),
    # Llama-4-Scout, TP 4: layers with RoPE (no_rope_layers 1) attend in chunks of 8,192: 36
    # chunked, 12 full. 8 // 4 = 2 KV heads x (128 + 128) x 2 B = 1,024 B/token/layer. vLLM
    # turns the hybrid manager off for chunked local attention: all 48 allocated as full
    # attention, one group; block 48 x 16,384 = 786,432; 10 GiB // 786,432 = 13,653;
    # 13,653 x 16 = 218,448 tokens.
    Family(
        "Llama-4-Scout-17B-16E-Instruct",
        4,
        "auto",
        {CHUNKED: 36, FULL: 12},
        {CHUNKED: 1024, FULL: 1024},
        1,
        16,
        786_432,
        13_653,
        218_448,
    ),
    # Qwen3-30B-A3B, TP 1: 4 KV heads x (128 + 128) x 2 B = 2,048 B/token/layer, 48 layers;
    # block 1,572,864; 10 GiB // 1,572,864 = 6,826; 6,826 x 16 = 109,216 tokens.
    Family("Qwen3-30B-A3B", 1, "auto", {FULL: 48}, {FULL: 2048}, 1, 16, 1_572_864, 6_826, 109_216),
    # Llama-3.1-8B with FP8 weights and FP8 KV: 8 KV heads x 256 x 1 B = 2,048 B/token/layer,
    # 32 layers; block 1,048,576; 10 GiB / 1,048,576 = 10,240; 163,840 tokens.
    Family(
        "Llama-3.1-8B-Instruct",
        1,
        "fp8",
        {FULL: 32},
        {FULL: 2048},
        1,
        16,
        1_048_576,
        10_240,
        163_840,
        args=("--quantization", "fp8"),
    ),
]


def read(folder: str) -> dict[str, object]:
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    assert isinstance(config, dict)
    return config


@pytest.mark.parametrize("family", FAMILIES, ids=[f.folder for f in FAMILIES])
def test_layer_kinds_and_their_bytes_are_vllms(family: Family) -> None:
    config = read(family.folder)
    specs = layer_specs(config)
    counts: dict[LayerKind, int] = {}
    for spec in specs:
        counts[spec.kind] = counts.get(spec.kind, 0) + 1
    assert counts == family.layers
    kv_bytes = 1.0 if family.kv_dtype == "fp8" else 2.0
    per_token = {
        spec.kind: spec.bytes_per_token(family.tp, kv_bytes)
        for spec in specs
        if not spec.kind.is_state
    }
    assert per_token == family.kv_per_token
    ssm = ssm_state_dtype_bytes(config, 2.0)
    states = {
        spec.kind: spec.state_bytes(family.tp, 2.0, ssm) for spec in specs if spec.kind.is_state
    }
    assert states == family.state_per_seq


@pytest.mark.parametrize("family", FAMILIES, ids=[f.folder for f in FAMILIES])
def test_the_block_pool_from_a_memory_budget(family: Family) -> None:
    config = read(family.folder)
    layout = kv_cache_layout(
        layer_specs(config),
        tensor_parallel=family.tp,
        kv_bytes=1.0 if family.kv_dtype == "fp8" else 2.0,
        block_size=16,
        ssm_bytes=ssm_state_dtype_bytes(config, 2.0),
    )
    assert len(layout.groups) == family.groups
    assert layout.block_size == family.block_size
    assert layout.block_bytes == family.block_bytes
    blocks = layout.num_blocks(family.gib * 2**30)
    assert blocks == family.blocks
    assert layout.cache_tokens(blocks, MAX_LEN, 2 * 8192) == family.tokens


@pytest.mark.parametrize("family", FAMILIES, ids=[f.folder for f in FAMILIES])
def test_kv_cache_memory_bytes_sizes_the_servers_cache(family: Family) -> None:
    argv = [
        *("--model", str(CONFIGS / family.folder), "--timing-model", "roofline"),
        *("--kv-cache-memory-bytes", f"{family.gib}G", "--max-model-len", str(MAX_LEN)),
        *("-tp", str(family.tp), "--kv-cache-dtype", family.kv_dtype, "--gpu", "H200"),
        *family.args,
    ]
    timing = step_timing(load(*argv), {})
    assert timing is not None
    assert (timing.pool_blocks, timing.kv_cache_tokens) == (family.blocks, family.tokens)
    assert f"GPU KV cache size {family.tokens:,} tokens" in timing.description
    assert timing.kv_layout is not None
    costs = block_costs(timing.kv_layout, 16)
    if family.groups == 1 and not family.state_per_seq and CHUNKED not in family.layers:
        assert costs is None and timing.num_gpu_blocks == family.blocks
    elif costs is not None:  # the engine holds vLLM's pool, block for block
        assert timing.num_gpu_blocks == family.blocks
    else:  # a raised block size: one table holding the tokens vLLM's groups hold
        assert timing.num_gpu_blocks == family.tokens // 16


def test_the_budget_overrides_the_memory_share() -> None:
    base = ("--model", str(CONFIGS / "Qwen3-30B-A3B"), "--timing-model", "roofline")
    share = step_timing(load(*base, "--gpu-memory-utilization", "0.8"), {})
    budget = step_timing(
        load(*base, "--gpu-memory-utilization", "0.8", "--kv-cache-memory-bytes", "10G"), {}
    )
    assert share and budget and budget.pool_blocks == 6_826 != share.pool_blocks


def test_quantization_as_the_config_says() -> None:
    gpt_oss = weight_precision(quantization_config(read("gpt-oss-120b")), None)
    # modules_to_not_convert keeps attention (and the router) 16-bit: MXFP4 experts only,
    # 4 bits plus an 8-bit scale per 32 = 4.25 bits.
    assert (gpt_oss.method, gpt_oss.attention, gpt_oss.experts) == ("mxfp4", False, True)
    assert gpt_oss.quantized_bytes == 4.25 / 8
    deepseek = weight_precision(quantization_config(read("DeepSeek-V3")), None)
    assert (deepseek.method, deepseek.quantized_bytes, deepseek.compute) == ("fp8", 1.0, "fp8")
    assert deepseek.attention and deepseek.dense and deepseek.experts
    with pytest.raises(ValueError, match=r"model config \(fp8\) does not match .* \(awq\)"):
        weight_precision(quantization_config(read("DeepSeek-V3")), "awq")
    # A 16-bit checkpoint: --quantization fp8 quantizes it at load; a 4-bit method cannot.
    assert weight_precision(None, "fp8").method == "fp8"
    with pytest.raises(ValueError, match="needs a checkpoint quantized"):
        weight_precision(None, "awq")


@pytest.mark.parametrize(
    ("quant", "method", "size", "compute"),
    [
        (
            {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
            "awq_marlin",
            0.5 + 2 / 128 + 0.5 / 128,
            "bf16",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True},
            "gptq_marlin",
            0.5 + 2 / 128,
            "bf16",
        ),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "modelopt_fp4", 4.5 / 8, "fp4"),
        (
            {
                "quant_method": "compressed-tensors",
                "format": "nvfp4-pack-quantized",
                "config_groups": {
                    "group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}
                },
            },
            "compressed-tensors nvfp4",
            4.5 / 8,
            "fp4",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
                "ignore": ["lm_head", "re:.*self_attn.*"],
            },
            "compressed-tensors fp8",
            1.0,
            "fp8",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 32}}
                },
            },
            "compressed-tensors w4a16",
            0.5 + 2 / 32,
            "bf16",
        ),
    ],
)
def test_each_method_s_bytes_and_peak(
    quant: dict[str, object], method: str, size: float, compute: str
) -> None:
    precision = weight_precision(quant, None)
    assert (precision.method, precision.quantized_bytes, precision.compute) == (
        method,
        size,
        compute,
    )


def test_ignored_attention_stays_16_bit() -> None:
    quant = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
        "ignore": ["lm_head", "re:.*self_attn.*"],
    }
    precision = weight_precision(quant, None)
    assert not precision.attention and precision.experts


def test_fp4_weights_use_the_fp4_peak_where_the_gpu_has_one() -> None:
    config = read("gpt-oss-120b")
    shape = ModelShape.from_config(config)
    precision = weight_precision(quantization_config(config), None)
    load = StepLoad()
    load.add_prefill(0, 4096, True)

    def prefill(gpu: str) -> float:
        model = RooflineModel(shape, GPUS[gpu], layers=layer_specs(config), precision=precision)
        return model.step_seconds(load)

    b200_fp4 = prefill("B200")
    # Without FP4 tensor cores the experts' matmuls run in 16 bits: a slower prefill.
    from dataclasses import replace

    no_fp4 = RooflineModel(
        shape,
        replace(GPUS["B200"], fp4_tflops=0.0),
        layers=layer_specs(config),
        precision=precision,
    )
    assert b200_fp4 < no_fp4.step_seconds(load)


def test_a_sliding_window_caps_what_a_decode_reads() -> None:
    config = read("gpt-oss-20b")
    shape = ModelShape.from_config(config)
    windowed = RooflineModel(shape, GPUS["H100"], layers=layer_specs(config))
    full = RooflineModel(shape, GPUS["H100"])  # every layer full attention

    def decode(model: RooflineModel, context: int) -> float:
        load = StepLoad()
        for _ in range(256):
            load.add_decode(context)
        return model.step_seconds(load)

    # Short contexts: the window does not bite, both read the same.
    assert decode(windowed, 100) == pytest.approx(decode(full, 100))
    # Long ones: half the layers read 128 tokens, not 32k.
    assert decode(windowed, 32_000) < 0.7 * decode(full, 32_000)
    # The sums the engine keeps give the same when every context is past the window.
    summed = StepLoad()
    summed.add_decodes(256, 256 * 32_000)
    assert windowed.step_seconds(summed) == pytest.approx(decode(windowed, 32_000))


def test_mamba_layers_read_a_state_per_sequence_not_per_token() -> None:
    config = read("granite-4.0-h-small")
    shape = ModelShape.from_config(config)
    model = RooflineModel(shape, GPUS["H100"], layers=layer_specs(config))
    short, long = StepLoad(), StepLoad()
    for _ in range(64):
        short.add_decode(1_000)
        long.add_decode(2_000)
    # Only the 4 attention layers' reads grow with context: 4 x 4,096 B/token.
    extra = (
        64
        * 1_000
        * 4
        * 4096
        / (GPUS["H100"].bandwidth_bytes_per_s * GPUS["H100"].kv_bandwidth_efficiency)
    )
    assert model.step_seconds(long) - model.step_seconds(short) == pytest.approx(extra, rel=1e-6)


def test_mla_decodes_in_the_absorbed_form() -> None:
    config = read("DeepSeek-V3")
    from vllm_sim.perf.kv_spec import mla_shape

    mla = mla_shape(config)
    assert mla is not None
    # Per head and query-key pair: 2 x (512 + 64) for the scores over the latent and rotary
    # dims, 2 x 512 for the values: 2,176 x 128 heads; prefill as multi-head attention:
    # 2 x (128 + 64) + 2 x 128 = 640 x 128.
    assert mla.decode_flops_per_pair() == 2_176 * 128
    assert mla.prefill_flops_per_pair() == 640 * 128


def test_blocks_a_sequence_holds_across_groups() -> None:
    config = read("gpt-oss-20b")
    layout = kv_cache_layout(layer_specs(config), tensor_parallel=1, kv_bytes=2.0, block_size=16)
    # 1,000 tokens: 63 blocks in the full group; the sliding group keeps the last 127 tokens
    # (plus none in flight): cdiv(127, 16) + 1 = 9 blocks.
    assert layout.blocks_for(1_000) == 63 + 9
    assert layout.blocks_for(100) == 7 + 7


def test_the_server_refuses_a_quantization_the_config_contradicts() -> None:
    argv = ("--model", str(CONFIGS / "DeepSeek-V3"), "--timing-model", "roofline")
    with pytest.raises(ConfigError, match=r"model config \(fp8\) does not match"):
        step_timing(load(*argv, "-tp", "8", "--quantization", "awq"), {})


def test_the_start_up_line_names_the_layer_kinds_and_groups() -> None:
    argv = ("--model", str(CONFIGS / "gpt-oss-20b"), "--timing-model", "roofline")
    timing = step_timing(load(*argv, "--kv-cache-memory-bytes", "10G"), {})
    assert timing is not None
    assert "24 layers (12 sliding window 128, 12 full attention)" in timing.description
    assert "2 KV cache groups (12 x sliding window 128, 12 x full attention)" in timing.description
    assert "mxfp4 (0.53125 B/weight: experts)" in timing.description


def test_deepseek_s_leading_dense_layers_hold_no_experts() -> None:
    shape = ModelShape.from_config(read("DeepSeek-V3"))
    # first_k_dense_replace 3: 58 MoE layers of 256 experts of 3 x 7,168 x 2,048 =
    # 44,040,192 parameters each: 58 x 256 x 44,040,192.
    assert (shape.dense_layers, shape.moe_layers) == (3, 58)
    assert shape.expert_params() == 58 * 256 * 44_040_192 == 653_908_770_816
    # About the 671B DeepSeek publishes (its MTP layer aside).
    assert shape.params() == pytest.approx(671e9, rel=0.005)


def test_a_connector_without_the_hybrid_manager_allocates_sliding_layers_fully() -> None:
    """vLLM turns the hybrid KV cache manager off for a connector that does not support
    it (LMCache's): gpt-oss's sliding layers then hold every token, one group of 24 layers
    of 2,048 B/token: 10 GiB // (24 x 32,768) = 13,653 blocks, 13,653 x 16 tokens."""
    base = ("--model", str(CONFIGS / "gpt-oss-20b"), "--timing-model", "roofline")
    lmcache = ("--kv-offloading-size", "4", "--kv-offloading-backend", "lmcache")
    native = ("--kv-offloading-size", "4", "--kv-offloading-backend", "native")
    off = step_timing(load(*base, "--kv-cache-memory-bytes", "10G", *lmcache), {})
    on = step_timing(load(*base, "--kv-cache-memory-bytes", "10G", *native), {})
    assert off is not None and on is not None
    assert (off.pool_blocks, off.kv_cache_tokens) == (13_653, 13_653 * 16)
    assert on.kv_layout is not None and len(on.kv_layout.groups) == 2
    # A Mamba hybrid cannot run without it: vLLM fails to start, so does the simulator.
    granite = ("--model", str(CONFIGS / "granite-4.0-h-small"), "--timing-model", "roofline")
    with pytest.raises(ConfigError, match="needs the hybrid KV cache manager"):
        step_timing(load(*granite, *lmcache), {})


def test_a_vision_tower_s_encoder_time_joins_the_prefill_of_an_image() -> None:
    """Gemma 3's SigLIP tower (27 layers of width 1,152, MLP 4,304; 896-pixel images in
    14-pixel patches: 4,096 patches stand for 256 prompt tokens, 16 each). A prefill
    chunk (compute-bound) beginning one image of 256 tokens adds its encoder FLOPs at the
    dense compute rate; without the image, nothing."""
    argv = ("--model", str(CONFIGS / "gemma-3-27b-it"), "--timing-model", "roofline")
    timing = step_timing(load(*argv, "--kv-cache-memory-bytes", "20G"), {})
    assert timing is not None and isinstance(timing.model, RooflineModel)
    model = timing.model
    vision = model.vision
    assert vision is not None and vision.patches_per_token == 16
    per_layer = 4 * 1152 * 1152 + 2 * 1152 * 4304
    flops = 27 * (2 * per_layer * 4096 + 4 * 1152 * 4096 * 4096)
    assert vision.flops(256, 256 * 256) == flops
    plain, image = StepLoad(), StepLoad()
    plain.add_prefill(0, 2048, True)
    image.add_prefill(0, 2048, True)
    image.add_encoder(256, 256 * 256)
    gpu = GPUS["H100"]
    rate = gpu.bf16_tflops * 1e12 * gpu.compute_efficiency
    extra = model.step_seconds(image) - model.step_seconds(plain)
    assert extra == pytest.approx(flops / rate, rel=1e-6)
