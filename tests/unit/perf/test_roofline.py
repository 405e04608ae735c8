"""The closed-form step model against measured vLLM steps (set B: Llama-3.1-8B bf16 on an
RTX PRO 6000; set C: vLLM CI's H100 latency run), its shape, and the KV cache size."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import pairwise

import pytest

from vllm_sim.perf import (
    GPUS,
    PRESETS,
    ModelShape,
    RooflineModel,
    StepLoad,
    StepTimeModel,
    dtype_bytes,
    gpu_spec,
)
from vllm_sim.perf.roofline import DEFAULT_ACTIVATION_RESERVE_BYTES

LLAMA_8B = PRESETS["meta-llama/Llama-3.1-8B-Instruct"]
LLAMA_70B = PRESETS["meta-llama/Llama-3.1-70B-Instruct"]
GIB = 2**30


def decode_step(batch: int, context: int) -> StepLoad:
    load = StepLoad()
    for _ in range(batch):
        load.add_decode(context)
    return load


def prefill_step(chunk: int, already: int = 0, sequences: int = 1) -> StepLoad:
    load = StepLoad()
    for _ in range(sequences):
        load.add_prefill(already, chunk, completes=True)
    return load


def rtx_pro_6000() -> RooflineModel:
    return RooflineModel(LLAMA_8B, gpu_spec("RTX-PRO-6000"))


def report(label: str, predicted_ms: float, measured_ms: float) -> float:
    error = predicted_ms / measured_ms - 1
    print(f"{label}: predicted {predicted_ms:.1f} ms, measured {measured_ms:.1f} ms, {error:+.1%}")
    return error


# Section 3, set B: the five per-step points the spec quotes.
@pytest.mark.parametrize(
    ("load", "measured_ms"),
    [
        pytest.param(decode_step(1, 1024), 12.8, id="decode-B1-ctx1k"),
        pytest.param(decode_step(32, 1024), 18.6, id="decode-B32-ctx1k"),
        pytest.param(decode_step(128, 1024), 34.8, id="decode-B128-ctx1k"),
        pytest.param(decode_step(64, 8192), 89.6, id="decode-B64-ctx8k"),
        pytest.param(prefill_step(1024), 47.9, id="prefill-1024"),
    ],
)
def test_set_b_calibration_points_within_15_percent(load: StepLoad, measured_ms: float) -> None:
    predicted_ms = rtx_pro_6000().step_seconds(load) * 1e3
    assert abs(report("set B", predicted_ms, measured_ms)) <= 0.15


# The whole decode grid of the same profile (LLMServingSim step.csv, CUDA graphs on):
# batch -> (ms at context 1024, ms at context 8192).
SET_B_DECODE_MS: dict[int, tuple[float, float | None]] = {
    1: (12.817, 13.940),
    2: (13.121, 15.250),
    4: (13.320, 17.432),
    8: (13.976, 22.267),
    16: (15.417, 32.144),
    24: (17.170, 42.406),
    32: (18.560, 51.617),
    40: (19.903, 60.905),
    48: (21.972, 75.918),
    56: (23.169, 83.352),
    64: (24.036, 89.622),
    72: (25.424, None),
    80: (26.722, None),
    88: (28.143, None),
    96: (30.078, None),
    104: (31.154, None),
    112: (32.176, None),
    120: (33.444, None),
    128: (34.771, None),
}


def test_set_b_decode_grid_within_15_percent() -> None:
    model = rtx_pro_6000()
    errors = []
    for batch, by_context in SET_B_DECODE_MS.items():
        for context, measured_ms in zip((1024, 8192), by_context, strict=True):
            if measured_ms is not None:
                predicted_ms = model.step_seconds(decode_step(batch, context)) * 1e3
                errors.append(report(f"B={batch} ctx={context}", predicted_ms, measured_ms))
    print(f"MAPE {sum(map(abs, errors)) / len(errors):.1%}, max {max(map(abs, errors)):.1%}")
    assert max(map(abs, errors)) <= 0.15


def test_vllm_ci_h100_latency_run_within_25_percent() -> None:
    """Batch 8, 32 prompt tokens, 128 output tokens: one prefill step of 8 x 32 tokens
    that samples the first token each, then 127 decode steps at growing context. vLLM's
    CI measured 997.5 ms for the whole batch on an H100."""
    model = RooflineModel(LLAMA_8B, GPUS["H100"])
    total = model.step_seconds(prefill_step(32, sequences=8))
    for generated in range(1, 128):
        total += model.step_seconds(decode_step(8, 32 + generated))
    error = report("CI H100 latency, 8 x (32 in, 128 out)", total * 1e3, 997.5)
    assert abs(error) <= 0.25


def test_the_step_formula() -> None:
    """The step model term by term, for a mixed step on two ranks."""
    gpu = replace(GPUS["H100"], layer_overhead_s=7e-6, prefill_layer_overhead_s=30e-6)
    model = RooflineModel(LLAMA_8B, gpu, tensor_parallel=2)
    load = StepLoad()
    load.add_prefill(already=512, chunk=2048, completes=False)
    load.add_prefill(already=0, chunk=100, completes=True)
    for context in (300, 4000, 9000):
        load.add_decode(context)
    shape = LLAMA_8B
    tokens, sampled = 2048 + 100 + 3, 1 + 3
    pairs = 2048 * (512 + 1024) + 100 * 50 + (300 + 4000 + 9000)
    flops = (
        2 * shape.active_params() * tokens
        + 2 * shape.vocab * shape.hidden * sampled
        + 4 * shape.layers * shape.heads * shape.head_dim * pairs
    )
    compute = flops / 2 / (gpu.bf16_tflops * 1e12 * gpu.compute_efficiency)
    weights = (shape.params() - shape.vocab * shape.hidden) * 2 / 2
    kv_tokens = (300 + 4000 + 9000) + (512 + 2048) + 100
    kv = kv_tokens * shape.kv_bytes_per_token(2.0, 2)
    bandwidth = gpu.bandwidth_tbps * 1e12
    memory = weights / (bandwidth * gpu.weight_bandwidth_efficiency) + kv / (
        bandwidth * gpu.kv_bandwidth_efficiency
    )
    layers = shape.layers
    # Two ring all-reduces a layer of tokens x hidden 16-bit values, half of each moved
    # twice; one gather of the sampled logits, half of them moved; 450 GB/s of NVLink.
    moved = 0.5 * (tokens * 2 * 2 * layers * shape.hidden * 2 + sampled * shape.vocab * 2)
    communication = (2 * layers + 1) * gpu.allreduce_s + moved / 450e9
    fixed = (
        gpu.step_overhead_s
        + layers * (7e-6 + 30e-6)
        + 5 * gpu.per_request_overhead_s
        + communication
    )
    assert model.step_seconds(load) == pytest.approx(max(compute, memory) + fixed, rel=1e-12)
    assert compute > memory  # 2,151 tokens: past the ridge point


def test_a_decode_only_step_pays_no_prefill_overhead() -> None:
    gpu = replace(GPUS["H100"], prefill_layer_overhead_s=50e-6)
    model = RooflineModel(LLAMA_8B, gpu)
    base = RooflineModel(LLAMA_8B, replace(gpu, prefill_layer_overhead_s=0.0))
    assert model.step_seconds(decode_step(8, 1000)) == base.step_seconds(decode_step(8, 1000))
    mixed = decode_step(8, 1000)
    mixed.add_prefill(0, 64, completes=True)
    extra = model.step_seconds(mixed) - base.step_seconds(mixed)
    assert extra == pytest.approx(LLAMA_8B.layers * 50e-6)


def test_an_moe_decode_step_reads_only_the_experts_its_tokens_route_to() -> None:
    """Mixtral: 2 of 8 experts a token. One sequence reads a quarter of the experts, 64
    read all of them but a 0.75^64 sliver; the step time follows."""
    mixtral = PRESETS["mistralai/Mixtral-8x7B-Instruct-v0.1"]
    gpu = replace(GPUS["H100"], step_overhead_s=0.0, per_request_overhead_s=0.0)
    model = RooflineModel(mixtral, gpu)
    experts = mixtral.expert_params() * 2 / (gpu.bandwidth_tbps * 1e12)
    experts /= gpu.weight_bandwidth_efficiency
    one, many = model.step_seconds(decode_step(1, 1)), model.step_seconds(decode_step(64, 1))
    others = one - 0.25 * experts
    assert many == pytest.approx(others + (1 - 0.75**64) * experts, rel=1e-3)
    assert one < 0.5 * many


def test_routed_experts_compute_at_their_own_efficiency() -> None:
    """A compute-bound MoE prefill chunk slows by the routed experts' FLOPs alone when the
    fused MoE kernels reach half the dense efficiency; a memory-bound decode step does not
    change, and a dense model ignores the coefficient."""
    mixtral = PRESETS["mistralai/Mixtral-8x7B-Instruct-v0.1"]
    fast = replace(GPUS["H100"], moe_compute_efficiency=GPUS["H100"].compute_efficiency)
    slow = replace(fast, moe_compute_efficiency=fast.compute_efficiency / 2)
    chunk = StepLoad()
    chunk.add_prefill(0, 4096, completes=True)
    before = RooflineModel(mixtral, fast).step_seconds(chunk)
    after = RooflineModel(mixtral, slow).step_seconds(chunk)
    routed = 2 * mixtral.routed_active_params() * 4096
    extra = routed / (fast.bf16_tflops * 1e12 * fast.compute_efficiency)  # half speed: 2x
    assert after - before == pytest.approx(extra, rel=1e-6)
    assert mixtral.routed_active_params() == 32 * 2 * 3 * 4096 * 14336
    decode = decode_step(8, 512)
    assert RooflineModel(mixtral, slow).step_seconds(decode) == pytest.approx(
        RooflineModel(mixtral, fast).step_seconds(decode)
    )
    assert RooflineModel(LLAMA_8B, slow).step_seconds(chunk) == pytest.approx(
        RooflineModel(LLAMA_8B, fast).step_seconds(chunk)
    )


def test_tensor_parallel_traffic_costs_more_over_pcie_than_nvlink() -> None:
    """Latency plus bandwidth: the same TP2 step pays its bytes over the link, 450 GB/s
    of NVLink or 64 GB/s of PCIe 5.0, and the PCIe collective's longer latency."""
    nvlink = GPUS["H100"]
    pcie = replace(nvlink, link_gbps=64.0, allreduce_s=30e-6)
    step = prefill_step(2048)
    fast = RooflineModel(LLAMA_8B, nvlink, tensor_parallel=2).step_seconds(step)
    slow = RooflineModel(LLAMA_8B, pcie, tensor_parallel=2).step_seconds(step)
    activations = 2048 * 2 * 2 * LLAMA_8B.layers * LLAMA_8B.hidden * 2 * 0.5
    logits = LLAMA_8B.vocab * 2 * 0.5
    expected = (activations + logits) * (1 / 64e9 - 1 / 450e9) + 65 * (30e-6 - nvlink.allreduce_s)
    assert slow - fast == pytest.approx(expected, rel=1e-9)
    assert GPUS["RTX-PRO-6000"].link_gbps == 64.0
    assert GPUS["H100-PCIe"].allreduce_s > nvlink.allreduce_s


def test_a_mesh_link_grows_with_the_group() -> None:
    mi300x = GPUS["MI300X"]
    assert mi300x.link_bytes_per_s(2) == 64e9
    assert mi300x.link_bytes_per_s(8) == 448e9
    assert GPUS["H100"].link_bytes_per_s(2) == GPUS["H100"].link_bytes_per_s(8) == 450e9


def test_the_api_server_time_grows_with_the_prompt() -> None:
    gpu = replace(GPUS["H100"], api_server_s=0.008, api_server_s_per_token=5e-6)
    model = RooflineModel(LLAMA_8B, gpu)
    assert model.admission_delay(0) == 0.008
    assert model.admission_delay(1000) == pytest.approx(0.013)


def test_step_load_sums() -> None:
    load = StepLoad()
    load.add_prefill(already=100, chunk=50, completes=False)
    load.add_prefill(already=0, chunk=10, completes=True)
    load.add_decode(700)
    assert load == StepLoad(
        prefill_tokens=60,
        prefill_attention=50 * (100 + 25) + 10 * 5,
        prefill_kv_tokens=150 + 10,
        decode_seqs=1,
        decode_context=700,
        sampled=2,
        requests=3,
    )
    assert load.tokens == 61 and not load.is_empty and StepLoad().is_empty


def test_decodes_added_at_once_sum_as_one_by_one() -> None:
    one_by_one = StepLoad()
    for context in (100, 250, 4000):
        one_by_one.add_decode(context)
    at_once = StepLoad()
    at_once.add_decodes(3, 4350)
    assert at_once == one_by_one


def test_an_empty_step_takes_no_time() -> None:
    assert rtx_pro_6000().step_seconds(StepLoad()) == 0.0


def test_step_time_grows_with_the_decode_batch_the_context_and_the_chunk() -> None:
    model = RooflineModel(LLAMA_8B, GPUS["H100"])
    by_batch = [model.step_seconds(decode_step(b, 2048)) for b in (1, 2, 8, 64, 256, 1024)]
    by_context = [model.step_seconds(decode_step(32, c)) for c in (128, 1024, 8192, 32768)]
    by_chunk = [model.step_seconds(prefill_step(c)) for c in (16, 256, 1024, 4096, 8192)]
    for series in (by_batch, by_context, by_chunk):
        assert all(a < b for a, b in pairwise(series))
    # Compute-bound chunks: doubling the chunk about doubles the step.
    assert 1.8 < by_chunk[-1] / by_chunk[-2] < 2.2


def test_a_prefill_chunk_late_in_a_prompt_costs_more_than_an_early_one() -> None:
    model = RooflineModel(LLAMA_8B, GPUS["H100"])
    early = model.step_seconds(prefill_step(2048, already=0))
    late = model.step_seconds(prefill_step(2048, already=30000))
    assert late > early


def test_tensor_parallel_lowers_an_8b_decode_step() -> None:
    one = RooflineModel(LLAMA_8B, GPUS["H100"]).step_seconds(decode_step(32, 2048))
    two = RooflineModel(LLAMA_8B, GPUS["H100"], tensor_parallel=2).step_seconds(
        decode_step(32, 2048)
    )
    assert two < one * 0.7


def test_fp8_weights_lower_a_memory_bound_step() -> None:
    load = decode_step(16, 2048)
    bf16 = RooflineModel(LLAMA_8B, GPUS["H100"]).step_seconds(load)
    fp8 = RooflineModel(LLAMA_8B, GPUS["H100"], weight_bytes=1.0).step_seconds(load)
    assert fp8 < bf16 * 0.75  # the LM head stays 16-bit; KV and overheads remain
    fp8_kv = RooflineModel(LLAMA_8B, GPUS["H100"], kv_bytes=1.0).step_seconds(load)
    assert fp8_kv < bf16


def test_fp8_compute_lowers_a_compute_bound_step_where_the_gpu_has_fp8() -> None:
    load = prefill_step(8192)
    for gpu, faster in ((GPUS["H100"], True), (GPUS["A100-80GB"], False)):
        bf16 = RooflineModel(LLAMA_8B, gpu, weight_bytes=1.0).step_seconds(load)
        fp8 = RooflineModel(LLAMA_8B, gpu, weight_bytes=1.0, compute_dtype="fp8").step_seconds(load)
        # An A100 runs FP8 checkpoints weight-only: its matmuls stay 16-bit.
        assert (fp8 < bf16 * 0.6) if faster else (fp8 == bf16)


@pytest.mark.parametrize(
    ("shape", "weights_gb"),
    [(LLAMA_8B, 16.06), (PRESETS["Qwen/Qwen3-14B"], 29.5)],
)
def test_weight_bytes_match_the_spec_check_table(shape: ModelShape, weights_gb: float) -> None:
    model = RooflineModel(shape, GPUS["H100"])
    assert model.weight_bytes_total() == pytest.approx(weights_gb * 1e9, rel=0.01)


def test_a_step_reads_no_input_embedding_but_a_tied_lm_head() -> None:
    untied = RooflineModel(LLAMA_8B, GPUS["H100"])
    embedding = LLAMA_8B.vocab * LLAMA_8B.hidden * 2
    assert untied.weight_bytes_read() == untied.weight_bytes_total() - embedding
    tied = RooflineModel(PRESETS["meta-llama/Llama-3.2-3B-Instruct"], GPUS["H100"])
    assert tied.weight_bytes_read() == tied.weight_bytes_total()


def test_quantized_weights_keep_16_bit_embeddings() -> None:
    fp8 = RooflineModel(LLAMA_8B, GPUS["H100"], weight_bytes=1.0)
    embeddings = LLAMA_8B.embedding_params()
    assert fp8.weight_bytes_total() == (LLAMA_8B.params() - embeddings) + 2 * embeddings


def by_hand_blocks(
    memory_gib: float, utilization: float, weights: float, kv_per_token: float, block: int
) -> float:
    free = memory_gib * GIB * utilization - weights - DEFAULT_ACTIVATION_RESERVE_BYTES
    return free / (kv_per_token * block)


def test_num_gpu_blocks_llama_8b_on_an_h100() -> None:
    blocks = RooflineModel(LLAMA_8B, GPUS["H100"]).num_gpu_blocks(16, 0.9)
    # 72 GiB usable - 14.96 GiB of weights - 2 GiB reserve, in 2 MiB blocks: ~28,000.
    expected = by_hand_blocks(80, 0.9, 8.03e9 * 2, 128 * 1024, 16)
    print(f"Llama-3.1-8B, H100, 0.9, block 16: {blocks} blocks (by hand {expected:.0f})")
    assert blocks > 0
    assert abs(blocks / expected - 1) <= 0.15
    fp8_kv = RooflineModel(LLAMA_8B, GPUS["H100"], kv_bytes=1.0).num_gpu_blocks(16, 0.9)
    assert fp8_kv in (2 * blocks, 2 * blocks + 1)


def test_num_gpu_blocks_against_set_b() -> None:
    """Set B's vLLM run reported 35,913 blocks of 16 at utilisation 0.92."""
    blocks = rtx_pro_6000().num_gpu_blocks(16, 0.92)
    print(f"Llama-3.1-8B, RTX PRO 6000, 0.92, block 16: {blocks} blocks (vLLM: 35,913)")
    assert abs(blocks / 35913 - 1) <= 0.05


def test_num_gpu_blocks_per_rank_and_when_nothing_fits() -> None:
    assert RooflineModel(LLAMA_70B, GPUS["L4"]).num_gpu_blocks(16, 0.9) == 0
    assert RooflineModel(LLAMA_70B, GPUS["H100"]).num_gpu_blocks(16, 0.9) == 0
    four = RooflineModel(LLAMA_70B, GPUS["H100"], tensor_parallel=4).num_gpu_blocks(16, 0.9)
    # Per rank: 72 GiB - 141 GB / 4 - 2 GiB, in blocks of 16 x 320 KiB / 4.
    expected = by_hand_blocks(80, 0.9, 70.55e9 * 2 / 4, 320 * 1024 / 4, 16)
    assert four > 0 and abs(four / expected - 1) <= 0.01
    eight = RooflineModel(LLAMA_8B, GPUS["H100"])
    no_reserve = eight.num_gpu_blocks(16, 0.9, activation_reserve_bytes=0)
    assert no_reserve == eight.num_gpu_blocks(16, 0.9) + 1024  # 2 GiB more, in 2 MiB blocks


@pytest.mark.parametrize(
    ("block_size", "utilization", "reserve"),
    [(0, 0.9, None), (16, 0.0, None), (16, 1.5, None), (16, 0.9, -1.0)],
)
def test_num_gpu_blocks_refuses_bad_arguments(
    block_size: int, utilization: float, reserve: float | None
) -> None:
    with pytest.raises(ValueError):
        rtx_pro_6000().num_gpu_blocks(block_size, utilization, reserve)


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("auto", 2.0),
        ("bfloat16", 2.0),
        ("half", 2.0),
        ("float16", 2.0),
        ("float32", 4.0),
        ("FP8", 1.0),
        ("fp8_e4m3", 1.0),
        ("fp8_e5m2", 1.0),
    ],
)
def test_dtype_bytes(name: str, size: float) -> None:
    assert dtype_bytes(name) == size


def test_an_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        dtype_bytes("int3")


@pytest.mark.parametrize(
    "arguments",
    [{"tensor_parallel": 0}, {"weight_bytes": 0.0}, {"compute_dtype": "fp4"}],
)
def test_a_model_refuses_bad_arguments(arguments: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RooflineModel(LLAMA_8B, GPUS["H100"], **arguments)  # type: ignore[arg-type]


def test_the_roofline_model_is_a_step_time_model() -> None:
    model: StepTimeModel = rtx_pro_6000()
    assert math.isfinite(model.step_seconds(decode_step(1, 1)))


def test_piecewise_cuda_graphs_pay_the_per_layer_cost_at_every_step() -> None:
    gpu = replace(GPUS["H100"], prefill_layer_overhead_s=60e-6)
    full = RooflineModel(LLAMA_8B, gpu)
    piecewise = RooflineModel(LLAMA_8B, gpu, full_cuda_graphs=False)
    decode = decode_step(8, 500)
    assert piecewise.step_seconds(decode) - full.step_seconds(decode) == pytest.approx(
        LLAMA_8B.layers * 60e-6
    )
    mixed = decode_step(8, 500)
    mixed.add_prefill(0, 100, completes=True)
    assert piecewise.step_seconds(mixed) == pytest.approx(full.step_seconds(mixed))
